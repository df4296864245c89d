"""`pytest -m gpu` without a GPU and `pytest -m fabric` without an inventory skip with the reason."""
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from harness.backends.layout import visible_gpus
from harness.commands.reproduce import session_env

ROOT = Path(__file__).resolve().parent.parent


def run_pytest(*args, env=None):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args],
                          cwd=ROOT, capture_output=True, text=True, env=session_env(os.environ if env is None else env))


def test_gpu_tests_skip_with_reason_without_gpu():
    if visible_gpus():
        pytest.skip(f"this machine has GPUs ({', '.join(visible_gpus())}): the gpu tests really run here")
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}  # as a user would start it
    proc = run_pytest("-m", "gpu", "tests_gpu", env=env)
    assert proc.returncode == 0, proc.stdout
    assert "no GPU: JAX has no gpu backend here" in proc.stdout
    assert " passed" not in proc.stdout.splitlines()[-1]


def test_fabric_tests_skip_with_reason_without_inventory():
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_SLICE_INVENTORY"}
    proc = run_pytest("-m", "fabric", "tests_fabric", env=env)
    assert proc.returncode == 0, proc.stdout
    assert "no slice inventory: pass --slice-inventory FILE or set HARNESS_SLICE_INVENTORY" in proc.stdout
    assert " passed" not in proc.stdout.splitlines()[-1]


@pytest.mark.parametrize("markexpr, pinned", [
    ("cpu", True), ("cpu and not slow", True), ("(cpu)", True), ("", False), (None, False), ("gpu", False),
    ("cpu or gpu", False), ("not gpu", False), ("not cpu", False), ("not (gpu or fabric)", True),
    ("fabric", False)])
def test_the_cpu_suite_is_pinned_to_the_cpu_even_beside_a_gpu(markexpr, pinned):
    from conftest import cpu_only

    assert cpu_only(markexpr) is pinned


def test_this_cpu_run_compiles_for_the_cpu(pytestconfig):
    import jax

    from conftest import cpu_only

    if not cpu_only(pytestconfig.option.markexpr):
        pytest.skip(f"not a `pytest -m cpu` run (-m {pytestconfig.option.markexpr!r}): JAX picks its own backend")
    assert os.environ.get("JAX_PLATFORMS") == "cpu" and jax.default_backend() == "cpu"


def test_this_process_compiles_through_a_cache_of_its_own(compilation_cache):
    """conftest.compilation_cache: a compile here lands in the session's cache; a process this one
    starts (a VM's worker, a command) has no cache and compiles everything itself."""
    import jax
    import jax.numpy as jnp

    if compilation_cache is None:
        pytest.skip(f"the run set its own compilation cache ({jax.config.jax_compilation_cache_dir})")
    before = set(compilation_cache.iterdir())
    seed = uuid.uuid4().int % 2**20 + 1  # in the program's text: no earlier test compiled it

    def program_of_this_test(x):
        return (x * seed).sum()

    assert int(jax.jit(program_of_this_test)(jnp.arange(5))) == 10 * seed
    assert set(compilation_cache.iterdir()) > before
    assert "JAX_COMPILATION_CACHE_DIR" not in os.environ
    child = subprocess.run([sys.executable, "-c", "import jax; print(jax.config.jax_compilation_cache_dir)"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "None"


def test_the_sessions_compilation_cache_is_gone_when_it_ends(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    proc = run_pytest("-q", "-m", "cpu", "tests_cpu/test_markers.py::test_this_process_compiles_through_a_cache_of_its_own",
                      env={**env, "TMPDIR": str(tmp_path)})
    # passed, not skipped: the inner session made its cache in its TMPDIR
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1].startswith("1 passed"), proc.stdout + proc.stderr
    assert not list(tmp_path.glob("harness-jax-cache-*")), sorted(tmp_path.iterdir())


@pytest.mark.parametrize("args, said", [
    (["--claims-slices", "UTAH-GPN,nowhere.toml"], "--claims-slices: slice 'nowhere.toml' is neither"),
    (["--trial-model", "gpt9"], "--trial-model: unknown model 'gpt9'"),
    (["--trial-repeats", "4"], "--trial-repeats: trial budget: repeats must be at least 5"),
    (["--memory-models", "gpt2m,gpt9"], "--memory-models: unknown model 'gpt9'"),
])
def test_bad_claims_options_stop_the_session_in_one_line(args, said):
    """Before collection: they once surfaced as an error in every claims test, each with a traceback."""
    proc = run_pytest("--collect-only", "-q", "tests_cpu/test_claims.py", *args)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:]
    assert proc.stderr.strip().startswith(f"ERROR: {said}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("written, said", [
    (False, "--slice-inventory: slice inventory {path}: no such file"),
    (True, "--slice-inventory: {path} (inventory): slice one-vm has one VM, and the claims compare runs on all"),
])
def test_a_bad_slice_inventory_stops_the_fabric_session_in_one_line(tmp_path, written, said):
    path = tmp_path / "one-vm.toml"
    if written:
        path.write_text('ray_address = "127.0.0.1:6379"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n')
    proc = run_pytest("--collect-only", "-q", "-m", "fabric", "tests_fabric", "--slice-inventory", str(path))
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:]
    assert proc.stderr.strip().startswith(f"ERROR: {said.format(path=path)}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_claims_plugin_loads_without_jax():
    """pytest loads the plugin before any conftest, and the conftest must still be able to give
    JAX its four CPU devices: loading the plugin imports neither JAX nor anything that does."""
    code = "import sys, harness.suite.plugin; print(sorted(m for m in ('jax', 'scipy') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_the_gpu_trials_come_in_the_order_of_the_vms_they_train_on():
    """On a shared GPU one group of VMs holds it at a time and a group that comes back compiles
    again: the GPU backend runs all VMs of every slice, then each VM alone across the slices."""
    proc = run_pytest("--collect-only", "-q", "-m", "gpu", "tests_gpu/test_claims_gpu.py")
    ids = [line.split("[", 1)[1].rstrip("]") for line in proc.stdout.splitlines() if "::test_trial[" in line]
    groups = [i.rsplit("-", 1)[1] for i in ids]
    assert ids and groups == sorted(groups, key=lambda g: (g != "4gpu", g)), proc.stdout[-2000:] + proc.stderr
    cpu = run_pytest("--collect-only", "-q", "-m", "cpu", "tests_cpu/test_claims.py")
    assert sorted(ids) == sorted(line.split("[", 1)[1].rstrip("]") for line in cpu.stdout.splitlines()
                                 if "::test_trial[" in line)  # the same trials as on CPU


UNTIMED_PROBES = {
    "benchmark": "@pytest.mark.slow\n@pytest.mark.untimed\ndef test_it(benchmark):\n    benchmark(sum, [1])\n",
    "its claims backend": "@pytest.mark.slow\n@pytest.mark.untimed\n@pytest.mark.claims_backend('local')\n"
                          "def test_it():\n    pass\n",
    "not slow": "@pytest.mark.untimed\ndef test_it():\n    pass\n",
    # a file outside the suite has no tier of its own: the mark puts it in tests_cpu's fast tier
    "in the fast tier but times": "@pytest.mark.cpu\ndef test_it(benchmark):\n    benchmark(sum, [1])\n",
}


@pytest.mark.parametrize("said", UNTIMED_PROBES)
def test_a_timed_test_in_a_tier_run_side_by_side_stops_the_session_before_it_runs(tmp_path, said):
    """CI runs the untimed slow tests and the fast tier side by side (-n 2): a test that times
    something, or brings up slices whose processes the leak checks count, must not be among them.
    The suite's conftest, loaded as a plugin, judges a test file outside the suite."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("import pytest\n\n\n" + UNTIMED_PROBES[said])
    proc = run_pytest("-c", str(ROOT / "pyproject.toml"), "-p", "conftest", "--collect-only", "-q", str(probe))
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().startswith("ERROR: ") and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_untimed_slow_tests_time_nothing():
    """The suite's own marks pass that check, and the mark splits the slow tier in two."""
    untimed = run_pytest("--collect-only", "-q", "-m", "cpu and slow and untimed")
    assert untimed.returncode == 0, untimed.stdout[-2000:] + untimed.stderr[-2000:]
    assert "tests_cpu/test_techniques.py::" in untimed.stdout and "tests_cpu/test_claims.py::" not in untimed.stdout
