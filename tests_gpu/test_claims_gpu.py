"""The paper's claims on this machine's GPUs (marker gpu): the emulated slices of tests_cpu, with
each emulated VM given its own GPUs and NCCL kept off shared memory, so traffic crosses the link.

    pytest -m gpu --trial-model gpt2m            # paper scale, on a machine with 4 GPUs or more
Skips with the reason when this machine has fewer GPUs than a slice needs.
"""
import pytest

from harness.suite.claims_tests import *  # noqa: F403 - the claims' tests, run on the backend below

pytestmark = pytest.mark.claims_backend("emulated-gpu")
