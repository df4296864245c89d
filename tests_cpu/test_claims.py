"""The paper's claims on the emulated Table I slices, with the CPU scale model (marker cpu).

Trials: every technique on all VMs of each slice and on one VM alone, through Ray on the emulated
network, timed by pytest-benchmark. One emulated cluster and one compiled step per technique
serve every slice: the link's RTT changes between slices. The claims then judge the table.

The scale model (scale-small: 4 layers, 256 wide, 4.3 M parameters, sequences of 128) and why it
sits in the paper's regime: see the README, "The claims on CPU". Its gradients (17 MB) against one
microbatch's activations (0.5 MB) give a ratio of 34; at the paper's RTTs every cross-VM collective
costs more than a step's compute on one core, as gpt2m's 1.4 GB all-reduce does on the paper's GPUs.

Parts this backend cannot show are declared below with the reason; they are reported as expected
failures with their evidence, never silently passed.
"""
import pytest

from harness import claims, claims_plugin
from harness.claims_plugin import check_claim, claim_slices, ensure_trials, run_trial, trial_list
from harness.emulation import netns

DEVIATIONS = {
    "C1.single-site": "at 0.1 ms the scale model is compute-bound on one core per VM, so Pipeshard's pipeline "
                      "bubble (2 microbatches, 2 stages) costs more than Data's all-reduce; the paper's GPUs "
                      "were not compute-bound this way",
    "C2.order": "over gloo's TCP collectives, ZeRO2's reduce-scatter + all-gather of each gradient is faster than "
                "Data's all-reduce of it once RTTs reach tens of ms, so Data < ZeRO2 does not come out",
    "C2.sensitivity": "same cause as C2.order: ZeRO2's time grows less with RTT than Data's over gloo",
    "C4.zero2-only": "in XLA's memory analysis ZeRO2 saves ~4 GB per GPU over Data for gpt2L (20.5 vs 24.4 GB at "
                     "the stated assumptions), not enough to bring it under a T4's 16 GB while Data stays above",
}


# Module scope: the cluster is torn down when this module's tests are done, not held (with its
# Ray processes and workers) through the rest of the session, where it would disturb other timings.
@pytest.fixture(scope="module")
def runner(pytestconfig):
    problem = netns.missing_privileges()
    if problem:
        pytest.skip(f"cannot emulate slices here: {problem}")
    from harness import trials

    with trials.emulated(claim_slices(pytestconfig), claims_plugin.budget(pytestconfig)) as r:
        yield r


def test_trial(trial, runner, benchmark, claims_log):
    run_trial(trial, runner, benchmark, claims_log)


@pytest.mark.parametrize("claim", claims.TIMED_CLAIMS, ids=lambda c: c.__name__)
def test_claim(claim, runner, claims_log, pytestconfig):
    table = claims.Table(ensure_trials(runner, claims_log, trial_list(pytestconfig)), claim_slices(pytestconfig))
    check_claim(claim(table), claims_log, DEVIATIONS)


@pytest.fixture(scope="session")
def memory_table(pytestconfig, claims_log):
    claims_log.memory = claims_plugin.memory_records(pytestconfig)
    return claims_log.memory


@pytest.mark.parametrize("part", range(5), ids=["C4.most", "C4.least", "C4.fails-first", "C4.zero2-only",
                                                 "C4.gpt2L-one-vm"])
def test_memory_claim(part, memory_table, claims_log, pytestconfig):
    verdict = claims.judge_memory(memory_table, claim_slices(pytestconfig))[part]
    check_claim(verdict, claims_log, DEVIATIONS)
