"""The paper's claims on this machine's GPUs (marker gpu): the emulated slices of tests_cpu, with
each emulated VM given its own GPUs and NCCL kept off shared memory, so traffic crosses the link.

    pytest -m gpu                                                   # the scale model
    pytest -m gpu --trial-model gpt2m --trial-precision bfloat16   # paper scale
On fewer GPUs than a slice needs (one GPU), the emulated VMs share them: a worker process per
emulated GPU with its share of the memory (harness/backends/layout.py).
"""
import pytest

from harness.suite.claims_tests import *  # noqa: F403 - the claims' tests, run on the backend below

pytestmark = pytest.mark.claims_backend("emulated-gpu")
