"""Verdicts the run decides: doctored records, each a case the suite once judged wrongly.

A comparison has a stable ID; a declared limit excuses a contradiction only within its bound, on
the slices it names, where the run itself measured its mechanism, with a reason built from that
run; a declared comparison not made is not shown; noise is robust; orderings are whole; only the
allocator's out of memory is the paper's x; a record is one trial, with real step times."""
import json
import math
import re

import pytest

from harness.analysis import similarity
from harness.core.config import Technique
from harness.errors import BadInput
from harness.experiments import report
from harness.paper import claims, deviations, figures, limits
from harness.platform import slices
from harness.runs import noise, records
from harness.suite import checks
from tests_cpu.claim_records import links_doc, memory, trial

TACC, GPN, MASS = "TACC-TACC", "UTAH-GPN", "UTAH-MASS"
RTT = {"TACC-TACC": 0.1, "UTAH-GPN": 20.2, "UTAH-MASS": 57.4, "BRIS-STAR": 95.9, "GAT-AMST": 103.0}
FOUR = tuple(Technique)


class Log:
    """What check_claim writes to: the session's verdicts."""

    def __init__(self):
        self.verdicts = {}


def run_on(names, times: dict, **kw) -> list[dict]:
    """Every technique on all VMs of each slice (times: technique -> step times), 5 timed steps."""
    return [trial(t, s, ts, rtt=RTT[s], **kw) for s in names for t, ts in times.items()]


def given(*names):
    return [slices.load(n) for n in names]


def check(verdict, declared, run=None):
    """check_claim's outcome as a word: passed, xfailed, skipped or failed; and the message."""
    try:
        checks.check_claim(verdict, Log(), declared, run)
    except pytest.xfail.Exception as e:
        return "xfailed", str(e)
    except pytest.skip.Exception as e:
        return "skipped", str(e)
    except (AssertionError, pytest.fail.Exception) as e:
        return "failed", str(e)
    return "passed", ""


SIMILARITY = deviations.declared("emulated-cpu/similarity")
STEPS5 = [1.0] * 5


# -- 1. every comparison has a stable ID, and every declaration names comparisons that are made -----
def full_run() -> tuple[list, list]:
    """Every trial of a run on the five Table I slices, and every memory analysis the claims read."""
    times = {"Pipeshard": [1.0] * 5, "Data": [2.0] * 5, "ZeRO2": [2.5] * 5, "Shard": [9.0] * 5}
    trials = run_on(RTT, times)
    for s in RTT:
        trials += [trial(t, s, [0.6] * 5, vms=("vm1",)) for t in FOUR]
        trials += [trial(t, s, [0.7] * 5, vms=("vm2",)) for t in ("Data", "Shard")]
    mem = [memory(m, t, s, vms, 20.0, "oom" if m == "gpt2L" else "ok") for m in ("gpt2m", "gpt2l", "gpt2L")
           for s in RTT for vms in (("vm1", "vm2"), ("vm1",), ("vm2",)) for t in FOUR]
    return trials, mem


def all_comparisons() -> list[claims.Comparison]:
    trials, mem = full_run()
    table_i = slices.table_i()
    return [c for v in claims.judge(trials, table_i) + claims.judge_memory(mem, table_i) for c in v.comparisons]


def test_every_comparison_has_one_stable_id_made_by_its_part():
    made = all_comparisons()
    ids = [c.id for c in made]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert all(re.fullmatch(r"C\d\.[\w-]+/[^/\s]+/[^/\s]+", i) for i in ids), [i for i in ids if " " in i][:5]
    assert [c.id for c in all_comparisons()] == ids  # the same records give the same IDs
    assert "C1.two-site/UTAH-GPN/Pipeshard<Data" in ids and "C2.sensitivity/TACC-TACC..UTAH-GPN/ZeRO2>Data" in ids


def every_limit():
    return [*{id(x): x for sets in deviations.SCALE_MODEL.values() for x in sets}.values(),
            *deviations.MEMORY_ANALYSIS]


def test_every_declared_key_is_one_its_part_makes_on_the_slices_it_names():
    made = all_comparisons()
    for limit in every_limit():
        for key in limit.keys:
            assert any(c.part == limit.part and c.key == key and limit.covers(c) for c in made), \
                f"{limit.part}: no comparison {key} is made on {limit.slices}"


def test_no_part_is_declared_whole():
    """Every part a declaration touches keeps comparisons that no limit covers: they can fail."""
    made = all_comparisons()
    for declared in [*deviations.SCALE_MODEL.values(), deviations.MEMORY_ANALYSIS]:
        for part in {x.part for x in declared}:
            free = [c.id for c in made if c.part == part and not any(x.covers(c) for x in declared)]
            assert free, f"{part}: every comparison it makes is declared"


def test_no_figure_is_written_into_a_declaration():
    """A limit's reason is built from the run's figures; its own words carry none."""
    for limit in [*every_limit(), *deviations.SIMILARITY_GROUPS]:
        assert not re.search(r"\b\d", limit.why), limit.why  # gpt2m is a name, not a figure


# -- 2. a declared limit is bounded, names its slices, and needs the run's own mechanism ------------
def single_site(pipeshard_over_data: float, slice_name=TACC, rtt=0.1) -> claims.Verdict:
    """C1.single-site on one slice, Pipeshard that many times Data's step; the rest well apart."""
    times = {"Pipeshard": [pipeshard_over_data] * 5, "Data": STEPS5, "ZeRO2": STEPS5, "Shard": [9.0] * 5}
    recs = [trial(t, slice_name, ts, rtt=rtt) for t, ts in times.items()]
    return claims.c1_single_site(claims.Table(recs, [slices.load(slice_name)] if slice_name in RTT else []))


def test_a_limit_excuses_a_contradiction_within_its_reach_where_the_run_shows_its_mechanism():
    run = limits.Run(links=links_doc(TACC, pipeshard_here=0.75, pipeshard_paper=0.3))  # 2.5x, over the threshold
    outcome, message = check(single_site(1.5), SIMILARITY, run)
    assert outcome == "xfailed", message
    # The reason carries this run's figures, computed, and the limit's own reach (the figure)
    assert ("Pipeshard's bubble comes to 0.188 of its compute and its communication to 0.562 in this run, gpt2m's "
            "in the paper to 0.075 and 0.225: together 2.5x") in message
    assert "it goes 1.5x against the paper, within what the mechanism's figure explains, 2.5x" in message
    assert "measured on" not in message and "0.94" not in message  # no figure of another run
    other = limits.Run(links=links_doc(TACC, pipeshard_here=0.9, pipeshard_paper=0.3))
    assert "its communication to 0.675 in this run" in check(single_site(1.5), SIMILARITY, other)[1]


def test_the_reason_says_which_of_pipeshards_overheads_is_the_larger_as_the_run_measured_them():
    """The limit's words once said the scale model's bubble came from fewer microbatches than the
    paper's setup, which is not so of a model trained at the paper's 4 (scale-similar): its bubble
    is gpt2m's, and what it pays beyond is communication. The figure names each."""
    doc = links_doc(TACC, pipeshard_here=0.0, pipeshard_paper=0.0)
    entry = doc["slices"][0]
    entry["target"]["Pipeshard"] = {"latency": 0.001, "bandwidth": 0.055, "bubble": 0.25}
    entry["model"]["Pipeshard"] = {"latency": 0.002, "bandwidth": 0.6, "bubble": 0.25}
    outcome, message = check(single_site(1.5), SIMILARITY, limits.Run(links=doc))
    assert outcome == "xfailed", message
    assert "bubble comes to 0.25 of its compute and its communication to 0.602 in this run, gpt2m's in the paper " \
           "to 0.25 and 0.056: together 2.8x" in message
    assert "fewer microbatches" not in message


def test_a_figure_or_a_gap_a_hair_from_its_threshold_does_not_print_as_the_threshold():
    """A kept run printed "2x (it shows at 2x or more)" for a figure of 1.98 that did not show:
    the words must let a reader see the comparison the verdict made."""
    outcome, message = check(single_site(1.2), SIMILARITY,
                             limits.Run(links=links_doc(TACC, pipeshard_here=0.5975, pipeshard_paper=0.3)))
    assert outcome == "failed" and "together 1.99x (it shows at 2x or more)" in message, message
    outcome, message = check(single_site(2.5004), SIMILARITY,
                             limits.Run(links=links_doc(TACC, pipeshard_here=0.75, pipeshard_paper=0.3)))
    assert outcome == "failed" and "it goes 2.5004x against the paper, beyond what the mechanism's figure " \
                                   "explains, 2.5x" in message, message
    assert [figures.apart(v, 2.0) for v in (1.9996, 2.0, 2.0004, 0.1234)] == ["1.9996", "2", "2.0004", "0.123"]


def test_a_contradiction_beyond_the_bound_fails():
    """Pipeshard at 3x Data's step on TACC-TACC: the old declaration called it "a near tie"."""
    run = limits.Run(links=links_doc(TACC, pipeshard_here=0.75, pipeshard_paper=0.3))
    outcome, message = check(single_site(3.0), SIMILARITY, run)
    assert outcome == "failed" and "beyond what the mechanism's figure explains, 2.5x" in message, message


def test_a_run_that_does_not_show_the_mechanism_is_not_excused():
    weak = limits.Run(links=links_doc(TACC, pipeshard_here=0.45, pipeshard_paper=0.3))  # 1.5x, under the threshold
    outcome, message = check(single_site(1.2), SIMILARITY, weak)
    assert outcome == "failed" and "(it shows at 2x or more)" in message, message
    outcome, message = check(single_site(1.2), SIMILARITY, limits.Run())  # nothing measured
    assert outcome == "failed" and "this run did not measure Pipeshard's overhead" in message, message


def test_a_limit_does_not_reach_a_slice_it_does_not_name(tmp_path):
    mine = tmp_path / "my-site.toml"  # single-site, as TACC-TACC, but not a slice the limit names
    mine.write_text('name = "MY-SITE"\nrtt_ms = 0.2\n' + "".join(
        f'[[vm]]\nname = "{vm}"\nsite = "A"\ngpus = 2\ngpu = "RTX6000"\n' for vm in ("vm1", "vm2")))
    recs = [trial(t, "MY-SITE", ts, rtt=0.2) for t, ts in
            {"Pipeshard": [1.5] * 5, "Data": STEPS5, "ZeRO2": STEPS5, "Shard": [9.0] * 5}.items()]
    verdict = claims.c1_single_site(claims.Table(recs, [slices.load(str(mine))]))
    run = limits.Run(links=links_doc("MY-SITE", pipeshard_here=0.75, pipeshard_paper=0.3))
    assert check(verdict, SIMILARITY, run)[0] == "failed"


def bandwidth_miss(floor: float, here: float, paper: float = 0.055, fixed_s: float = 2e-3) -> dict:
    """How the similarity test judges Pipeshard's bandwidth group on TACC-TACC: `here` of its
    compute on the link the run chose, `floor` on the fastest rate its collectives carry (the
    links document's group on the paper's own link), `paper` for gpt2m; each collective costs
    fixed_s, at 100 MB/s, on a link one TCP flow crosses at 300 MB/s."""
    doc = links_doc(TACC, pipeshard_here=0.0, pipeshard_paper=0.0)
    entry = doc["slices"][0]
    for group, value in (("model", here), ("literal", floor), ("target", paper)):
        entry[group]["Pipeshard"]["bandwidth"] = value
    doc["calibration"] = {"per_collective_s": fixed_s, "link_bytes_per_s": 1e8}
    recs = [trial("Pipeshard", TACC, STEPS5, rtt=0.4)]
    recs[0]["cluster"]["network"]["link_bytes_per_s"] = 3e8
    (miss,) = similarity.misses(doc)
    (judged,) = limits.judge_misses([miss], deviations.SIMILARITY_GROUPS, limits.Run(recs, [], doc))
    return judged["excuse"]


def test_a_bandwidth_group_no_link_brings_nearer_is_excused_however_slow_the_collectives_are():
    """The similarity test's bandwidth limit reads the technique's own group at the fastest rate
    its collectives carry. CI, with a core busy beside it, once calibrated collectives so slow
    that Pipeshard's group came out 24.8x the paper's, on the fastest link there was; the limit
    read one microbatch's activations instead, and its figure reached 24.6x: the test failed
    though no link could have done better. Here the collectives cost 2 ms each, which by that
    figure explained 7.6x at most, and the group is 10x the paper's at its floor."""
    excuse = bandwidth_miss(floor=0.55, here=0.55)
    assert excuse["excused"], excuse["reason"]
    assert excuse["bound"] == pytest.approx(2 * 10.0)
    assert "Pipeshard's communication comes to 0.55 of its compute, gpt2m's in the paper to 0.055: 10x" in excuse["reason"]
    assert "(2 ms each, then 100 MB/s, where one TCP flow over the link carries 300 MB/s)" in excuse["reason"]


@pytest.mark.parametrize("floor, here, paper, why", [
    (0.55, 1.4, 0.055, "beyond what the mechanism's figure explains, 20x"),  # a link set slower for the others
    (0.08, 0.2, 0.055, "(it shows at 2x or more)"),  # a link could have brought it within 2x
    (0.01, 0.01, 0.055, "(it shows at 2x or more)"),  # below the paper's: a slower link raises it
    (0.55, 0.55, 0.0, "this run did not measure the lowest bandwidth group"),  # no paper group to be off from
])
def test_a_bandwidth_group_a_link_could_bring_nearer_is_not_excused(floor, here, paper, why):
    excuse = bandwidth_miss(floor, here, paper)
    assert not excuse["excused"] and why in excuse["reason"], excuse["reason"]


def zero2_vs_data(data_over_zero2: float, zero2_bytes: int | None, data_bytes: int | None = 10**8):
    times = {"Pipeshard": [0.5] * 5, "Data": [data_over_zero2] * 5, "ZeRO2": STEPS5, "Shard": [9.0] * 5}
    recs = [trial(t, GPN, ts, link_bytes={"ZeRO2": zero2_bytes, "Data": data_bytes}.get(t)) for t, ts in times.items()]
    return claims.c2_order(claims.Table(recs, given(GPN))), limits.Run(recs)


def test_c2s_data_vs_zero2_has_no_declared_limit_left():
    """ZeRO2 communicates as Alpa compiled it (1.5x Data's bytes with microbatches), so nothing
    this backend does differently is left to excuse Data and ZeRO2 trading places: it fails."""
    verdict, run = zero2_vs_data(1.1, 15 * 10**7)
    outcome, message = check(verdict, SIMILARITY, run)
    assert outcome == "failed" and "Data vs ZeRO2" in message and "declared limit" not in message, message
    assert not [lim for lim in SIMILARITY if lim.part.startswith("C2.")]


# -- 3. a declared comparison not made skips; every part can fail ---------------------------------
def test_a_declared_comparison_that_was_not_made_is_not_shown():
    recs = [trial(t, TACC, ts, rtt=0.1) for t, ts in {"Pipeshard": [1.5] * 5, "ZeRO2": STEPS5,
                                                     "Shard": [9.0] * 5}.items()]  # no Data
    verdict = claims.c1_single_site(claims.Table(recs, given(TACC)))
    run = limits.Run(links=links_doc(TACC, pipeshard_here=0.75, pipeshard_paper=0.3))
    outcome, message = check(verdict, SIMILARITY, run)
    assert outcome == "skipped" and "a trial was not run" in message, message
    assert verdict.outcome == "not shown"


def test_c4_gpt2l_one_vm_can_fail_where_a_technique_no_limit_covers_fits():
    """Data fits gpt2L on one VM in every slice: no declaration covers that."""
    recs = [memory("gpt2L", t, s, ("vm1",), 30.0 if t != "Data" else 10.0, "oom" if t != "Data" else "ok")
            for s in (TACC, GPN) for t in FOUR]
    verdict = claims.c4_gpt2l_one_vm(claims.MemoryTable(recs, given(TACC, GPN)))
    assert check(verdict, deviations.MEMORY_ANALYSIS, limits.Run(memory=recs))[0] == "failed"
    assert {c.key: c.status for c in verdict.comparisons}["Data-x-in-most"] == "contradicted"


# -- 4. robust noise ----------------------------------------------------------------------------------
def test_one_wild_step_does_not_hide_a_twofold_difference():
    """Pipeshard at twice ZeRO2's step, one of its steps three times longer still: before, half
    the range of the steps made that "within noise"."""
    recs = run_on([GPN], {"Pipeshard": [2.0, 2.0, 6.0, 2.0, 2.0], "Data": [2.5] * 5, "ZeRO2": [1.0] * 5,
                          "Shard": [9.0] * 5})
    verdict = claims.c1_two_site(claims.Table(recs, given(GPN)))
    assert {c.key: c.status for c in verdict.comparisons}["Pipeshard<ZeRO2"] == "contradicted"


def test_a_win_inside_the_noise_is_within_noise_never_holds():
    steps = [0.9, 1.1, 1.0, 0.95, 1.05]
    recs = run_on([GPN], {"Pipeshard": [x * 0.98 for x in steps], "Data": steps, "ZeRO2": [3.0] * 5,
                          "Shard": [9.0] * 5})
    verdict = claims.c1_two_site(claims.Table(recs, given(GPN)))
    assert {c.key: c.status for c in verdict.comparisons}["Pipeshard<Data"] == "within noise"
    assert verdict.status == "within noise"


def test_the_spread_is_the_median_absolute_deviation_capped_at_a_stated_share():
    assert noise.spread([1.0, 1.0, 1.0, 1.0, 100.0]) == 0.0  # one wild step moves nothing
    assert noise.spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(noise.CAP * 3.0)  # capped
    assert noise.spread([1.0, 1.01, 0.99, 1.0, 1.02]) == pytest.approx(noise.MAD_TO_SIGMA * 0.01)
    assert noise.MIN_TIMED_STEPS >= 5


def test_claims_md_counts_holds_within_noise_and_contradicted_apart():
    verdicts = [{"part": "a", "status": "holds", "outcome": "holds", "comparisons": [{"status": "holds"}]},
                {"part": "b", "status": "within noise", "outcome": "within noise",
                 "comparisons": [{"status": "holds"}, {"status": "within noise"}]},
                {"part": "c", "status": "contradicted", "outcome": claims.EXCUSED,
                 "comparisons": [{"status": "contradicted", "excuse": {"excused": True}}]},
                {"part": "d", "status": "contradicted", "outcome": "contradicted",
                 "comparisons": [{"status": "contradicted", "excuse": {"excused": False}}]}]
    assert report.counts(verdicts) == (
        "4 parts: 1 holds, 1 within noise, 1 contradicted within a declared limit, 0 not shown, 1 CONTRADICTED; "
        "5 comparisons: 2 holds, 1 within noise, 1 contradicted within a declared limit, 1 CONTRADICTED, 0 not shown")


# -- 5. whole orderings ------------------------------------------------------------------------------
def test_c2_order_is_contradicted_between_techniques_that_are_not_neighbours():
    """Pipeshard within the noise of Data, Data of ZeRO2, but ZeRO2 faster than Pipeshard beyond it."""
    jitter = [0.96, 1.04, 1.0, 0.98, 1.02]
    recs = run_on([GPN], {"Pipeshard": [1.08 * x for x in jitter], "Data": [1.03 * x for x in jitter],
                          "ZeRO2": jitter, "Shard": [9.0] * 5})
    verdict = claims.c2_order(claims.Table(recs, given(GPN)))
    statuses = {c.key: c.status for c in verdict.comparisons}
    assert statuses["Pipeshard<Data"] == statuses["Data<ZeRO2"] == "within noise"
    assert statuses["Pipeshard<ZeRO2"] == "contradicted" and verdict.status == "contradicted"


def test_c2_sensitivity_compares_every_pair_and_every_step_up_in_rtt():
    lo = {"Pipeshard": [1.0] * 5, "Data": [1.0] * 5, "ZeRO2": [1.0] * 5, "Shard": [1.0] * 5}
    mid = {"Pipeshard": [1.2] * 5, "Data": [2.0] * 5, "ZeRO2": [3.0] * 5, "Shard": [6.0] * 5}
    # From UTAH-GPN to UTAH-MASS Shard grows less than ZeRO2, though from end to end it grows most.
    hi = {"Pipeshard": [1.3] * 5, "Data": [3.0] * 5, "ZeRO2": [6.0] * 5, "Shard": [7.0] * 5}
    recs = run_on([TACC], lo) + run_on([GPN], mid) + run_on([MASS], hi)
    verdict = claims.c2_sensitivity(claims.Table(recs, given(TACC, GPN, MASS)))
    bad = {c.id for c in verdict.comparisons if c.status == "contradicted"}
    assert bad == {f"C2.sensitivity/{GPN}..{MASS}/Shard>ZeRO2"}, bad
    assert len(verdict.comparisons) == 2 * 6  # two steps, six pairs each
    # Pipeshard degrading more than ZeRO2, Data between them within the noise: contradicted
    noisy = [0.7, 1.3, 1.0, 0.85, 1.15]
    recs = run_on([TACC], lo) + run_on([GPN], {"Pipeshard": [2.0 * x for x in noisy], "Data": [1.7 * x for x in noisy],
                                                "ZeRO2": [1.4] * 5, "Shard": [9.0] * 5})
    statuses = {c.key: c.status for c in claims.c2_sensitivity(claims.Table(recs, given(TACC, GPN))).comparisons}
    assert statuses["ZeRO2>Pipeshard"] == "contradicted", statuses


def test_c3_data_most_is_contradicted_when_data_is_slower_than_a_winner():
    """ZeRO2 and Shard tie with each other, Data 1.4 times slower than both: before, the tie left
    no clear winner and the part was "within noise"."""
    recs = [trial(t, TACC, ts, vms=("vm1",)) for t, ts in
            {"Data": [1.4] * 5, "ZeRO2": [1.0] * 5, "Shard": [1.01] * 5, "Pipeshard": [3.0] * 5}.items()]
    recs += run_on([TACC], {"Pipeshard": STEPS5})  # an emulated run: its first VMs are one experiment
    verdict = claims.c3_data_most(claims.Table(recs, given(TACC)))
    assert verdict.status == "contradicted", verdict.evidence
    assert {c.key: c.status for c in verdict.comparisons}["Data>ZeRO2"] == "contradicted"


# -- 6. only the allocator's out of memory is the paper's x ----------------------------------------
def test_only_the_device_allocators_out_of_memory_is_the_papers_x():
    grpc = "RESOURCE_EXHAUSTED: Received message larger than max (4194405 vs. 4194304)"
    assert records.failure(RuntimeError(grpc)) == ("error", f"RuntimeError: {grpc}")
    allocator = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7.53GiB with allocator GPU_0_bfc"
    assert records.failure(RuntimeError(allocator))[0] == "oom"
    doctored = run_on([GPN], {"Pipeshard": STEPS5, "Data": STEPS5, "ZeRO2": STEPS5})
    doctored.append(trial("Shard", GPN, [], rtt=20.2, status="oom", reason=f"RuntimeError: {grpc}"))
    verdict = claims.c6_shard_worst(claims.Table(doctored, given(GPN)))
    assert verdict.status == "not shown" and verdict.crashed == [f"Shard on {GPN} vm1+vm2"], verdict.evidence
    assert "not the device allocator's out of memory" in verdict.evidence[0]


@pytest.mark.parametrize("ran_on, share", [
    ({"shared": True}, "its share of a shared GPU"),
    ({"platform": "cpu"}, "this machine's memory, where the CPU stands in for a GPU"),
], ids=["a-shared-gpu", "the-cpu"])
def test_on_a_stand_in_for_the_gpu_out_of_memory_is_the_papers_x_only_beyond_the_modelled_gpu(ran_on, share):
    """ZeRO2 "ran out" at 10.2 GiB in a harness share of an H200 (or of this machine's memory),
    below the 14.4 GiB a T4 of UTAH-GPN allows: a harness error. At 30 GiB the modelled GPU could
    not have held it either. With no need recorded, it is not known to be the paper's x."""
    def c1(zero2_need):
        recs = run_on([GPN], {"Pipeshard": STEPS5, "Data": [2.0] * 5, "Shard": [9.0] * 5}, **ran_on)
        recs.append(trial("ZeRO2", GPN, [], rtt=20.2, status="oom", need_gib=zero2_need, **ran_on))
        return claims.c1_two_site(claims.Table(recs, given(GPN)))

    harness_error = c1(10.2)
    assert harness_error.status == "not shown" and harness_error.crashed
    assert (f"ran out of {share}, needing 10.2 GiB where the GPU it stands for has 14.4 GiB usable: a harness "
            "error") in harness_error.evidence[1]
    assert check(harness_error, ())[0] == "failed"
    assert f"ran out of {share} before its need was known" in c1(None).evidence[1]
    papers_x = c1(30.0)
    assert {c.key: c.status for c in papers_x.comparisons}["Pipeshard<ZeRO2"] == "holds"
    assert papers_x.evidence[1].endswith("vs x (out of memory)")  # shown as judged, against the modelled GPU


# -- 7. records ------------------------------------------------------------------------------------
def test_a_duplicate_record_is_refused_in_one_line_naming_the_trial():
    recs = run_on([GPN], {"Data": STEPS5, "Pipeshard": STEPS5})
    copy = {**recs[0], "record_id": "a-second-record"}
    with pytest.raises(claims.DuplicateRecord) as e:
        claims.judge([*recs, copy], given(GPN))
    assert str(e.value).count("\n") == 0 and f"Data on {GPN} vm1+vm2" in str(e.value) and "a-second-record" in str(e.value)
    mem = [memory("gpt2m", "Data", GPN, ("vm1", "vm2"), 12.0)]
    with pytest.raises(claims.DuplicateRecord, match="two memory analyses of gpt2m Data"):
        claims.judge_memory([*mem, {**mem[0], "record_id": "again"}], given(GPN))


@pytest.mark.parametrize("bad", [0.0, float("nan"), -1.0, float("inf")])
def test_a_step_time_that_is_not_a_positive_number_is_a_crash(bad):
    recs = run_on([GPN], {"Pipeshard": STEPS5, "Data": [2.0] * 5, "ZeRO2": [2.0] * 5, "Shard": [9.0] * 5})
    shard = recs[-1]
    shard["timing"]["step_times_s"][2] = bad  # doctored after validation: NaN and negatives never pass the schema
    verdict = claims.c6_shard_worst(claims.Table(recs, given(GPN)))
    assert verdict.status == "not shown" and verdict.crashed == [f"Shard on {GPN} vm1+vm2"]
    assert claims.state(shard) == "crashed" and "not positive numbers" in claims.problem(shard)


def test_a_nan_step_time_in_a_file_is_refused_naming_the_field():
    """A run writes no NaN (JSON has none); Python's reader takes one: a file that holds one was
    not written by a run, and is refused before any verdict, as a duplicate is."""
    r = run_on([GPN], {"Data": STEPS5})[0]
    line = json.dumps(r).replace('"step_times_s": [1.0', '"step_times_s": [NaN')
    with pytest.raises(records.InvalidRecord, match=r"^results.jsonl:3: trial record field timing/step_times_s/0: nan "):
        records.loads(line, "results.jsonl:3")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_trial_whose_loss_is_not_finite_is_a_crash_however_it_was_timed(bad):
    recs = run_on([GPN], {"Pipeshard": STEPS5, "Data": [2.0] * 5, "ZeRO2": [2.0] * 5, "Shard": [9.0] * 5})
    pipeshard = recs[0]
    assert pipeshard["technique"] == "Pipeshard" and pipeshard["losses"]
    pipeshard["losses"][-1] = bad
    assert claims.state(pipeshard) == "crashed" and "not finite numbers" in claims.problem(pipeshard)
    verdict = claims.c1_two_site(claims.Table(recs, given(GPN)))
    assert verdict.status == "not shown" and f"Pipeshard on {GPN} vm1+vm2" in verdict.crashed


def test_a_slice_given_with_no_records_is_not_shown_not_invisible():
    """judge() over a run of two slices, one of which has no record: its comparisons are made and
    not shown, where before the part held on the other slice alone."""
    recs = run_on([TACC], {"Pipeshard": STEPS5, "Data": [2.0] * 5, "ZeRO2": [2.0] * 5, "Shard": [9.0] * 5})
    verdicts = {v.part: v for v in claims.judge(recs, given(TACC, GPN))}
    assert verdicts["C6.shard-worst"].status == "not shown"
    assert {c.id for c in verdicts["C6.shard-worst"].comparisons if c.status == "not shown"} == {
        f"C6.shard-worst/{GPN}/{o}<Shard" for o in ("Data", "ZeRO2", "Pipeshard")}
    assert verdicts["C1.two-site"].status == "not shown" and verdicts["C1.two-site"].comparisons
    assert claims.judge(recs, given(TACC))[7].status == "holds"  # C6 on the slice that ran


def test_a_judged_verdict_reads_back_from_json():
    verdict = single_site(1.5)
    limits.apply([verdict], SIMILARITY, limits.Run(links=links_doc(TACC, 0.75, 0.3)))
    doc = json.loads(json.dumps(verdict.to_dict(), allow_nan=False))
    assert doc["outcome"] == claims.EXCUSED and {c["id"] for c in doc["comparisons"]} == {
        f"C1.single-site/{TACC}/Pipeshard<{o}" for o in ("Data", "ZeRO2", "Shard")}
    assert math.isclose(next(c for c in doc["comparisons"] if c["key"] == "Pipeshard<Data")["excuse"]["figure"], 2.5)


def test_a_trial_out_of_its_share_of_a_shared_gpu_is_recorded_as_a_harness_error():
    """The runner's record, where four emulated GPUs share one physical GPU: ZeRO2 out of memory
    with a step of 10.2 GiB (a T4 of UTAH-GPN has 14.4 usable) is an error, not the paper's x;
    at 30 GiB it is out of memory as the modelled GPU would be."""
    from harness.backends import layout
    from harness.core.config import Budget
    from harness.runs import trials

    sl = slices.load(GPN)
    class OneGPU:  # the facts an emulated cluster on one physical GPU gives a record, and nothing else
        processes = layout.gpu([(vm.name, vm.gpus) for vm in sl.vms], ["0"])

        def facts(self, vms):
            return {"network": {"mechanism": None}, **layout.facts(self.processes, list(vms))}

    runner = trials.Runner(OneGPU(), [sl], Budget(model="scale-tiny"))
    _, allocator = records.failure(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7.53GiB"))
    trial = trials.Trial.on(sl, "ZeRO2")
    small = runner.record(trials.TrialResult(trial, info={"bytes_per_device": int(10.2 * 2**30)}).fail("oom", allocator))
    assert small["status"] == "error" and "a harness error" in small["reason"] and allocator in small["reason"]
    big = runner.record(trials.TrialResult(trial, info={"bytes_per_device": 30 * 2**30}).fail("oom", allocator))
    assert big["status"] == "oom" and big["cluster"]["gpu_sharing"]


def pipeshard_oom(slice_name: str, rows_gib, gpus) -> dict:
    """Pipeshard out of memory on all VMs, its timed step not the paper's program, whose need per
    GPU of each mesh row (compiled for `gpus`) is rows_gib (None: not analysed)."""
    r = trial("Pipeshard", slice_name, [], rtt=RTT[slice_name], status="oom", need_gib=40.0)
    r["memory"]["papers_program"] = {
        "bytes_per_row": None if rows_gib is None else [int(g * 2**30) for g in rows_gib], "gpus": list(gpus),
        "source": "XLA's GPU compiler, Pipeshard as Alpa compiles it", "reason": "no compiler" if rows_gib is None else None}
    return records.validate(r)


def test_out_of_memory_in_a_step_that_is_not_the_papers_program_is_the_x_only_where_that_program_is_too():
    """Pipeshard's timed step is one program for what Alpa compiled as one per stage, and it may
    need more. Where Alpa's stages fit their GPUs, its out of memory is a harness error, and C1
    fails naming it; where a stage does not fit its own VM's GPU (the T4 of UTAH-GPN's second VM),
    it is the paper's x; where that need is not known, it is no result."""
    def c1(pipeshard):
        recs = run_on([GPN], {"Data": [2.0] * 5, "ZeRO2": [3.0] * 5, "Shard": [9.0] * 5}) + [pipeshard]
        return claims.c1_two_site(claims.Table(recs, given(GPN)))

    fits = c1(pipeshard_oom(GPN, [18.8, 12.0], ["RTX6000", "T4"]))
    assert fits.status == "not shown" and fits.crashed == [f"Pipeshard on {GPN} vm1+vm2"], fits.evidence
    assert ("ran out of memory in its timed step (40.0 GiB per GPU), which is not the program the paper's stack "
            "compiled: that program (XLA's GPU compiler, Pipeshard as Alpa compiles it) needs per GPU 18.8 GiB on the "
            "RTX6000 (21.6 GiB usable), 12.0 GiB on the T4 (14.4 GiB usable), and would have run, so this is a harness "
            "error") in fits.evidence[0], fits.evidence
    assert check(fits, ())[0] == "failed"
    # The same needs the other way round: the T4's stage is over its 14.4 GiB, so Alpa's ran out too.
    t4_short = c1(pipeshard_oom(GPN, [12.0, 18.8], ["RTX6000", "T4"]))
    assert not t4_short.crashed and t4_short.status == claims.CONTRADICTED, t4_short.evidence
    assert claims.state(pipeshard_oom(GPN, [22.0], ["RTX6000"])) == "oom"
    unknown = c1(pipeshard_oom(GPN, None, ["RTX6000", "T4"]))
    assert unknown.crashed and "that program's need is unknown (no compiler)" in unknown.evidence[0]
    assert "unknown GPU 'V100'" in claims.problem(pipeshard_oom(GPN, [1.0, 1.0], ["RTX6000", "V100"]))
    assert "2 mesh rows and 1 GPUs" in claims.problem(pipeshard_oom(GPN, [1.0, 1.0], ["RTX6000"]))
    empty = pipeshard_oom(GPN, [1.0], ["RTX6000"])
    empty["memory"]["papers_program"]["gpus"] = []
    with pytest.raises(records.InvalidRecord, match="memory/papers_program/gpus"):
        records.validate(empty)
    # Without the field, a step that is the paper's program: the allocator's out of memory is the x.
    plain = trial("Pipeshard", GPN, [], rtt=20.2, status="oom")
    assert claims.state(plain) == "oom"


def test_the_runner_records_what_alpas_stages_need_where_pipeshard_runs_out_of_memory():
    """The runner's record of a trial out of memory on real (unshared) GPUs: Pipeshard's carries
    what its stages as Alpa compiles them need on each VM's GPU; the scale model's stages fit, so
    the trial is a harness error. Data's timed step is the paper's program, and its stays the x."""
    from harness.core.config import Budget
    from harness.runs import trials

    sl = slices.load(TACC)

    class OwnGPUs:  # the facts a cluster of real GPUs, one per device, gives a record
        def facts(self, vms):
            return {"network": {"mechanism": None}}

    runner = trials.Runner(OwnGPUs(), [sl], Budget(model="scale-tiny"), memory_compiler="cpu")
    _, allocator = records.failure(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7.53GiB"))
    info = {"bytes_per_device": 30 * 2**30}
    pipeshard = runner.record(trials.TrialResult(trials.Trial.on(sl, "Pipeshard"), info=info).fail("oom", allocator))
    program = pipeshard["memory"]["papers_program"]
    assert program["gpus"] == ["RTX6000", "T4"] and len(program["bytes_per_row"]) == 2
    assert 0 < max(program["bytes_per_row"]) < 2**30 and program["source"].startswith("XLA's CPU compiler")
    assert pipeshard["status"] == "error" and "would have run, so this is a harness error" in pipeshard["reason"]
    assert allocator in pipeshard["reason"]
    data = runner.record(trials.TrialResult(trials.Trial.on(sl, "Data"), info=info).fail("oom", allocator))
    assert data["status"] == "oom" and "papers_program" not in data["memory"]
    with pytest.raises(BadInput, match="memory_compiler must be one of auto, cpu, gpu, got 'tpu'"):
        trials.Runner(OwnGPUs(), [sl], Budget(model="scale-tiny"), memory_compiler="tpu")


def test_a_ctrl_c_while_the_papers_program_compiles_keeps_the_trials_record(monkeypatch):
    """Compiling Alpa's stages for a trial out of memory takes seconds: the user's Ctrl-C then
    still leaves the trial's record, interrupted, and goes on."""
    from harness.backends.contract import Failed
    from harness.core.config import Budget
    from harness.runs import trials

    sl = slices.load(TACC)

    class OutOfMemory:  # a cluster whose workers' build answers with the allocator's out of memory
        one_group_at_a_time = False

        def build(self, vms, key, job, steps):
            raise Failed(*records.failure(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7GiB")))

        def facts(self, vms):
            return {"network": {"mechanism": None}}

    def ctrl_c(compiler):
        raise KeyboardInterrupt

    monkeypatch.setattr(trials.gpu_compiler, "choose", ctrl_c)
    runner, kept = trials.Runner(OutOfMemory(), [sl], Budget(model="scale-tiny")), []
    with pytest.raises(KeyboardInterrupt):
        runner.measure(trials.Trial.on(sl, "Pipeshard"), kept.append)
    assert [(r["technique"], r["status"], r["reason"]) for r in kept] == [("Pipeshard", "error", "interrupted by the user")]


def test_c7s_pick_is_excused_as_far_as_the_papers_own_scale_and_this_runs_overhead_reach():
    """The published algorithm's T per GPU already favours one VM at the paper's scale (the cost
    model on UTAH-GPN); a run whose Pipeshard carries more overhead than gpt2m's may fall short
    by that much more, and no further."""
    def c7(pipeshard_s):
        recs = run_on([GPN], {"Pipeshard": [pipeshard_s] * 5, "Data": [20.0] * 5, "ZeRO2": [20.0] * 5,
                              "Shard": [30.0] * 5})
        recs += [trial(t, GPN, STEPS5, vms=(vm,)) for vm in ("vm1", "vm2") for t in ("Data", "Shard")]
        return claims.c7_geo_pipeshard(claims.Table(recs, given(GPN)))

    run = limits.Run(links=links_doc(GPN, pipeshard_here=2.6, pipeshard_paper=1.6))  # 1.38x as long a step
    outcome, message = check(c7(5.0), SIMILARITY, run)
    assert outcome == "xfailed", message
    assert "at the paper's scale the cost model gives UTAH-GPN's best single VM" in message
    assert "this run's Pipeshard step is 1.38x as long against its compute as gpt2m's was" in message
    outcome, message = check(c7(9.0), SIMILARITY, run)
    assert outcome == "failed" and "beyond what the mechanism's figure explains" in message, message
    assert check(c7(5.0), SIMILARITY, limits.Run())[0] == "failed"  # no links document: nothing measured
    # A run whose Pipeshard carries less overhead than gpt2m's cannot lean on the paper's shortfall.
    light = limits.Run(links=links_doc(GPN, pipeshard_here=1.3, pipeshard_paper=1.6))  # 0.88x as long
    outcome, message = check(c7(2.0), SIMILARITY, light)
    assert outcome == "failed" and "does not excuse it" in message and "(the smaller, 0.885x, is the figure)" in message, message


@pytest.mark.parametrize("alone", [(), ("vm1",), ("vm1", "vm2")])
def test_the_trials_table_has_as_many_cells_in_every_row_as_its_header(alone):
    """A run of trials on all VMs only (a GPU's paper phase) once had a header one cell longer than its rows."""
    from tests_cpu.claim_records import trial

    recs = [trial(t, "UTAH-GPN", [1.0] * 5) for t in Technique]
    recs += [trial(t, "UTAH-GPN", [2.0] * 5, vms=(vm,)) for vm in alone for t in Technique]
    text = report.markdown(recs, [], [], {}, [])
    table = text[text.index("### UTAH-GPN"):].split("\n\n")[1].splitlines()
    assert len(table) == 2 + len(Technique)
    assert {line.count("|") for line in table} == {4 + 2 * len(alone)}, table
