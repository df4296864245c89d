"""Suite-wide pytest wiring: a marker per test directory, and precise skips where a test cannot run.

`pytest -m cpu` runs tests_cpu/ (CI); `pytest -m gpu` runs tests_gpu/ and skips each test with the
reason when JAX sees no GPU; `pytest -m fabric` runs tests_fabric/ and skips each test when no slice
inventory is given. None of them passes silently: a skip says why.
"""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from harness.suite import options

# Four CPU devices in the test process, so that one process can play a 1x4, 2x2 or 4x1 cluster.
# Set before JAX is imported anywhere; it has no effect on GPU backends.
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "4")
# With several devices in one process, XLA's CPU runtime can deadlock a step. A device runs two
# of its collectives at once and, as the stuck threads suggest, the threads waiting in them leave
# the device they wait for without a thread to run on. After 40 s XLA aborts the whole process
# ("Termination timeout for ... RendezvousKey"), which CI saw as "Fatal Python error: Aborted".
# With Eigen's multithreading off, no deadlock has been seen
# (tests_cpu/test_techniques.py::test_a_one_process_cluster_pinned_to_one_core_never_deadlocks).
# The emulated VMs' workers do not take this flag: harness.backends.worker.inherited drops
# XLA_FLAGS, so each VM's processes keep XLA's defaults (tests_cpu/test_emulation.py).
ONE_PROCESS_CLUSTER_FLAG = "--xla_cpu_multi_thread_eigen=false"
if ONE_PROCESS_CLUSTER_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {ONE_PROCESS_CLUSTER_FLAG}".strip()
# On a GPU, this process takes memory as it needs it instead of 75% of it at its first look at
# the devices: emulated VMs' worker processes share the GPU with it (harness/backends/layout.py).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

MARKER_BY_DIR = {"tests_cpu": "cpu", "tests_gpu": "gpu", "tests_fabric": "fabric"}
# The claims' options, fixtures and markers come from the harness's own pytest plugin
# (harness/suite/plugin.py, the pytest11 entry point harness-claims), loaded wherever it is installed.


def pytest_configure(config):
    # `pytest -m cpu` is CI's suite on every machine. Where there is a GPU too, its one-process
    # clusters and the commands its tests start still run on the CPU devices, not on the GPU JAX
    # would otherwise pick: a 4-device mesh would not fit on one GPU, and results would differ.
    if cpu_only(config.option.markexpr):
        os.environ.setdefault("JAX_PLATFORMS", "cpu")


@pytest.fixture(scope="session", autouse=True)
def compilation_cache():
    """A persistent compilation cache for this test process, empty when the session starts and
    removed when it ends. The tests compile the same programs many times over (each technique's
    step for several checks, the single-device references): a repeat loads the executable the
    first compile made, its memory analysis included, instead of compiling it again. Only this
    process uses it: the emulated VMs' workers, the GPU compiler's child and the commands the tests
    start compile everything themselves, as a user's run does. A cache the user set up is kept."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cache

    if jax.config.jax_compilation_cache_dir:
        yield None
        return
    path = Path(tempfile.mkdtemp(prefix="harness-jax-cache-"))
    min_seconds = jax.config.jax_persistent_cache_min_compile_time_secs
    # JAX keeps only compiles of a second or more; most of the tests' programs take less, and repeat.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_compilation_cache_dir", str(path))
    try:
        yield path
    finally:
        jax.config.update("jax_compilation_cache_dir", None)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", min_seconds)
        cache.reset_cache()
        shutil.rmtree(path, ignore_errors=True)


def cpu_only(markexpr: str | None) -> bool:
    """Whether `-m markexpr` selects tests_cpu/ and neither tests_gpu/ nor tests_fabric/, read as
    pytest reads it (so `-m "not cpu"` is no CPU-only run)."""
    if not markexpr:
        return False
    # pytest's own parser of -m expressions; private, but the one way to read them as -m does.
    from _pytest.mark.expression import Expression

    expr = Expression.compile(markexpr)
    selects = lambda marker: expr.evaluate(lambda name, **kwargs: name == marker)  # noqa: E731
    return selects("cpu") and not selects("gpu") and not selects("fabric")


def pytest_collection_modifyitems(config, items):
    root = Path(__file__).parent
    for item in items:
        if root not in Path(item.path).parents:
            continue  # a test file outside the suite, run with this conftest as a plugin: no tier
        top = Path(item.path).relative_to(root).parts[0]
        if top in MARKER_BY_DIR:
            item.add_marker(MARKER_BY_DIR[top])

    for item in items:
        if "untimed" in item.keywords:
            check_untimed(item)
        elif "cpu" in item.keywords and "slow" not in item.keywords:
            check_fast(item)

    if any("gpu" in item.keywords for item in items):
        reason = gpu_missing_reason()
        if reason:
            for item in items:
                if "gpu" in item.keywords:
                    item.add_marker(pytest.mark.skip(reason=reason))

    if any("fabric" in item.keywords for item in items):
        reason = inventory_missing_reason(config.getoption("--slice-inventory"))
        if reason:
            for item in items:
                if "fabric" in item.keywords:
                    item.add_marker(pytest.mark.skip(reason=reason))


# What a test times or starts through its fixtures and marks: such a test shares the machine with
# nothing, so it may be neither marked untimed nor in the fast tier (CI runs both side by side, -n 2).
TIMING_FIXTURES = ("benchmark", "emulation", "backend", "claims_log")


def timed_through(item) -> str | None:
    """What the test times or starts slices through, or None."""
    uses = [f for f in TIMING_FIXTURES if f in item.fixturenames]
    return ", ".join(uses) or ("its claims backend" if item.get_closest_marker("claims_backend") else None)


def check_untimed(item) -> None:
    """Stop the session, before any test runs, where the untimed mark would put a timed test or one
    that brings up VMs beside other tests: its times, or the leak checks' counts, would be the other
    test's as well."""
    if "slow" not in item.keywords:
        raise pytest.UsageError(f"{item.nodeid}: marked untimed but not slow; untimed splits the slow tier only")
    if through := timed_through(item):
        raise pytest.UsageError(f"{item.nodeid}: marked untimed but times or starts slices through {through}; "
                                "drop the untimed mark")


def check_fast(item) -> None:
    """The same for the fast tier, which CI runs side by side too."""
    if through := timed_through(item):
        raise pytest.UsageError(f"{item.nodeid}: in the fast tier but times or starts slices through {through}; "
                                "mark it slow")


def gpu_missing_reason() -> str | None:
    import jax

    try:
        gpus = jax.devices("gpu")
    except RuntimeError as e:
        return (f"no GPU: JAX has no gpu backend here ({str(e).splitlines()[0]}); "
                f"devices are {[d.device_kind for d in jax.devices()]}")
    return None if gpus else "no GPU: JAX's gpu backend lists no devices"


def inventory_missing_reason(path: str | None) -> str | None:
    if not path:
        return f"no slice inventory: pass --slice-inventory FILE or set {options.INVENTORY_ENV}"
    if not Path(path).is_file():
        return f"slice inventory {path} does not exist"
    return None
