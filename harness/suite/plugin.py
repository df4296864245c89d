"""The claims' pytest plugin, registered as the `pytest11` entry point `harness-claims`: options,
the claims_backend marker, the trial parametrization and the fixtures (`claims_log`, `backend`).

It imports nothing heavy at load time: pytest loads it before any conftest, and a conftest may
still have to configure JAX (the number of CPU devices) before JAX is imported."""
import dataclasses
import signal

import pytest

from harness import interrupts
from harness.errors import BadInput
from harness.suite import options
from harness.suite.backends import MARKER, REGISTRY, backend, live_slice, registered_of  # noqa: F401 - fixtures
from harness.suite.session import claims_log  # noqa: F401


def pytest_addoption(parser):
    options.add_options(parser)


def pytest_configure(config):
    # A CI job cancelled, `timeout` or `kill` sends SIGTERM: the session then tears down its
    # slices, clusters and workers as on Ctrl-C, where Python's default would leave them running.
    interrupts.tear_down_on(signal.SIGTERM, replace=False)
    config.addinivalue_line("markers", f"{MARKER}(name): the backend a claims test module runs its trials on: "
                                       + "; ".join(f"{b.name}, {b.about}" for b in REGISTRY.values()))
    # Bad options stop the session in one line, before any test is collected.
    try:
        run = options.run_config(config).check()
    except BadInput as e:
        raise pytest.UsageError(str(e)) from None
    if run.slices not in ("quick", "all"):
        # deferred: pytest loads the plugin before conftest configures JAX
        from harness.analysis import memory

        # The memory claims compile for every GPU of the largest slice; Table I's 4 are the conftest's.
        memory.provide_cpu_devices(run.claim_slices)


def pytest_generate_tests(metafunc):
    """A test that takes `trial` runs once per trial of its module's backend."""
    if "trial" not in metafunc.fixturenames:
        return
    registered = registered_of(metafunc.definition)
    if registered is None:
        return
    wanted = registered.trials(metafunc.config)
    metafunc.parametrize("trial", wanted or [None], ids=[t.label for t in wanted] or ["no-trials"])


def pytest_benchmark_update_json(config, benchmarks, output_json):
    """Each trial's parameter in the benchmark JSON as its fields, where pytest-benchmark would
    write `UNSERIALIZABLE[Trial(...)]`: regression tracking reads these reports by machine."""
    # deferred: pytest loads the plugin before conftest configures JAX
    from harness.runs.trials import Trial

    for bench in output_json.get("benchmarks", []):
        params = bench.get("params") or {}
        if isinstance(params.get("trial"), Trial):
            params["trial"] = dataclasses.asdict(params["trial"])
