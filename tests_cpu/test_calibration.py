"""The links a run's trials go through (harness.experiments.calibration): the scaled slice, the literal
links' records and bad input, without a cluster. The scaled path itself is judged where it runs,
on the claims' own cluster and calibration trials (harness/suite/emulated.py:
test_the_links_were_calibrated_on_real_trials, and the similarity test for the groups): a second
cluster calibrating here would repeat those trials for nothing."""
import pytest

from harness import resources
from harness.analysis import similarity
from harness.analysis.netmodel import Network
from harness.core.config import Budget, model_config
from harness.errors import BadInput
from harness.experiments import calibration
from harness.paper import claims
from harness.platform import slices
from harness.runs import trials
from tests_cpu import claim_records

UTAH_GPN_TOML = (resources.path("slices") / "UTAH-GPN.toml").read_text()


def scaled(rtt_ms: float, rate: float) -> similarity.Scaled:
    return similarity.Scaled("UTAH-GPN", 20.2, rtt_ms, rate)


def test_a_scaled_slice_takes_the_rtt_and_a_rate_only_below_what_the_link_carries():
    sl = slices.load("UTAH-GPN")
    slow = calibration.scaled_slice(sl, scaled(61.5, 2e7), Network(link_bytes_per_s=1e9))
    assert (slow.name, slow.vms, slow.rtt_ms) == (sl.name, sl.vms, 61.5)
    assert slow.rtt_between("vm1", "vm2") == pytest.approx(61.5)
    assert slow.bandwidth_gbps == pytest.approx(2e7 * 8 / 1e9)
    assert slow.shape("vm1", "vm2").bandwidth_gbps == pytest.approx(0.16)  # the emulated link gets the rate
    full = calibration.scaled_slice(sl, scaled(61.5, 0.95e9), Network(link_bytes_per_s=1e9))
    assert full.bandwidth_gbps is None and full.shape("vm1", "vm2").delay_only  # TSO stays on: no rate to shape


def test_a_scaled_slice_puts_its_rate_on_every_link_in_place_of_a_link_tables_own():
    """A [[link]] table's rate is the paper's NIC at paper scale; the scaled link's rate (or none,
    where the collectives carry about that anyway) stands for it in both directions, as the
    similarity search priced the link."""
    sl = slices.parse(UTAH_GPN_TOML + '[[link]]\nfrom = "UTAH"\nto = "GPN"\nbandwidth_gbps = 0.5\ndelay_ms = 8\n', "x.toml")
    for rate, want in ((2e7, 0.16), (0.95e9, None)):
        at = calibration.scaled_slice(sl, scaled(5.0, rate), Network(link_bytes_per_s=1e9))
        for a, b in (("vm1", "vm2"), ("vm2", "vm1")):
            got = at.shape(a, b).bandwidth_gbps
            assert got is None if want is None else got == pytest.approx(want)
        assert at.rtt_between("vm1", "vm2") == pytest.approx(5.0)  # the table's delay scaled with the rest


def test_the_vms_tcp_buffers_give_the_gradients_the_papers_number_of_windows():
    sl = slices.load("UTAH-GPN")
    # gpt2m itself: its gradients cross a gloo edge (2 ranks) in 2/3 of what a 4-GPU NCCL ring
    # edge carries, so the same number of windows takes 2/3 of the stock 3 MiB window
    assert calibration.tcp_buffer_bytes(model_config("gpt2m"), sl) == round(2 * 3 * 2**20 * 2 / 3)
    small = calibration.tcp_buffer_bytes(model_config("scale-small"), sl)
    assert small == calibration.MIN_TCP_BUFFER  # 51 kB would do; TCP needs a few segments in flight


def test_literal_links_are_the_papers_and_the_records_say_so():
    table_i = slices.table_i()
    runner = trials.Runner(None, table_i, Budget())
    scaling = calibration.apply(runner, calibration.LITERAL, keep=None)
    assert scaling.mode == "literal" and scaling.scaled == []
    assert runner.slices == {sl.name: sl for sl in table_i}
    for sl in table_i:
        assert runner.scaling[sl.name] == {"mode": "literal", "paper_rtt_ms": sl.rtt_ms, "paper_bandwidth_gbps": None,
                                           "rtt_ms": sl.rtt_ms, "bandwidth_gbps": None}


def test_a_bad_scaling_mode_is_named_before_any_trial():
    runner = trials.Runner(None, [slices.load("UTAH-GPN")], Budget())
    with pytest.raises(BadInput, match="link scaling: expected one of similarity, literal, got 'wind'"):
        calibration.apply(runner, "wind", keep=None)


def test_a_runner_moves_a_slice_to_another_link_but_not_to_other_vms():
    sl = slices.load("UTAH-GPN")
    runner = trials.Runner(None, [sl], Budget(), calibration_trials=calibration.extra_trials([sl]))
    # Data on all VMs: the sweep's trial, the calibration's and one per round of refinement
    assert runner.schedule_steps == (2 + calibration.REFINE_ROUNDS) * (Budget().warmup_steps + Budget().repeats)
    runner.set_slice(sl.with_rtt(61.5))
    assert runner.slices["UTAH-GPN"].rtt_ms == 61.5 and runner.paper_slices["UTAH-GPN"].rtt_ms == 20.2
    with pytest.raises(ValueError, match="not one of this run's"):
        runner.set_slice(slices.load("TACC-TACC"))


def test_a_slice_is_two_site_by_its_papers_rtt_whatever_link_it_ran_on():
    recs = []
    for name, paper, ran in (("TACC-TACC", 0.1, 3.0), ("UTAH-GPN", 20.2, 61.5)):
        for t in ("Data", "Pipeshard"):
            r = claim_records.trial(t, name, [1.0, 1.0, 1.0], rtt=ran)
            r["cluster"]["network"]["scaling"] = {"mode": "similarity", "paper_rtt_ms": paper, "rtt_ms": ran}
            recs.append(r)
    table = claims.Table(recs)
    assert claims.single_site(table) == ["TACC-TACC"] and claims.two_site(table) == ["UTAH-GPN"]
    assert claims.rtt(table, "TACC-TACC") == 3.0  # what the link measured stays the RTT shown


def test_the_cost_model_check_finds_the_runs_own_slices_not_table_i_by_name():
    """Records name their slice; a run on a slice file has one that Table I does not know. The
    check once looked every name up in Table I, and a run on any other slice failed to calibrate."""
    import dataclasses

    from harness import resources
    from harness.analysis import costmodel_check
    from harness.runs import records

    shipped = resources.path("baselines", "quick-similarity")

    def renamed(name: str) -> list[dict]:
        recs = records.read(shipped / name)
        for r in recs:
            if r["cluster"]["slice"] == "TACC-TACC":
                r["cluster"]["slice"] = "MINE"
        return recs

    table_i = {name: slices.load(name) for name in ("TACC-TACC", "UTAH-GPN")}
    mine = {"MINE": dataclasses.replace(table_i["TACC-TACC"], name="MINE"), "UTAH-GPN": table_i["UTAH-GPN"]}
    as_shipped = costmodel_check.check(records.read(shipped / "results.jsonl"), table_i, per_tensor=False,
                                       calibration=records.read(shipped / "calibration.jsonl"))
    on_mine = costmodel_check.check(renamed("results.jsonl"), mine, per_tensor=False,
                                    calibration=renamed("calibration.jsonl"))
    assert {row["slice"] for row in on_mine["rows"]} == {"MINE", "UTAH-GPN"}
    assert [row["predicted_s"] for row in on_mine["rows"]] == [row["predicted_s"] for row in as_shipped["rows"]]


def test_one_swap_among_four_techniques_is_a_rank_agreement_of_exactly_0_8():
    """The bound the claims hold the cost model to; a slice file's run of four techniques that
    swapped one neighbouring pair once failed it by floating-point noise."""
    from harness.analysis import costmodel_check

    assert costmodel_check.spearman([12.8, 7.01, 39.3, 2.52], [12.8, 12.81, 27.9, 5.05]) == 0.8
    assert costmodel_check.spearman([1, 2, 3], [3, 2, 1]) == -1.0


def _shipped_check(doctor=lambda recs: recs):
    from harness import resources
    from harness.analysis import costmodel_check
    from harness.runs import records

    shipped = resources.path("baselines", "quick-similarity")
    table_i = {name: slices.load(name) for name in ("TACC-TACC", "UTAH-GPN")}
    return costmodel_check.check(doctor(records.read(shipped / "results.jsonl")), table_i, per_tensor=False,
                                 calibration=records.read(shipped / "calibration.jsonl"))


def _slowed(r: dict, factor: float) -> dict:
    t = r["timing"]
    if not t["median_step_s"]:  # a memory analysis's record, or an out of memory
        return r
    return {**r, "timing": {**t, "step_times_s": [x * factor for x in t["step_times_s"]],
                            "median_step_s": t["median_step_s"] * factor, "epoch_time_s": t["epoch_time_s"] * factor}}


def test_the_cost_model_fails_where_it_misses_beyond_the_noise():
    """An error counts only beyond the noise of the trial and of the calibration, at least the
    run's drift; a model that misses most trials by far more fails, whatever the noise."""
    from harness.analysis import costmodel_check
    from harness.runs import noise

    shipped = _shipped_check()
    assert costmodel_check.validated(shipped)
    assert 0 < shipped["drift"] <= noise.CAP and shipped["calibration"]["noise"] >= shipped["drift"]
    for row in shipped["rows"]:
        assert row["measured_noise"] >= shipped["drift"]
        assert row["beyond_noise"] == pytest.approx(
            max(0.0, abs(row["error"]) - row["measured_noise"] - shipped["calibration"]["noise"]))
    assert shipped["median_beyond_noise"] <= shipped["median_abs_error"]

    doubled = _shipped_check(lambda recs: [_slowed(r, 2.0) for r in recs])
    assert not costmodel_check.validated(doubled)
    assert doubled["median_beyond_noise"] > costmodel_check.MEDIAN_ERROR
    assert "validation: FAILS" in costmodel_check.markdown(doubled)


def test_the_drift_of_repeats_widens_every_trials_noise_but_only_to_the_cap():
    """The repeats of a VM alone on one slice measured far slower than on the other: the run
    drifted, and every trial is judged against at least that (noise.shared_floor), never beyond
    noise.CAP."""
    from harness.runs import noise

    def drifted(recs):
        return [_slowed(r, 1.5) if r["cluster"]["hosts"] == 1 and r["cluster"]["slice"] == "UTAH-GPN" else r
                for r in recs]

    assert _shipped_check(drifted)["drift"] > _shipped_check()["drift"]
    assert _shipped_check(drifted)["drift"] <= noise.CAP


def test_the_model_must_name_the_fastest_and_slowest_as_measured_beyond_the_noise():
    """Doctored: Pipeshard measured ten times slower on UTAH-GPN, where the model puts it fastest."""
    from harness.analysis import costmodel_check

    assert costmodel_check.extremes_missed(_shipped_check(), "UTAH-GPN") == []
    slow = _shipped_check(lambda recs: [_slowed(r, 10.0) if r["technique"] == "Pipeshard"
                                        and r["cluster"]["slice"] == "UTAH-GPN" and r["cluster"]["hosts"] > 1
                                        else r for r in recs])
    missed = costmodel_check.extremes_missed(slow, "UTAH-GPN")
    assert len(missed) == 2 and "fastest is Pipeshard" in missed[0] and "slowest is Shard" in missed[1]
    # Every trial on all of UTAH-GPN's VMs gone (crashed trials are no rows): not checked is named, not passed.
    gone = _shipped_check(lambda recs: [r for r in recs if not (r["cluster"]["slice"] == "UTAH-GPN"
                                                                 and r["cluster"]["hosts"] > 1)])
    assert costmodel_check.extremes_missed(gone, "UTAH-GPN") == [
        "UTAH-GPN: 0 trial(s) on all VMs judged, so the model's fastest and slowest are not checked"]
