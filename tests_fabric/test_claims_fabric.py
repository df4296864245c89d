"""The paper's claims on a live slice (marker fabric): the same trials and claims as tests_cpu.

Run pytest on VM1 (a Ray driver needs a local Ray node) with the slice's inventory:
    pytest -m fabric --slice-inventory my-slice.toml
Every technique runs on all VMs and on each VM alone; RTTs are measured between the VMs' actors.
"""
import pytest

from harness.suite.claims_tests import *  # noqa: F403 - the claims' tests, run on the backend below

pytestmark = pytest.mark.claims_backend("live")
