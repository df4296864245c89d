"""The paper's claims on this machine's GPUs (marker gpu): the emulated slices of tests_cpu, with
each emulated VM given its own GPUs and NCCL kept off shared memory, so traffic crosses the link.

    pytest -m gpu --trial-model gpt2m            # paper scale, on a machine with 4 GPUs or more
Skips with the reason when this machine has fewer GPUs than a slice needs.
"""
import pytest

from harness import claims, claims_plugin
from harness.claims_plugin import check_claim, claim_slices, ensure_trials, run_trial, trial_list
from harness.emulation import netns


# Module scope: the cluster is torn down when this module's tests are done, not held (with its
# Ray processes and workers) through the rest of the session, where it would disturb other timings.
@pytest.fixture(scope="module")
def runner(pytestconfig):
    import jax

    chosen = claim_slices(pytestconfig)
    need = max(sum(vm.gpus for vm in sl.vms) for sl in chosen)
    have = len(jax.devices("gpu"))
    if have < need:
        pytest.skip(f"too few GPUs: the slices need {need} (one set per emulated VM), JAX sees {have}")
    problem = netns.missing_privileges()
    if problem:
        pytest.skip(f"cannot emulate slices here: {problem}")
    from harness import trials

    with trials.emulated(chosen, claims_plugin.budget(pytestconfig), platform="gpu") as r:
        yield r


def test_trial(trial, runner, benchmark, claims_log):
    run_trial(trial, runner, benchmark, claims_log)


@pytest.mark.parametrize("claim", claims.TIMED_CLAIMS, ids=lambda c: c.__name__)
def test_claim(claim, runner, claims_log, pytestconfig):
    table = claims.Table(ensure_trials(runner, claims_log, trial_list(pytestconfig)), claim_slices(pytestconfig))
    check_claim(claim(table), claims_log, {})
