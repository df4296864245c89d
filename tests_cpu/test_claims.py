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
import dataclasses

import numpy as np
import pytest

from harness import claims, claims_plugin, costmodel_check, data, records, train
from harness.commands import select as select_command
from harness.claims_plugin import check_claim, claim_slices, ensure_trials, run_trial, trial_list
from privileges import require_emulation

# Comparisons this backend cannot show, each with the reason (see claims_plugin.check_claim): they
# are reported as expected failures with their evidence when they do not hold; every other
# comparison of the same part still fails the test.
_GLOO = ("over gloo's TCP collectives, Data's one all-reduce of all 17 MB of gradients (XLA combines them) takes "
         "about as long as, and from ~57 ms longer than, ZeRO2's reduce-scatter and all-gather of each tensor "
         "(16 + 16 collectives)")
_COMPUTE_BOUND = ("at 0.1 ms the scale model is compute-bound on one core per VM, so Pipeshard's pipeline bubble "
                  "(2 microbatches, 2 stages) costs more than Data's and ZeRO2's collectives; the paper's GPUs were "
                  "not compute-bound this way")
_SAME_ARITHMETIC = ("on one emulated VM Data and ZeRO2 do the same arithmetic on the same cores, with no interconnect "
                    "for ZeRO2's two collectives to cost more than Data's one; measured side by side (40 interleaved "
                    "steps each, 4 runs, one with a busy core) their median step times differed by -13% to +4%, so "
                    "the machine's load picks the winner")
_ZERO2_T4 = ("in XLA's memory analysis ZeRO2 saves ~4 GiB per GPU over Data for gpt2L (19.1 vs 22.8 GiB at the "
             "stated assumptions), not enough to bring it under a T4's usable 14.4 GiB")
_SPMD_PIPESHARD = ("our Pipeshard is one SPMD program sized for its larger stage on every GPU, so a T4 or a 24 GiB GPU "
                   "must hold what Alpa's per-stage (MPMD) programs split between the VMs")
_ONE_PROGRAM_PER_HARDWARE = ("the analysis gives one figure per technique, model and GPU, at one stated setup; the "
                             "paper's outcomes on the same hardware differ between slices (see C4.observed), so its "
                             "setup must have differed, and at ours ZeRO2 fits gpt2L on 2 x 24 GiB (20.3 GiB)")
DEVIATIONS = {
    "C1.single-site": {"Pipeshard vs Data": _COMPUTE_BOUND, "Pipeshard vs ZeRO2": _COMPUTE_BOUND},
    "C2.order": {"Data vs ZeRO2": _GLOO + ", so Data < ZeRO2 comes out only at some RTTs"},
    "C2.sensitivity": {"ZeRO2 degrades more than Data": _GLOO + ", so ZeRO2's time grows with RTT about as much "
                                                                "as Data's, and less from ~57 ms"},
    "C3.data-most": {"Data wins more single-VM experiments than ZeRO2": _SAME_ARITHMETIC},
    "C7.geo-pipeshard": {"picks Pipeshard on all VMs": "on the scale model one VM alone trains faster than Pipeshard "
                                                        "on both VMs at 20 ms (C5's mechanism, on every slice), and "
                                                        "Algorithm 1's T per GPU favours the single VM twice over: step 5 "
                                                        "answers a single VM"},
    "C4.zero2-only": {"ZeRO2 runs": _ZERO2_T4},
    "C4.gpt2L-one-vm": {"gpt2L fits no technique on one VM in most slices": _ONE_PROGRAM_PER_HARDWARE},
    "C4.observed": {"gpt2m on 4 GPUs: Pipeshard ran": _SPMD_PIPESHARD, "gpt2l on 4 GPUs: Pipeshard ran": _SPMD_PIPESHARD,
                    "gpt2L on 4 GPUs: Pipeshard ran": _SPMD_PIPESHARD,
                    "gpt2L on 4 GPUs: ZeRO2 ran": _ZERO2_T4, "gpt2L on 4 GPUs: ZeRO2 failed": _ONE_PROGRAM_PER_HARDWARE},
}


# Module scope: the cluster is torn down when this module's tests are done, not held (with its
# Ray processes and workers) through the rest of the session, where it would disturb other timings.
@pytest.fixture(scope="module")
def runner(pytestconfig):
    require_emulation()
    from harness import trials

    with trials.emulated(claim_slices(pytestconfig), claims_plugin.budget(pytestconfig)) as r:
        yield r


def test_trial(trial, runner, benchmark, claims_log):
    run_trial(trial, runner, benchmark, claims_log)


@pytest.mark.parametrize("claim", claims.TIMED_CLAIMS, ids=lambda c: c.__name__)
def test_claim(claim, runner, claims_log, pytestconfig):
    table = claims.Table(ensure_trials(runner, claims_log, trial_list(pytestconfig)), claim_slices(pytestconfig))
    check_claim(claim(table), claims_log, DEVIATIONS)


# Summing gradients over 4 devices rounds differently from one device. On the 4-device batch the
# scale model's loss jumps at step 7 of a 30-step sweep (the full run's), and from about step 12
# training amplifies those roundings: every technique then drifts from the reference by up to
# 2.6% (measured), while the 2-device runs stay within 1e-5. So the first 8 steps (a whole
# quick sweep) must match to 1e-4 and the rest to 5%.
EXACT_STEPS = 8


def test_every_trial_follows_the_single_device_reference(runner, claims_log, pytestconfig):
    """The trials are real training: every compiled step of the sweep (every technique, on both VMs
    and on one, across the latency changes) gives the single-device trainer's losses step for step,
    to 1e-4 for the first EXACT_STEPS steps and within 5% after (see above)."""
    ensure_trials(runner, claims_log, trial_list(pytestconfig))
    references = {}
    for (vms, technique), losses in runner.history.items():
        cfg = dataclasses.replace(runner.train_config_for(len(vms)), steps=runner.schedule_steps)
        if cfg.batch_size not in references:
            packed = data.prepare(runner.model_cfg.vocab_size, cfg.resolved_seq_len(runner.model_cfg),
                                  cfg.batch_size, runner.corpus)
            references[cfg.batch_size] = train.train(runner.model_cfg, cfg, packed).losses
        assert len(losses) == runner.schedule_steps, f"{technique} on {'+'.join(vms)}"
        where = f"{technique} on {'+'.join(vms)}"
        np.testing.assert_allclose(losses[:EXACT_STEPS], references[cfg.batch_size][:EXACT_STEPS], rtol=1e-4, err_msg=where)
        np.testing.assert_allclose(losses, references[cfg.batch_size], rtol=5e-2, err_msg=where)
    assert len(runner.history) == 10  # four techniques on both VMs and on VM1; Data and Shard on VM2


@pytest.fixture(scope="session")
def memory_table(pytestconfig, claims_log):
    claims_log.memory = claims_plugin.memory_records(pytestconfig)
    return claims_log.memory


@pytest.mark.parametrize("claim", claims.MEMORY_CLAIMS, ids=lambda c: c.__name__)
def test_memory_claim(claim, memory_table, claims_log, pytestconfig):
    check_claim(claim(claims.MemoryTable(memory_table, claim_slices(pytestconfig))), claims_log, DEVIATIONS)


def test_cost_model_ranks_the_trials_as_measured(runner, claims_log, pytestconfig):
    """harness.costmodel, calibrated on three of these trials, predicts the others: the ranking of
    every all-VM trial agrees (Spearman >= 0.8), and on every two-site slice it names the same
    fastest and slowest technique. The full comparison goes to costmodel.md in the report."""
    recs = ensure_trials(runner, claims_log, trial_list(pytestconfig))
    result = costmodel_check.check(recs)
    if claims_log.directory:
        claims_log.directory.mkdir(parents=True, exist_ok=True)
        (claims_log.directory / "costmodel.md").write_text(costmodel_check.markdown(result))
    assert result["spearman_all_vms"] >= 0.8, costmodel_check.markdown(result)
    for s in claims.two_site(claims.Table(recs)):
        rows = [x for x in result["rows"] if x["slice"] == s and x["all_vms"]]
        for pick in (min, max):
            assert (pick(rows, key=lambda x: x["measured_s"])["technique"]
                    == pick(rows, key=lambda x: x["predicted_s"])["technique"]), costmodel_check.markdown(result)


def test_select_decides_from_real_trials_on_this_cluster(runner, pytestconfig, tmp_path):
    """`python -m harness select`'s decision on the two-site slice, on this module's cluster (the
    command brings its own up the same way): both modes from one set of trials, each trained and
    recorded once; the planner's skips are counted. Last in the module: it trains past the
    sweep that the reference test above checks."""
    sl = next((s for s in claim_slices(pytestconfig) if s.rtt_ms >= 1.0), None)
    if sl is None:
        pytest.skip("no two-site slice in this run")
    measure = select_command.Trials(runner, sl, tmp_path / "results.jsonl")
    decisions = select_command.decide(measure, ["published", "corrected"], 0.1,
                                      select_command.predictor(sl, runner.budget), 0.3)
    recs = records.read(tmp_path / "results.jsonl")
    ran = {(r["technique"], tuple(r["cluster"]["vms_used"])) for r in recs}
    assert len(recs) == len(ran) == len(select_command.trial_table(measure))
    assert ("Pipeshard", ("vm1", "vm2")) in ran and all(r["status"] == "ok" for r in recs)
    assert [d["mode"] for d in decisions] == ["published", "corrected"]
    for d in decisions:
        assert {(x["technique"], tuple(x["vms"])) for x in d["trials"] if not x.get("skipped")} <= ran
        assert (d["technique"], tuple(d["vms"])) in ran, d["rule"]
