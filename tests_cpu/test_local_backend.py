"""The claims' trial path through the local backend (harness.backends.local.LocalCluster): the
same test_trial the emulated and live backends run, each trial a pytest-benchmark test, then the
claims over the table. No root, Ray or delay: it shows that the runner and the Cluster protocol
carry a trial end to end, not the paper's latencies, so the claims are made, not judged."""
import numpy as np
import pytest

from harness.paper import claims
from harness.suite import checks
from harness.suite.claims_tests import test_trial  # noqa: F401 - the claims' own trial test
from harness.suite.session import ClaimsLog

# scale-tiny: the path is under test, and the whole module takes a minute on 2 cores
pytestmark = [pytest.mark.slow, pytest.mark.claims_backend("local", model="scale-tiny")]


@pytest.fixture(scope="module")
def claims_log(pytestconfig):
    """This module's own log: its loopback records must not join the session's report, nor stand
    in for the emulated backend's records of the same trials."""
    log = ClaimsLog(pytestconfig)
    log.directory = None
    return log


def test_every_trial_ran_over_loopback_and_trained_as_one_device_does(backend, claims_log):
    recs = checks.ensure_trials(backend.runner, claims_log, backend.trials)
    assert [r["status"] for r in recs] == ["ok"] * len(backend.trials), [r["reason"] for r in recs]
    across = [r for r in recs if r["cluster"]["hosts"] > 1]
    assert across and all(r["cluster"]["network"]["mechanism"] == "loopback" for r in across)
    assert all(r["cluster"]["network"]["rtt_ms"] > 0 for r in across)  # measured by the UDP probes
    assert all(r["cluster"]["network"]["mechanism"] is None for r in recs if r["cluster"]["hosts"] == 1)
    runner = backend.runner
    for (vms, technique), losses in runner.history.items():
        np.testing.assert_allclose(losses, runner.reference_losses(len(vms))[:len(losses)], rtol=1e-4,
                                   err_msg=f"{technique} on {'+'.join(vms)}")


@pytest.mark.parametrize("claim", claims.TIMED_CLAIMS, ids=lambda c: c.__name__)
def test_each_claim_reads_the_local_table(claim, backend, claims_log):
    """A verdict comes out of the same records; on loopback it says nothing of the paper."""
    recs = checks.ensure_trials(backend.runner, claims_log, backend.trials)
    verdict = claim(claims.Table(recs, backend.slices))
    assert verdict.part and not verdict.crashed, verdict.evidence


def test_where_one_group_holds_the_gpus_at_a_time_the_runner_releases_the_others(backend, claims_log):
    """Emulated VMs on shares of one GPU (Cluster.one_group_at_a_time): before a group trains,
    every other group's processes stop, and a group that comes back builds its step again and
    trains from the first step, as the single-device reference does."""
    runner = backend.runner
    together = next(t for t in backend.trials if t.vms == "all" and t.technique == "Data")
    alone = next(t for t in backend.trials if t.vms != "all" and t.technique == "Data")
    both, one = tuple(runner.vms_of(together)), tuple(runner.vms_of(alone))
    checks.ensure_trials(runner, claims_log, [together, alone])  # both groups open, both steps built
    assert {both, one} <= runner.cluster.groups
    runner.cluster.one_group_at_a_time = True
    try:
        first = runner.measure(together, lambda r: None)
        assert first["status"] == "ok", first["reason"]
        assert runner.cluster.groups == {both} and {k[0] for k in runner.built} == {both}
        again = runner.measure(alone, lambda r: None)
        assert again["status"] == "ok", again["reason"]
        assert runner.cluster.groups == {one} and {k[0] for k in runner.built} == {one}
        steps = runner.budget.warmup_steps + runner.budget.repeats
        assert len(runner.history[(one, "Data")]) == steps  # built anew: its history starts over
        np.testing.assert_allclose(runner.history[(one, "Data")], runner.reference_losses(1)[:steps], rtol=1e-4)
    finally:
        runner.cluster.one_group_at_a_time = False


def test_a_group_whose_worker_died_fails_its_trial_and_is_opened_anew(backend, claims_log):
    """Runs last: it kills a worker of the module's cluster."""
    runner = backend.runner
    trial = next(t for t in backend.trials if t.vms == "all" and t.technique == "Data")
    vms = tuple(runner.vms_of(trial))
    assert runner.prepare(trial).status == "ok"  # the group is open and its step built
    runner.cluster.servers[vms][0].proc.kill()
    failed = runner.measure(trial, lambda r: None)
    assert failed["status"] == "error" and "killed by SIGKILL" in failed["reason"], failed["reason"]
    assert vms not in runner.cluster.groups and not any(k[0] == vms for k in runner.built)
    again = runner.measure(trial, lambda r: None)
    assert again["status"] == "ok" and again["timing"]["compile_s"] > 0, again["reason"]


def test_a_runner_with_a_held_out_split_measures_the_loss_of_what_a_step_has_trained():
    """Runner(held_out=...) gives every job a held-out split; held_out_loss asks the group's
    workers for the loss of their model on it, which training lowers. A runner without one
    answers with a failure that says so."""
    from harness.backends import local
    from harness.backends.contract import Failed
    from harness.core.config import Budget
    from harness.platform import slices
    from harness.runs import trials

    sl = slices.load("UTAH-GPN")
    trial = trials.Trial.on(sl, "Data")
    with local.local(sl) as cluster:
        runner = trials.Runner(cluster, [sl], Budget(model="scale-tiny"), held_out=0.01)
        prepared = runner.prepare(trial)
        assert prepared.status == "ok", prepared.reason
        before = runner.held_out_loss(trial)
        for _ in range(5):
            runner.step(prepared)
        assert runner.held_out_loss(trial) < before
        plain = trials.Runner(cluster, [sl], Budget(model="scale-tiny"))
        cluster.release(tuple(plain.vms_of(trial)))
        assert plain.prepare(trial).status == "ok"
        with pytest.raises(Failed, match="built without a held-out split"):
            plain.held_out_loss(trial)


def test_each_technique_is_timed_to_the_target_data_on_one_vm_sets():
    """The target is the held-out loss Data on VM1 alone reaches after a few steps; Data on all
    VMs and DiLoCo reach it within the cap, with the tokens and timed seconds it took and a loss
    curve that ends at or under it; a cap too short is "not reached", a result of its own."""
    from harness.backends import local
    from harness.backends.contract import Failed
    from harness.core.config import Budget
    from harness.errors import BadInput
    from harness.experiments import time_to_loss
    from harness.platform import slices
    from harness.runs import trials

    sl = slices.load("UTAH-GPN")
    with local.local(sl) as cluster:
        runner = trials.Runner(cluster, [sl], Budget(model="scale-tiny"), held_out=time_to_loss.HELD_OUT,
                               schedule_steps=60, options={"DiLoCo": {"sync_every": 4}})
        target = time_to_loss.target_loss(runner, sl, 20)
        first = {}
        for name in ("Data", "DiLoCo"):
            got = first[name] = time_to_loss.to_target(runner, trials.Trial.on(sl, name), target, eval_every=5,
                                                       cap_steps=60)
            assert got.status == "reached", got
            assert got.curve[-1][2] <= target < got.curve[0][2] and got.seconds > 0
            assert got.tokens == got.steps * runner.train_config(trials.Trial.on(sl, name)).batch_size * 64
        # DiLoCo's outer model moves only at its syncs (after steps 4, 8, ...): measured every 2
        # steps, it is measured where it has moved since the last time, every 4 steps from step 1.
        sparse = time_to_loss.to_target(runner, trials.Trial.on(sl, "DiLoCo"), target, eval_every=2, cap_steps=60)
        per_step = got.tokens // got.steps
        assert [tokens // per_step for tokens, _, _ in sparse.curve] == list(range(1, sparse.steps + 1, 4))
        assert sparse.status == "reached"
        assert len({loss for _, _, loss in sparse.curve}) == len(sparse.curve)
        short = time_to_loss.to_target(runner, trials.Trial.on(sl, "Shard"), target, eval_every=1, cap_steps=2)
        assert short.status == "not reached" and short.steps == 2 and short.curve[-1][2] > target
        # A repeat starts the compiled step over from the untrained model: the same curve of losses
        # (same seed and data), its own times; and so does the reference.
        again = time_to_loss.to_target(runner, trials.Trial.on(sl, "Data"), target, eval_every=5, cap_steps=60)
        assert [loss for _, _, loss in again.curve] == [loss for _, _, loss in first["Data"].curve]
        assert again.steps == first["Data"].steps and again.link_bytes is None  # loopback: nothing counted
        assert time_to_loss.target_loss(runner, sl, 20) == target
        with pytest.raises(BadInput, match="eval_every must be at least 1 and the cap at least 2 steps, got 0 and 60"):
            time_to_loss.to_target(runner, trials.Trial.on(sl, "Data"), target, eval_every=0, cap_steps=60)
    # a NaN or an infinite loss is a failure, never a result
    for bad in (float("nan"), float("inf")):
        with pytest.raises(Failed, match="Data-UTAH-GPN-4gpu after 3 steps: the held-out loss is"):
            time_to_loss.measured(bad, "Data-UTAH-GPN-4gpu after 3 steps")
    assert time_to_loss.measured(2.5, "x") == 2.5
