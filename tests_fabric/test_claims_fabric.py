"""The paper's claims on a live slice (marker fabric): the same trials and claims as tests_cpu.

Run pytest on VM1 (a Ray driver needs a local Ray node) with the slice's inventory:
    pytest -m fabric --slice-inventory my-slice.toml
Every technique runs on all VMs and on each VM alone; RTTs are measured between the VMs' actors.
"""
import pytest

from harness import claims, claims_plugin, inventory, trials
from harness.claims_plugin import check_claim, ensure_trials, run_trial


def wanted_trials(config) -> list[trials.Trial]:
    path = config.getoption("--slice-inventory")
    if not path:
        return []
    sl, _, _ = inventory.load(path)
    return trials.trials_for(sl)  # every VM alone too: live VMs differ (Algorithm 1 needs both)


# Module scope: the cluster is torn down when this module's tests are done, not held (with its
# Ray processes and workers) through the rest of the session, where it would disturb other timings.
@pytest.fixture(scope="module")
def runner(pytestconfig, live_slice):
    sl, address, platform = live_slice
    with trials.live(sl, address, claims_plugin.budget(pytestconfig), platform) as r:
        yield r


def test_trial(trial, runner, benchmark, claims_log):
    run_trial(trial, runner, benchmark, claims_log)


@pytest.mark.parametrize("claim", claims.TIMED_CLAIMS, ids=lambda c: c.__name__)
def test_claim(claim, runner, claims_log, pytestconfig, live_slice):
    table = claims.Table(ensure_trials(runner, claims_log, wanted_trials(pytestconfig)), [live_slice[0]])
    check_claim(claim(table), claims_log, {})
