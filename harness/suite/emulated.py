"""The paper's claims on the emulated Table I slices, with the CPU scale model: what `python -m harness
reproduce` runs, and what tests_cpu/test_claims.py collects for `pytest -m cpu`.

Trials: every technique on all VMs of each slice and on one VM alone, through Ray on the emulated
network, timed by pytest-benchmark. One emulated cluster and one compiled step per technique
serve every slice: the link's RTT changes between slices. The claims then judge the table.

The scale model (scale-small by default, harness.core.config) and why it sits in the paper's
regime: see docs/claims.md, "The scale model on CPU"; each run's own figures (its gradients against
a microbatch's activations, its collectives against its compute on each link) are in its report,
similarity.json.

What this backend cannot show is declared in deviations.py as limits (harness.paper.limits): a
contradiction they cover is an expected failure only within the limit's bound and where this run
shows its mechanism, with the reason built from this run; otherwise it fails.
"""
import dataclasses

import numpy as np
import pytest

from harness.analysis import costmodel_check, similarity
from harness.backends.emulation import compute
from harness.commands import select as select_command
from harness.core.config import model_config
from harness.experiments import calibration, measured_selection, rejudge
from harness.paper import claims, deviations, limits
from harness.runs import records
from harness.suite import checks, claims_tests, options

__all__ = ["pytestmark", "test_trial", "test_claim", "test_every_trial_follows_the_single_device_reference",
           "test_the_link_dropped_no_packet_of_any_trial", "test_zero2_put_alpas_bytes_on_the_link",
           "test_the_links_were_calibrated_on_real_trials",
           "test_the_links_give_the_scale_model_the_papers_groups", "test_the_links_document_is_what_the_records_give",
           "memory_table", "test_memory_claim", "test_every_vm_computed_at_the_speed_asked",
           "test_cost_model_ranks_the_trials_as_measured",
           "test_select_decides_from_real_trials_on_this_cluster"]

pytestmark = pytest.mark.claims_backend("emulated-cpu")

# The trials first, each a benchmark, then the claims over them: pytest runs a module's tests in
# the order they are bound here.
test_trial = claims_tests.test_trial
test_claim = claims_tests.test_claim


# Summing gradients over 4 devices rounds differently from one device. On the 4-device batch the
# scale model's loss jumps at step 7 of a 30-step sweep (the full run's), and from about step 12
# training amplifies those roundings: every technique then drifts from the reference by a few
# percent, while the 2-device runs stay within 1e-5. So the first 8 steps (a whole quick sweep)
# must match to 1e-4 and the rest to 5%; a failure prints the drift.
EXACT_STEPS = 8


def test_every_trial_follows_the_single_device_reference(backend, claims_log):
    """The trials are real training: every compiled step of the sweep (every technique, on all VMs
    and on one, across the latency changes) gives the single-device trainer's losses step for step,
    to 1e-4 for the first EXACT_STEPS steps and within 5% after (see above)."""
    runner = backend.runner
    checks.ensure_trials(runner, claims_log, backend.trials)
    sweep = (runner.budget.warmup_steps + runner.budget.repeats) * len(backend.slices)
    for (vms, technique), losses in runner.history.items():
        where = f"{technique} on {'+'.join(vms)}"
        # the sweep's steps, and whole calibration trials' before them where some ran (harness.experiments.calibration)
        per_trial = runner.budget.warmup_steps + runner.budget.repeats
        assert sweep <= len(losses) <= runner.schedule_steps and (len(losses) - sweep) % per_trial == 0, where
        reference = runner.reference_losses(len(vms))[:len(losses)]
        np.testing.assert_allclose(losses[:EXACT_STEPS], reference[:EXACT_STEPS], rtol=1e-4, err_msg=where)
        np.testing.assert_allclose(losses, reference, rtol=5e-2, err_msg=where)
    # Every group of the sweep, whatever the slice's VMs: four techniques on all VMs and on VM1,
    # Data and Shard on each other VM (options.emulated_trials).
    assert len(runner.history) == len({(t.vms, t.technique) for t in backend.trials})


def test_the_link_dropped_no_packet_of_any_trial(backend, claims_log):
    """The emulated link is lossless by default (its queue holds twice the bandwidth-delay
    product): every cross-VM trial's record shows the link's settings and that it dropped nothing
    during the timed steps, so no verdict rides on losses a real path would not have."""
    crossing = [r for r in checks.ensure_trials(backend.runner, claims_log, backend.trials)
                if r["status"] == "ok" and len(r["cluster"]["vms_used"]) > 1]
    assert crossing, "no cross-VM trial ran"
    for r in crossing:
        network, where = r["cluster"]["network"], f"{r['technique']} on {r['cluster']['slice']}"
        assert network["links"] and all(s["queue_packets"] >= 1000 for s in network["links"].values()), where
        assert network["packets"]["packets"] > 0, f"{where}: no packet crossed the link"
        drops = {k: n for k, n in network["packets"].items() if k.startswith("dropped_") and n}
        assert not drops, f"{where}: the link dropped packets {drops}"


# Alpa's ZeRO2 with microbatches all-reduces the gradients and all-gathers the parameters, half
# again Data's bytes (ALPA-WIRE.md); with one microbatch it reduce-scatters, and sends Data's.
ZERO2_OVER_DATA = {True: 1.5, False: 1.0}
WIRE_TOLERANCE = 0.1  # headers, acknowledgements and the scalar collectives, as a share of the bytes


def test_zero2_put_alpas_bytes_on_the_link(backend, claims_log):
    """The wire as the emulated link counted it during the timed steps: on every slice, ZeRO2's
    bytes per step over Data's are what Alpa's ZeRO2 sent."""
    per_step = {}
    for r in checks.ensure_trials(backend.runner, claims_log, backend.trials):
        packets, timing = r["cluster"]["network"].get("packets") or {}, r["timing"]
        timed = len(timing["step_times_s"]) - timing["excluded_warmup_steps"]
        if r["status"] == "ok" and len(r["cluster"]["vms_used"]) > 1 and timed > 0:
            per_step[(r["technique"], r["cluster"]["slice"])] = packets["delivered_bytes"] / timed
    want = ZERO2_OVER_DATA[backend.runner.budget.micro_batches > 1]
    ratios = {s: per_step[("ZeRO2", s)] / per_step[("Data", s)] for (t, s) in per_step
              if t == "ZeRO2" and ("Data", s) in per_step}
    assert ratios, "no slice has both ZeRO2 and Data across its link"
    for s, ratio in ratios.items():
        assert ratio == pytest.approx(want, rel=WIRE_TOLERANCE), f"{s}: ZeRO2 sent {ratio:.3f}x Data's bytes, not {want}x"


def test_the_links_were_calibrated_on_real_trials(backend, claims_log):
    """Similarity scaling as this run did it: the four calibration trials on the first slice's VMs
    (Data on one VM, ZeRO2 and Shard with no delay, Data at CALIBRATION_RTT_MS), then Data on each
    two-site slice's own scaled link until it settled; every trial then ran on its slice's scaled
    link, measured there, with the VMs' scaled TCP buffers, and its record names both links."""
    runner, scaling = backend.runner, backend.scaling
    if scaling.mode == calibration.LITERAL:
        pytest.skip("the links are the paper's (--link-scaling literal): nothing was calibrated")
    kept, first = claims_log.calibration, backend.slices[0]
    every = len(first.vms)  # the slices of one run share their VMs (ray_clusters.emulated)
    assert [(r["technique"], r["cluster"]["hosts"], r["status"], r["cluster"]["slice"]) for r in kept[:4]] == [
        ("Data", 1, "ok", first.name), ("ZeRO2", every, "ok", first.name), ("Shard", every, "ok", first.name),
        ("Data", every, "ok", first.name)]
    assert kept[3]["cluster"]["network"]["rtt_ms"] == pytest.approx(calibration.CALIBRATION_RTT_MS, abs=2.0)
    two_site = [sl.name for sl in backend.slices if sl.rtt_ms >= calibration.TWO_SITE_MS]
    for sl in backend.slices:
        rounds = [(r["technique"], r["cluster"]["hosts"], r["status"]) for r in kept[4:] if r["cluster"]["slice"] == sl.name]
        allowed = range(1, calibration.REFINE_ROUNDS + 1) if sl.name in two_site else range(1)
        assert len(rounds) in allowed and set(rounds) <= {("Data", every, "ok")}, f"{sl.name}: refined by {rounds}"
    c, buffers = scaling.calibration, calibration.tcp_buffer_bytes(model_config(runner.budget.model), first)
    assert c["device_flops"] > 0 and c["link_bytes_per_s"] > 0 and c["per_tensor"] is False
    assert len(c["from_trials"]) == len(kept) and set(c["window_bytes_on"]) == set(two_site)
    scaled = {s.slice: s.rtt_ms for s in scaling.scaled}
    assert all(calibration.RTT_BOUNDS_MS[0] <= ms <= calibration.RTT_BOUNDS_MS[1] for ms in scaled.values()), scaled
    by_paper = sorted(backend.slices, key=lambda sl: sl.rtt_ms)
    assert all(scaled[a.name] < scaled[b.name] for a, b in zip(by_paper, by_paper[1:]) if a.rtt_ms < b.rtt_ms), \
        f"the scaled links left the paper's order: {scaled}"
    measured_on = set()  # the slices where a trial crossed the link: an RTT was measured there
    for r in checks.ensure_trials(runner, claims_log, backend.trials):
        network, paper = r["cluster"]["network"], next(sl for sl in backend.slices if sl.name == r["cluster"]["slice"])
        where = f"{r['technique']} on {paper.name} {'+'.join(r['cluster']['vms_used'])}"
        assert network["scaling"]["mode"] == calibration.SIMILARITY and network["scaling"]["paper_rtt_ms"] == paper.rtt_ms, where
        assert network["scaling"]["rtt_ms"] == pytest.approx(scaled[paper.name]), where
        assert network["scaling"]["tcp_buffer_bytes"] == c["tcp_buffer_bytes"] == buffers, where
        if r["status"] == "ok" and len(r["cluster"]["vms_used"]) > 1:
            assert all(d["tcp_buffer_bytes"] == c["tcp_buffer_bytes"] for d in network["links"].values()), where
            assert network["rtt_ms"] == pytest.approx(scaled[paper.name], rel=0.1, abs=1.0), f"{where}: measured"
            measured_on.add(paper.name)
    assert measured_on == set(scaled), f"no trial crossed the scaled link of {sorted(set(scaled) - measured_on)}"


def test_the_links_give_the_scale_model_the_papers_groups(backend, claims_log):
    """Similarity scaling, checked on this machine's figures: at each slice's link (the scaled one
    the trials ran on; in a literal run, the one scaling would pick from this run's trials), the
    cost model calibrated on the calibration trials gives every technique's latency and bandwidth
    groups within similarity.TOLERANCE of gpt2m's on the paper's slice, and nearer them than the
    paper's own link does. A group beyond the tolerance fails the test unless a declared limit
    excuses it (deviations.SIMILARITY_GROUPS: where this run shows its mechanism, as far as it
    reaches); the table and the judgements go to similarity.md."""
    recs = checks.ensure_trials(backend.runner, claims_log, backend.trials)
    run = claims_log.evidence(backend, recs)
    doc = claims_log.links
    assert len(doc["slices"]) == len(backend.slices), "a slice has no scaled link"
    judged = limits.judge_misses(similarity.misses(doc), deviations.SIMILARITY_GROUPS, run)
    doc["misses"] = judged
    table = similarity.markdown({"tolerance": similarity.TOLERANCE, **doc})
    for s in map(similarity.from_dict, doc["slices"]):
        scaled, literal = s.distance(), s.distance(s.literal)
        assert scaled <= (*literal[:2], literal[2] + 1e-9), \
            f"{s.slice}: scaling moved away from the paper ({scaled} against {literal} on its own link)\n{table}"
    unexcused = [m for m in judged if not (m["excuse"] and m["excuse"]["excused"])]
    assert not unexcused, "groups beyond the tolerance: " + "; ".join(
        f"{m['slice']} {m['technique']} {m['group']} {m['this_run']:.3g} vs the paper's {m['paper']:.3g}"
        + (f" ({m['excuse']['reason']})" if m["excuse"] else " (no declared limit)") for m in unexcused)
    if judged:
        pytest.xfail("within declared limits: " + "; ".join(
            f"{m['slice']} {m['technique']} {m['group']} {m['ratio']:.2g}x off ({m['excuse']['reason']})" for m in judged))


def test_the_links_document_is_what_the_records_give(backend, claims_log):
    """What `judge` reads of a run's links (harness.experiments.rejudge): the document this run
    wrote (similarity.json) is, figure for figure, the one its records give when it is worked out
    again from them alone (calibration.from_run, from the trials, the calibration trials and the
    trial budget), so judging the run again reads what the run itself judged with."""
    recs = checks.ensure_trials(backend.runner, claims_log, backend.trials)
    claims_log.evidence(backend, recs)
    assert claims_log.links is not None, "the run on emulated links wrote no links document"
    runner = backend.runner
    again = calibration.from_run(calibration.ScaleModel.of_records(recs, dataclasses.asdict(runner.budget)), recs,
                                 claims_log.calibration, runner.paper_slices)
    assert again is not None, "the trials' records name no emulated link"
    apart = rejudge.figures_apart({"tolerance": similarity.TOLERANCE, **claims_log.links},
                                  {"tolerance": similarity.TOLERANCE, **again.to_dict()})
    assert not apart, "; ".join(apart)


@pytest.fixture(scope="session")
def memory_table(pytestconfig, claims_log):
    claims_log.memory = checks.memory_records(pytestconfig)
    return claims_log.memory


@pytest.mark.parametrize("claim", claims.MEMORY_CLAIMS, ids=lambda c: c.__name__)
def test_memory_claim(claim, memory_table, claims_log, pytestconfig):
    table = claims.MemoryTable(memory_table, options.claim_slices(pytestconfig))
    checks.check_claim(claim(table), claims_log, deviations.MEMORY_ANALYSIS, limits.Run(memory=memory_table))


def test_every_vm_computed_at_the_speed_asked(backend, claims_log, pytestconfig):
    """With --gpu-speeds each emulated VM computes at its GPU's share of the run's fastest GPU (a
    CPU quota, harness.backends.emulation.compute), and every trial records its VMs' shares as the run's
    slices give them; without, at full speed, and no trial records shares. That the quotas held is
    the cost model's to show: it predicts each VM at its share
    (test_cost_model_ranks_the_trials_as_measured)."""
    recs = checks.ensure_trials(backend.runner, claims_log, backend.trials)
    expected = compute.shares(list(backend.runner.paper_slices.values()))
    limited = options.gpu_speeds(pytestconfig) and compute.limited(expected)
    for r in recs:
        c = r["cluster"]
        want = {vm: expected[c["slice"]][vm] for vm in c["vms_used"]} if limited else None
        assert c.get("compute_shares") == want, f"{costmodel_check.label(r)}: {c.get('compute_shares')} for {want}"


def test_cost_model_ranks_the_trials_as_measured(backend, claims_log):
    """harness.analysis.costmodel, calibrated on the run's calibration trials (or, on literal links, four of
    these trials), predicts the others: its median error beyond the noise of the measurements
    compared is at most costmodel_check.MEDIAN_ERROR, the ranking of every all-VM trial agrees
    (Spearman at least costmodel_check.RANK_AGREEMENT), and on every two-site slice the technique
    it names fastest (slowest) measured as fast (slow) as the fastest (slowest), within their
    noise. The full comparison goes to costmodel.md in the report."""
    recs = checks.ensure_trials(backend.runner, claims_log, backend.trials)
    result = costmodel_check.check(recs, backend.runner.paper_slices, per_tensor=not backend.runner.budget.combine,
                                   calibration=claims_log.calibration or None)
    if claims_log.directory:
        claims_log.directory.mkdir(parents=True, exist_ok=True)
        (claims_log.directory / "costmodel.md").write_text(costmodel_check.markdown(result))
    assert costmodel_check.validated(result), costmodel_check.markdown(result)
    missed = [m for s in claims.two_site(claims.Table(recs)) for m in costmodel_check.extremes_missed(result, s)]
    assert not missed, "; ".join(missed) + "\n" + costmodel_check.markdown(result)


def test_select_decides_from_real_trials_on_this_cluster(backend, tmp_path):
    """`python -m harness select`'s decision on the two-site slice, on this module's cluster (the
    command brings its own up the same way): both modes from one set of trials, each trained and
    recorded once; the planner's skips are counted. Last in the module: it trains past the
    sweep that the reference test above checks."""
    runner = backend.runner
    sl = next((s for s in backend.slices if s.rtt_ms >= 1.0), None)
    if sl is None:
        pytest.skip("no two-site slice in this run")
    measure = measured_selection.Trials(runner, sl, tmp_path / "results.jsonl")
    decisions = measured_selection.decide(measure, ["published", "corrected"], 0.1,
                                      measured_selection.predictor(runner.slices[sl.name], runner.budget), 0.3)
    recs = records.read(tmp_path / "results.jsonl")
    ran = {(r["technique"], tuple(r["cluster"]["vms_used"])) for r in recs}
    assert len(recs) == len(ran) == len(measured_selection.trial_table(measure))
    assert ("Pipeshard", tuple(vm.name for vm in sl.vms)) in ran and all(r["status"] == "ok" for r in recs)
    assert [d["mode"] for d in decisions] == ["published", "corrected"]
    for d in decisions:
        assert {(x["technique"], tuple(x["vms"])) for x in d["trials"] if not x.get("skipped")} <= ran
        assert (d["technique"], tuple(d["vms"])) in ran, d["rule"]
    # `select --beyond-run`: DiLoCo on all VMs trained at the sweep's sync interval, then set against
    # each decision by the time to learn as much; the decisions stay the paper's.
    factor = {"factor": 1.5, "per_slice": {}, "sync_every": 4, "model": runner.budget.model}
    compared = select_command.beyond_paper(measure, decisions, factor)
    diloco = [r for r in records.read(tmp_path / "results.jsonl") if r["technique"] == "DiLoCo"]
    assert len(diloco) == 1 and diloco[0]["status"] == "ok" and diloco[0]["cluster"]["vms_used"] == [vm.name for vm in sl.vms]
    assert [b["mode"] for b in compared] == ["published", "corrected"]
    assert all(b["beyond_paper"] and b["time_over_choice"] > 0 and b["record_id"] == diloco[0]["record_id"]
               for b in compared)
