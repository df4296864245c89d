"""Similarity scaling (harness.analysis.similarity): the groups that decide the orderings, and the link
that gives the scale model the paper's."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness import resources
from harness.analysis import costmodel, costmodel_check, similarity
from harness.analysis.netmodel import Network
from harness.core.config import Budget, Setup, Technique, model_config
from harness.experiments import calibration, rejudge
from harness.platform import slices
from harness.runs import records
from harness.techniques import contract

GPT2M, SMALL = model_config("gpt2m"), model_config("scale-small")
BUDGET = Setup(batch_per_gpu=2, micro_batches=2, seq_len=128)
# The emulated link as the CPU trials see it (costmodel.md of a quick run): gloo, one ring rank per VM.
CPU_NET = Network(link_bytes_per_s=1e9, window_bytes=210e3, initial_window_bytes=10 * 8948, ring_over_devices=False,
                  flows_per_peer=1, per_collective_s=0.011)
CPU_DEVICES = costmodel.Devices((21.5e9, 21.5e9), (1e12, 1e12), 2)
RECORDED = Path(__file__).parent.parent / "reports" / "baselines"  # runs kept beside the shipped baselines


def test_the_groups_split_a_steps_communication_by_what_grows_with_rtt():
    sl = slices.load("UTAH-GPN")
    vms = tuple(vm.name for vm in sl.vms)
    for t in ("Data", "ZeRO2", "Shard", "Pipeshard"):
        g = similarity.groups(t, sl, GPT2M, Setup())
        p = costmodel.predict(t, sl, vms, GPT2M, Setup())
        comm = p.terms["collectives"] + p.terms["pipeline_transfers"]
        assert g["latency"] + g["bandwidth"] == pytest.approx(comm / p.terms["compute"])
        assert g["latency"] > 0 and (g["bubble"] > 0) == (t == "Pipeshard")
    for t in ("Data", "Pipeshard"):  # as the RTT goes to 0 so does the latency group: a crossing's fixed costs are not latency
        assert similarity.groups(t, sl.with_rtt(1e-4), GPT2M, Setup())["latency"] == pytest.approx(0, abs=1e-3)
        assert similarity.groups(t, sl.with_rtt(1e-4), SMALL, BUDGET, CPU_NET, CPU_DEVICES)["latency"] == pytest.approx(0, abs=1e-3)


def test_the_paper_model_scaled_onto_itself_keeps_its_link():
    sl = slices.load("UTAH-GPN")
    vms = tuple(vm.name for vm in sl.vms)
    same = similarity.scale(sl, GPT2M, Setup(), GPT2M, Setup(), costmodel.network_for(sl),
                            costmodel.Devices.of(sl, vms, "float32"), rate=(1e8, 1e10))
    assert same.rtt_ms == pytest.approx(sl.rtt_ms, rel=0.02)
    assert same.link_bytes_per_s == pytest.approx(costmodel.network_for(sl).link_bytes_per_s, rel=0.05)
    assert same.worst_ratio("latency") == pytest.approx(1, abs=0.02)


def test_the_scale_model_needs_longer_rtts_further_apart_as_the_paper_s_slices_are():
    scaled = [similarity.scale(sl, GPT2M, Setup(), SMALL, BUDGET, CPU_NET, CPU_DEVICES) for sl in slices.table_i()[1:]]
    assert [s.paper_rtt_ms for s in scaled] == sorted(s.paper_rtt_ms for s in scaled)
    assert [s.rtt_ms for s in scaled] == sorted(s.rtt_ms for s in scaled)
    for s in scaled:
        assert 1 <= s.worst_ratio("latency") < 10 and set(s.to_dict()["worst_ratio"]) == {"latency", "bandwidth"}


def gloo_under_load(link_bytes_per_s: float, window_bytes: float, per_collective_s: float) -> Network:
    """What a loaded run's calibration measured of gloo between the VMs: its collectives' rate,
    the TCP window refit from its Data trial and each collective's fixed cost."""
    return Network(link_bytes_per_s=link_bytes_per_s, window_bytes=window_bytes, initial_window_bytes=window_bytes,
                   ring_over_devices=False, flows_per_peer=1, per_collective_s=per_collective_s, per_tensor=False,
                   overlaps_compute=False)


def test_a_group_no_link_brings_near_is_not_left_to_drift_where_the_others_take_the_link():
    """A loaded run's calibration (gloo at 12.5 MB/s, 33 ms a collective): every bandwidth group
    is beyond the tolerance on any link, so the fit leaves them out; left free, they let it shape
    UTAH-GPN to 3.5 MB/s (for no group's sake: the latency groups do not depend on the rate), which
    put them 3.4x past their floor. The link kept leaves each within the tolerance of the nearest
    any link gives it (limits.CollectiveFloor's reach), and the link unshaped."""
    net = gloo_under_load(12.47e6, 26.7e3, 0.0332)
    model = calibration.ScaleModel.of(SMALL, 2, 2, True, {})
    s = calibration.scale_one(model, slices.load("UTAH-GPN"), net, 19.35e9)
    assert similarity.shaped(net, s.link_bytes_per_s) is None
    for t in s.target:
        assert s.ratio(t, "bandwidth") > similarity.TOLERANCE  # out of reach: what this test is about
        assert s.model[t]["bandwidth"] <= similarity.TOLERANCE * s.literal[t]["bandwidth"]
    assert s.ratio("Data", "latency") <= similarity.TOLERANCE


def test_a_fit_just_under_the_unshaped_rate_does_not_keep_the_link_shaped():
    """A loaded run's second refinement (gloo at 12.2 MB/s, 41 ms a collective, a 22.9 kB
    window): Powell settled at 10.9 MB/s, just under UNSHAPED, where every window queues, and at
    2.2 ms, half the RTT the unshaped link needs. The unshaped link matched as many groups and was
    nearer by least squares, but no fit started there. The link kept is unshaped and nearer."""
    net = gloo_under_load(12.163e6, 22.93e3, 0.04132)
    model = calibration.ScaleModel.of(SMALL, 2, 2, True, {})
    utah = slices.load("UTAH-GPN")
    s = calibration.scale_one(model, utah, net, 20.83e9)
    under = calibration.ran_on(model, utah, net, 20.83e9, 2.219, 10.945e6 * 8 / 1e9)
    assert similarity.shaped(net, 10.945e6) is not None  # the point the search once kept is shaped
    assert similarity.shaped(net, s.link_bytes_per_s) is None
    assert s.distance() < under.distance()


def test_a_rate_the_records_give_is_priced_shaped_even_where_the_search_would_leave_it_unshaped():
    """A rate in a run's records was set on its link, so the link's windows queue for it, as the
    cost model's check of the trials prices them (costmodel_check), even at a rate where the search
    would not have shaped the link: the groups the records give (calibration.ran_on) are the
    shaped link's. A doctored record's rate once gave groups on an unshaped link beside a check
    that priced its trials shaped."""
    net = gloo_under_load(12.163e6, 22.93e3, 0.04132)
    model = calibration.ScaleModel.of(SMALL, 2, 2, True, {})
    utah = slices.load("UTAH-GPN")
    rate, rtt_ms = 0.95 * net.link_bytes_per_s, 4.0
    assert similarity.shaped(net, rate) is None  # the search would leave this link unshaped
    given = calibration.ran_on(model, utah, net, 20.83e9, rtt_ms, rate * 8 / 1e9)
    shaped = replace(net, shaped_bytes_per_s=rate)
    for t in given.model:
        assert given.model[t] == pytest.approx(similarity.groups(t, utah.with_rtt(rtt_ms), model.cfg, model.setup, shaped,
                                                                 model.devices(utah, 20.83e9)))
    unshaped = calibration.ran_on(model, utah, net, 20.83e9, rtt_ms, None)
    assert given.model["Data"]["latency"] > unshaped.model["Data"]["latency"]


def test_a_group_the_scale_model_lacks_is_infinitely_off_not_skipped():
    target = {"Data": {"latency": 2.0, "bandwidth": 0.5}, "Pipeshard": {"latency": 1.0, "bandwidth": 0.0}}
    model = {"Data": {"latency": 4.0, "bandwidth": 0.0}, "Pipeshard": {"latency": 0.5, "bandwidth": 0.3}}
    s = similarity.Scaled("x", 20.0, 30.0, 1e9, target, model)
    assert s.worst_ratio("latency") == 2.0
    assert s.worst_ratio("bandwidth") == float("inf")  # Data's bandwidth group is missing in the model


def test_a_miss_is_a_group_off_by_more_than_the_tolerance_unless_negligible_on_both_sides():
    target = {"Data": {"latency": 6.0, "bandwidth": 0.01, "bubble": 0.0},
              "Pipeshard": {"latency": 1.3, "bandwidth": 0.06, "bubble": 0.25}}
    model = {"Data": {"latency": 4.0, "bandwidth": 0.04, "bubble": 0.0},  # 1.5x; 4x but both under 0.05
             "Pipeshard": {"latency": 2.8, "bandwidth": 0.27, "bubble": 0.5}}  # 2.15x; 4.5x
    s = similarity.Scaled("UTAH-GPN", 20.2, 6.3, 9e7, target, model, model)
    assert [(m["technique"], m["group"]) for m in s.misses(similarity.TOLERANCE)] == [
        ("Pipeshard", "latency"), ("Pipeshard", "bandwidth")]
    doc = {"mode": "similarity", "tolerance": similarity.TOLERANCE, "misses": s.misses(similarity.TOLERANCE),
           "calibration": {"device_flops": 2.2e10, "per_collective_s": 4.5e-3, "window_bytes": 35e3,
                           "link_bytes_per_s": 9e7, "per_tensor": False, "from_trials": ["Data-UTAH-GPN-vm1"],
                           "tcp_buffer_bytes": 72000, "window_bytes_on": {"UTAH-GPN": 35e3}},
           "slices": [s.to_dict()]}
    md = similarity.markdown(doc)
    assert "| Pipeshard | latency | 1.3 | 2.8 | 2.8 | 2.15 |" in md and "2 groups beyond it" in md
    assert "TCP buffers of 72 kB" in md and "on UTAH-GPN's scaled link the window is 35 kB" in md


# A geometrically similar model keeps gpt2m's proportions to this factor (the aim for its groups).
SIMILAR = 1.5


def test_scale_similar_has_gpt2ms_geometry_at_its_trial_batch_and_scale_small_has_not():
    """The proportions no link can fix: with gpt2m's, the link left to solve for is the hardware's."""
    paper = similarity.geometry(GPT2M, Setup(), gpus=4)
    for name, similar in (("scale-similar", True), ("scale-small", False)):
        b = Budget(model=name)
        here = similarity.geometry(b.model_cfg, Setup(batch_per_gpu=b.batch_per_gpu, micro_batches=b.micro_batches),
                                   gpus=4)
        assert (here["crossings_per_step"] == paper["crossings_per_step"]) == similar
        assert (here["bubble"] == paper["bubble"]) == similar
        assert (similarity.factor(here["gradients_per_activation"], paper["gradients_per_activation"]) <= SIMILAR) == similar
        if similar:
            assert similarity.factor(here["embedding_share"], paper["embedding_share"]) <= SIMILAR


def shipped_calibration() -> tuple:
    """The shipped similarity baseline's calibration (this machine's devices and gloo link): the
    network, a device's FLOP/s, and Table I by name."""
    recs = [json.loads(line) for line in resources.path("baselines", "quick-similarity", "calibration.jsonl")
            .read_text().splitlines()]
    table_i = {sl.name: sl for sl in slices.table_i()}
    net, device_flops, _ = costmodel_check.calibrate(recs, table_i, per_tensor=False)
    return net, device_flops, table_i


def scaled_on_shipped_calibration(name: str) -> list[similarity.Scaled]:
    """The link `scale` picks for the trial model `name` on each Table I slice, on the shipped calibration."""
    net, device_flops, table_i = shipped_calibration()
    b = Budget(model=name)
    setup = Setup(batch_per_gpu=b.batch_per_gpu, micro_batches=b.micro_batches, seq_len=b.model_cfg.n_positions)
    return [similarity.scale(sl, GPT2M, Setup(), b.model_cfg, setup, net,
                             costmodel.Devices((device_flops,) * len(sl.vms), (1e15,) * len(sl.vms), sl.gpus_per_vm),
                             rtt_ms=(0.05, 1000.0), rate=(1e6, net.link_bytes_per_s)) for sl in table_i.values()]


def test_on_a_measured_calibration_scale_similar_matches_the_groups_that_geometry_sets():
    """On the shipped calibration, the link solved for scale-similar gives Data, ZeRO2 and
    Pipeshard the paper's latency groups within SIMILAR on every Table I slice. scale-small's Shard
    crosses the link 12 times fewer per step than gpt2m's, so at any link that suits the others
    its latency group is off several times further than scale-similar's. The bandwidth groups are
    set by the calibrated collectives' fixed cost, not by the model's geometry (similarity.md of a run)."""
    worst = {}
    for name in ("scale-similar", "scale-small"):
        for s in scaled_on_shipped_calibration(name):
            for t in s.target:
                if s.target[t]["latency"] >= similarity.NEGLIGIBLE:
                    worst[name, t] = max(worst.get((name, t), 1.0), s.ratio(t, "latency"))
    assert all(worst["scale-similar", t] <= SIMILAR for t in ("Data", "ZeRO2", "Pipeshard")), worst
    assert worst["scale-small", "Shard"] > 2 * worst["scale-similar", "Shard"], worst


def test_a_group_no_link_brings_near_does_not_drag_the_others_past_the_tolerance():
    """scale-small's Shard crosses the link too few times for the RTT that gives Data the paper's
    latency group to give Shard its own. Least squares alone pulled the RTT Shard's way until
    Pipeshard's latency group was 2.5x the paper's on every two-site slice: the shipped baseline
    ran so (its similarity.md), and a loaded CI run's excuse for it held by 5%. The link kept
    now leaves Shard's alone beyond the tolerance, and fewer groups beyond it than that baseline's."""
    recorded = {s["slice"]: s for s in json.loads(resources.path("baselines", "quick-similarity", "similarity.json")
                                                  .read_text())["slices"]}
    for s in scaled_on_shipped_calibration("scale-small"):
        if s.paper_rtt_ms < calibration.TWO_SITE_MS:
            continue
        late = [m["technique"] for m in s.misses(similarity.TOLERANCE) if m["group"] == "latency"]
        assert late == ["Shard"], (s.slice, s.rtt_ms, s.misses(similarity.TOLERANCE))
        if s.slice in recorded:
            before = similarity.from_dict(recorded[s.slice])
            assert len(s.misses(similarity.TOLERANCE)) < len(before.misses(similarity.TOLERANCE)), s.slice


# Every run kept in the repository that scaled its links from calibration trials.
SCALED_RUNS = [p for p in sorted(resources.path("baselines").iterdir()) + sorted(RECORDED.iterdir())
               if (p / "calibration.jsonl").is_file()]


@pytest.mark.parametrize("folder", SCALED_RUNS, ids=lambda p: p.name)
def test_the_link_search_ends_no_further_from_the_papers_groups_than_the_slices_own_link(folder):
    """On each kept run's calibration (its device, collectives and TCP window, with the Shard it
    cast), the link `scale` picks for a slice is at least as near the paper's groups as the
    slice's own link. The error has steps where a window stops covering the bandwidth-delay
    product; started on the own link, Powell alone ended further off on scale-similar's run with
    Alpa's Shard (TACC-TACC), and that run's similarity test failed."""
    context = rejudge.claims_doc(folder)["context"]
    trials = [r for r in records.read(rejudge.results_file(folder)) if not rejudge.is_memory(r)]
    given = {sl.name: sl for sl in rejudge.run_slices(context)}
    first = len(calibration.calibration_trials(next(iter(given.values()))))
    with contract.cast({Technique.SHARD: rejudge.shard_of(folder, context)}):
        model = calibration.ScaleModel.of_records(trials, rejudge.budget_of(folder, context))
        scaling = calibration.from_records(model, records.read(folder / "calibration.jsonl")[:first], given,
                                           calibration.SIMILARITY)
        for s in scaling.scaled:
            own = s.distance(s.literal)
            assert s.distance() <= (*own[:2], own[2] + 1e-9), (s.slice, s.rtt_ms, s.distance(), own)
