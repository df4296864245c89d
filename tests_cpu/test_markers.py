"""`pytest -m gpu` without a GPU and `pytest -m fabric` without an inventory skip with the reason."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_pytest(*args, env=None):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args],
                          cwd=ROOT, capture_output=True, text=True, env=env)


def test_gpu_tests_skip_with_reason_without_gpu():
    import jax

    if jax.default_backend() == "gpu":
        pytest.skip("this machine has a GPU: the gpu tests really run here")
    proc = run_pytest("-m", "gpu", "tests_gpu")
    assert proc.returncode == 0, proc.stdout
    assert "no GPU: JAX has no gpu backend here" in proc.stdout
    assert " passed" not in proc.stdout.splitlines()[-1]


def test_fabric_tests_skip_with_reason_without_inventory():
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_SLICE_INVENTORY"}
    proc = run_pytest("-m", "fabric", "tests_fabric", env=env)
    assert proc.returncode == 0, proc.stdout
    assert "no slice inventory: pass --slice-inventory FILE or set HARNESS_SLICE_INVENTORY" in proc.stdout
    assert " passed" not in proc.stdout.splitlines()[-1]
