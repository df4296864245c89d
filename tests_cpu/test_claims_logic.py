"""The claim functions on hand-made records.

Every part is tried on the tables that used to fool it: a crashed trial (never the paper's x), a
missing trial (never a win), every trial failed, ties within the noise, and a run with a
single-site slice only."""

from harness.paper import claims
from harness.platform import slices
from harness.runs import noise
from tests_cpu.claim_records import memory, trial

TACC, GPN = "TACC-TACC", "UTAH-GPN"
SLICES = [slices.load(TACC), slices.load(GPN)]
FOUR = ("Data", "ZeRO2", "Shard", "Pipeshard")


def table(*recs) -> claims.Table:
    """The records judged as a run on the slices they name (a slice given with no record is
    judged too: test_verdicts.py)."""
    names = {r["cluster"]["slice"] for r in recs}
    return claims.Table(list(recs), [sl for sl in SLICES if sl.name in names])


def all_vms(slice_name, rtt, times: dict, status: dict | None = None, **kw) -> list[dict]:
    status = status or {}
    return [trial(t, slice_name, ts, rtt=rtt, status=status.get(t, "ok"), **kw) for t, ts in times.items()]


def alone(slice_name, vm, times: dict, status: dict | None = None) -> list[dict]:
    status = status or {}
    return [trial(t, slice_name, ts, vms=(vm,), status=status.get(t, "ok")) for t, ts in times.items()]


FAST_PIPESHARD = {"Data": [2.0, 2.1, 2.0], "ZeRO2": [2.5, 2.5, 2.6], "Shard": [9, 9, 9], "Pipeshard": [1.0, 1.1, 1.0]}


# -- C1 ----------------------------------------------------------------------------------------------
def test_c1_a_clear_win_holds_and_a_clear_loss_contradicts():
    assert claims.c1_two_site(table(*all_vms(GPN, 20, FAST_PIPESHARD))).status == "holds"
    slow = {**FAST_PIPESHARD, "Pipeshard": [3.0, 3.1, 3.0]}
    assert claims.c1_two_site(table(*all_vms(GPN, 20, slow))).status == "contradicted"


def test_c1_a_loss_inside_the_measured_noise_is_not_a_contradiction():
    times = {"ZeRO2": [5, 5, 5], "Shard": [9, 9, 9], "Data": [2.0, 1.6, 2.4], "Pipeshard": [2.1, 1.7, 2.5]}
    assert claims.c1_two_site(table(*all_vms(GPN, 20, times))).status == "within noise"


def test_c1_out_of_memory_is_the_papers_x_a_crash_is_not():
    oom = claims.c1_two_site(table(*all_vms(GPN, 20, FAST_PIPESHARD, {"Data": "oom"})))
    assert oom.status == "holds" and "x (out of memory)" in oom.evidence[0]
    lost = claims.c1_two_site(table(*all_vms(GPN, 20, FAST_PIPESHARD, {"Pipeshard": "oom"})))
    assert lost.status == "contradicted"
    crashed = claims.c1_two_site(table(*all_vms(GPN, 20, FAST_PIPESHARD, {"Data": "error"})))
    assert crashed.status == "not shown" and crashed.crashed == [f"Data on {GPN} vm1+vm2"]
    assert "crashed" in crashed.evidence[0]


def test_c1_a_missing_trial_is_not_a_win():
    recs = all_vms(GPN, 20, {"Shard": [9, 9, 9], "Pipeshard": [1, 1, 1]})  # no Data, no ZeRO2
    verdict = claims.c1_two_site(table(*recs))
    assert verdict.status == "not shown" and sum("not run" in e for e in verdict.evidence) == 2


def test_c1_every_trial_failed_is_not_shown():
    recs = all_vms(GPN, 20, FAST_PIPESHARD, dict.fromkeys(FOUR, "oom"))
    assert claims.c1_two_site(table(*recs)).status == "not shown"


def test_c1_parts_split_by_site():
    single_only = table(*all_vms(TACC, 0.1, FAST_PIPESHARD))
    assert claims.c1_two_site(single_only).status == "not shown"
    assert claims.c1_single_site(single_only).status == "holds"
    assert claims.c1_single_site(table(*all_vms(GPN, 20, FAST_PIPESHARD))).status == "not shown"
    assert claims.c1_two_site(table()).status == "not shown"


# -- C2 ----------------------------------------------------------------------------------------------
def test_c2_order_compares_every_pair_of_the_order():
    assert claims.c2_order(table(*all_vms(GPN, 20, FAST_PIPESHARD))).status == "holds"
    swapped = {**FAST_PIPESHARD, "ZeRO2": [1.5, 1.5, 1.5]}  # ZeRO2 before Data
    verdict = claims.c2_order(table(*all_vms(GPN, 20, swapped)))
    assert verdict.status == "contradicted"
    assert {c.key: c.status for c in verdict.comparisons} == {
        "Pipeshard<Data": "holds", "Pipeshard<ZeRO2": "holds", "Pipeshard<Shard": "holds",
        "Data<ZeRO2": "contradicted", "Data<Shard": "holds", "ZeRO2<Shard": "holds"}
    crashed = claims.c2_order(table(*all_vms(GPN, 20, FAST_PIPESHARD, {"ZeRO2": "error"})))
    assert crashed.status == "not shown" and crashed.crashed


def sensitivity_trials(hi_times: dict | None = None, hi_status: dict | None = None) -> list[dict]:
    lo = {"Pipeshard": [1.2] * 3, "Data": [1.0] * 3, "ZeRO2": [1.0] * 3, "Shard": [1.5] * 3}
    hi = hi_times or {"Pipeshard": [1.3] * 3, "Data": [3.0] * 3, "ZeRO2": [4.0] * 3, "Shard": [15.0] * 3}
    return all_vms(TACC, 0.1, lo) + all_vms(GPN, 20, hi, hi_status)


def test_c2_sensitivity_compares_growth_with_rtt():
    assert claims.c2_sensitivity(table(*sensitivity_trials())).status == "holds"
    flat_shard = {"Pipeshard": [1.3] * 3, "Data": [3.0] * 3, "ZeRO2": [4.0] * 3, "Shard": [1.6] * 3}
    verdict = claims.c2_sensitivity(table(*sensitivity_trials(flat_shard)))
    assert verdict.status == "contradicted" and verdict.comparisons[0].id == f"C2.sensitivity/{TACC}..{GPN}/Shard>ZeRO2"
    assert {c.key for c in verdict.comparisons if c.status == "contradicted"} == {"Shard>ZeRO2", "Shard>Data"}


def test_c2_sensitivity_does_not_hold_when_every_trial_failed_or_one_crashed():
    failed = sensitivity_trials(hi_status=dict.fromkeys(FOUR, "oom"))
    verdict = claims.c2_sensitivity(table(*failed))
    assert verdict.status == "not shown" and len(verdict.comparisons) == 6  # every pair of techniques
    crashed = claims.c2_sensitivity(table(*sensitivity_trials(hi_status={"Shard": "error"})))
    assert crashed.status == "not shown" and crashed.crashed == [f"Shard on {GPN} vm1+vm2"]
    assert claims.c2_sensitivity(table(*all_vms(GPN, 20, FAST_PIPESHARD))).status == "not shown"  # one RTT


# -- C3 ----------------------------------------------------------------------------------------------
def single_vm(times: dict, status: dict | None = None, slice_name=TACC, vm="vm1") -> list[dict]:
    return alone(slice_name, vm, times, status)


def test_c3_single_vm_compares_the_first_vm_and_needs_every_trial():
    recs = single_vm({"Data": [1.0] * 3, "ZeRO2": [1.1] * 3, "Shard": [1.2] * 3, "Pipeshard": [2.0] * 3})
    assert claims.c3_single_vm(table(*recs)).status == "holds"
    no_pipeshard = single_vm({"Data": [1.0] * 3, "Shard": [1.2] * 3})
    assert claims.c3_single_vm(table(*no_pipeshard)).status == "not shown"
    # a crashed Data is not out of memory: it must not hand the comparison to Shard
    crashed = single_vm({"Data": [1.0] * 3, "Shard": [1.2] * 3, "Pipeshard": [2.0] * 3}, {"Data": "error"})
    verdict = claims.c3_single_vm(table(*crashed))
    assert verdict.status == "not shown" and verdict.crashed == [f"Data on {TACC} vm1"]
    # the model does not fit: not part of the claim, so nothing to compare
    too_big = single_vm({"Data": [1] * 3, "Shard": [1] * 3, "Pipeshard": [1] * 3}, {"Data": "oom", "Shard": "oom"})
    assert claims.c3_single_vm(table(*too_big)).status == "not shown"


def experiment(data, shard, zero2=(9.0, 9.0, 9.0), pipeshard=(9.0, 9.0, 9.0), slice_name=TACC, status=None):
    return single_vm({"Data": list(data), "ZeRO2": list(zero2), "Shard": list(shard), "Pipeshard": list(pipeshard)},
                     status, slice_name)


def test_c3_data_most_needs_more_clear_wins_than_anyone_elses_wins():
    assert claims.c3_data_most(table(*experiment([1.0] * 3, [2.0] * 3))).status == "holds"
    assert claims.c3_data_most(table(*experiment([2.0] * 3, [1.0] * 3))).status == "contradicted"
    # one clear win each (live slices: two experiments): Data wins no more often than Shard
    draw = claims.c3_data_most(table(*experiment([1.0] * 3, [2.0] * 3), *experiment([2.0] * 3, [1.0] * 3,
                                                                                     slice_name=GPN)))
    assert {c.key: c.status for c in draw.comparisons} == {"Data>ZeRO2": "holds", "Data>Shard": "contradicted",
                                                            "Data>Pipeshard": "holds"}
    assert "clear wins Data 1, ZeRO2 0, Shard 1" in draw.evidence[0]
    # Shard's median is faster, but by less than the spread of the repeats: a tie
    tie = claims.c3_data_most(table(*experiment([1.0, 1.2, 1.4], [0.9, 1.1, 1.3])))
    assert tie.status == "within noise" and "wins or ties Data 1, ZeRO2 0, Shard 1" in tie.evidence[0]


def test_c3_data_most_counts_zero2_and_a_missing_trial_is_no_win():
    zero2_wins = claims.c3_data_most(table(*experiment([2.0] * 3, [3.0] * 3, zero2=[1.0] * 3)))
    assert zero2_wins.status == "contradicted"
    # Data, slower than the winner beyond the noise in the one experiment, wins none: not more than anyone
    assert {c.key: c.status for c in zero2_wins.comparisons} == {
        "Data>ZeRO2": "contradicted", "Data>Shard": "contradicted", "Data>Pipeshard": "contradicted"}
    missing = single_vm({"Data": [1.0] * 3, "Shard": [2.0] * 3, "Pipeshard": [3.0] * 3})  # no ZeRO2
    assert claims.c3_data_most(table(*missing)).status == "not shown"
    crashed = claims.c3_data_most(table(*experiment([1.0] * 3, [2.0] * 3, status={"Shard": "error"})))
    assert crashed.status == "not shown" and crashed.crashed


def test_c3_an_emulated_vm_is_one_experiment_on_every_slice():
    """On emulated slices the first VM of every slice is the same share of one machine: its runs
    are one experiment (step times pooled), not one win per slice."""
    emulated_marker = all_vms(GPN, 20, FAST_PIPESHARD)  # the all-VM trials say the slices are emulated
    recs = experiment([1.0] * 3, [2.0] * 3) + experiment([1.0] * 3, [2.0] * 3, slice_name=GPN) + emulated_marker
    verdict = claims.c3_data_most(table(*recs))
    assert "clear wins Data 1, " in verdict.evidence[0] and len(claims.Table(recs, SLICES).single_vm_experiments()) == 1
    live = [{**r, "cluster": {**r["cluster"], "network": {"mechanism": "live", "rtt_ms": 20.0}}}
            for r in emulated_marker]
    live_recs = experiment([1.0] * 3, [2.0] * 3) + experiment([1.0] * 3, [2.0] * 3, slice_name=GPN) + live
    assert "clear wins Data 2, " in claims.c3_data_most(table(*live_recs)).evidence[0]


def test_c3_is_not_judged_on_a_vm_of_one_gpu():
    """The paper's single-VM runs are on 2 GPUs. Alone on one GPU, every technique is the
    single-device program: a 6% gap there (measured on a slice of one-GPU VMs) is no win."""
    recs = [trial(t, TACC, ts, vms=("vm1",), gpus_per_vm=1)
            for t, ts in {"Data": [1.06] * 3, "ZeRO2": [1.1] * 3, "Shard": [1.0] * 3, "Pipeshard": [1.6] * 3}.items()]
    for verdict in (claims.c3_single_vm(table(*recs)), claims.c3_data_most(table(*recs))):
        assert verdict.status == "not shown" and not verdict.comparisons, verdict.evidence
        assert verdict.notes == [f"{TACC} vm1 alone: {claims.ONE_GPU}"]


# -- C5, C6 ------------------------------------------------------------------------------------------
def test_c5_is_judged_where_the_paper_makes_it_and_beyond_the_noise():
    pipeshard = all_vms(TACC, 0.1, {"Pipeshard": [1.0] * 3})  # 10 steps of 1 s an epoch
    assert claims.c5_more_gpus(table(*pipeshard, *alone(TACC, "vm1", {"Data": [0.3] * 3}))).status == "holds"
    assert claims.c5_more_gpus(table(*pipeshard, *alone(TACC, "vm1", {"Data": [0.8] * 3}))).status == "contradicted"
    noisy = alone(TACC, "vm1", {"Data": [0.3, 0.52, 0.9]})  # 20 steps of 0.52 s vs 10 of 1 s, spread 6 s/epoch
    assert claims.c5_more_gpus(table(*pipeshard, *noisy)).status == "within noise"
    two_site_only = table(*all_vms(GPN, 20, {"Pipeshard": [1.0] * 3}), *alone(GPN, "vm1", {"Data": [0.3] * 3}))
    verdict = claims.c5_more_gpus(two_site_only)
    assert verdict.status == "not shown" and "not a slice where the paper makes the point" in verdict.evidence[0]


def test_a_difference_inside_how_far_the_run_drifted_is_not_a_contradiction():
    """C5 on TACC-TACC: Data on vm1 alone 5% slower than Pipeshard, both with steady steps (no
    noise of their own). On an emulated run the same Data on vm1, measured again on UTAH-GPN, is
    one experiment repeated: there it ran 20% faster, so the machine moved that much between
    trials and 5% is inside it. Where the repeat agrees, or where the VMs are different machines
    (a live run: no repeat), 5% stays a contradiction."""
    def c5(repeat_s: float, mechanism: str = "userspace"):
        t = table(*all_vms(TACC, 0.1, {"Pipeshard": [1.0] * 3}, mechanism=mechanism),  # 10 s an epoch
                  *all_vms(GPN, 20, {"Pipeshard": [1.0] * 3}, mechanism=mechanism),
                  *alone(TACC, "vm1", {"Data": [0.525] * 3}),  # 20 steps: 10.5 s an epoch
                  *alone(GPN, "vm1", {"Data": [repeat_s] * 3}))
        return t, claims.c5_more_gpus(t)

    drifted, verdict = c5(0.42)
    assert verdict.status == "within noise", verdict.evidence
    assert "10.5 s/epoch (±1.1)" in verdict.evidence[0]
    assert drifted.drift == noise.CAP  # the repeats 20% apart: their spread, capped
    steady, verdict = c5(0.525)
    assert verdict.status == "contradicted" and steady.drift == 0.0, verdict.evidence
    live, verdict = c5(0.42, mechanism="live")
    assert verdict.status == "contradicted" and live.drift == 0.0, verdict.evidence


def test_c6_needs_every_technique_and_no_crash():
    assert claims.c6_shard_worst(table(*all_vms(GPN, 20, FAST_PIPESHARD))).status == "holds"
    no_zero2 = {k: v for k, v in FAST_PIPESHARD.items() if k != "ZeRO2"}
    assert claims.c6_shard_worst(table(*all_vms(GPN, 20, no_zero2))).status == "not shown"
    crashed = claims.c6_shard_worst(table(*all_vms(GPN, 20, FAST_PIPESHARD, {"Shard": "error"})))
    assert crashed.status == "not shown" and crashed.crashed == [f"Shard on {GPN} vm1+vm2"]


# -- C7 ----------------------------------------------------------------------------------------------
def c7_table(pipeshard_s: float, single_s: dict, slice_name=GPN, rtt=20.0, extra=(), status=None,
             mechanism="userspace") -> claims.Table:
    """Pipeshard on all VMs, and Data and Shard on each VM alone (step times in s, half the batch).
    VMs alone at different speeds are live ones (mechanism): emulated VMs of one speed that ran one
    experiment that far apart would say the run drifted beyond any difference (claims.drift)."""
    recs = all_vms(slice_name, rtt, {"Pipeshard": [pipeshard_s] * 3, **dict(extra)}, status, mechanism=mechanism)
    for vm in ("vm1", "vm2"):
        recs += alone(slice_name, vm, {t: [single_s.get((t, vm), 1.0)] * 3 for t in ("Data", "Shard")}, status)
    return table(*recs)


SLOWER_ALL_VMS = {"Data": [0.6] * 3, "ZeRO2": [0.7] * 3, "Shard": [2.0] * 3}


def test_c7_each_half_is_tested_on_its_own():
    # Pipeshard at 0.4 s for 4 GPUs against 1 s for 2: T per GPU 1.25x, step 4 picks Pipeshard
    fast_pipeshard = c7_table(0.4, {}, extra=SLOWER_ALL_VMS)
    assert claims.c7_geo_pipeshard(fast_pipeshard).status == "holds"
    assert claims.c7_single_vm(fast_pipeshard).status == "holds"
    # one VM trains much faster: the paper's second half holds, its first half does not
    fast_single = c7_table(2.0, {("Data", "vm1"): 0.3})
    geo = claims.c7_geo_pipeshard(fast_single)
    assert geo.status == "contradicted" and "published picks Data on vm1" in geo.evidence[0]
    assert claims.c7_single_vm(fast_single).status == "holds"


def test_c7_geo_pipeshard_also_needs_pipeshard_to_be_the_right_pick():
    """The second comparison of C7's first half, which no declared limit covers: the algorithm
    picks Pipeshard, but Data on both VMs trains faster still; without the other techniques'
    all-VM trials it is not shown."""
    picked_but_slower = c7_table(0.4, {}, extra={**SLOWER_ALL_VMS, "Data": [0.2] * 3})
    verdict = claims.c7_geo_pipeshard(picked_but_slower)
    assert {c.key: c.status for c in verdict.comparisons} == {"picks-Pipeshard": "holds",
                                                              "Pipeshard<others@all-VMs": "contradicted"}
    assert {c.key: c.status for c in claims.c7_geo_pipeshard(c7_table(0.4, {})).comparisons} == {
        "picks-Pipeshard": "holds", "Pipeshard<others@all-VMs": "not shown"}


def test_c7_a_single_vm_picked_by_t_per_gpu_must_also_train_faster():
    """T per GPU favours 2 GPUs that train slower than 4: Pipeshard 0.5 s for 4 GPUs (5 s an
    epoch) against 0.3 s for 2 (6 s an epoch): the algorithm picks the single VM, which is slower."""
    verdict = claims.c7_single_vm(c7_table(0.5, {("Data", "vm1"): 0.3, ("Shard", "vm1"): 0.3}))
    assert verdict.status == "contradicted" and "picks Data on vm1" in verdict.evidence[0]


def test_c7_passing_over_a_faster_single_vm_contradicts_the_second_half():
    # 4 GPUs in 0.9 s (9 s an epoch), T per GPU 1.11x a VM alone's at 1 s: step 6 answers ZeRO2...
    zero2 = c7_table(0.9, {}, extra={"ZeRO2": [0.9] * 3})
    assert claims.c7_single_vm(zero2).status == "holds"  # ... and no single VM (20 s an epoch) was faster
    # 4 GPUs in 0.9 s against one VM in 0.4 s (8 s an epoch): step 5 picks it (holds); with the one
    # VM failing on vm1 and slower on vm2 the algorithm must not be blamed for vm2
    assert claims.c7_single_vm(c7_table(0.9, {("Data", "vm2"): 0.4}, mechanism="live")).status == "holds"


def test_c7_missing_or_crashed_trials_are_not_shown():
    no_single = table(*all_vms(GPN, 20, {"Pipeshard": [1.0] * 3}))
    assert claims.c7_geo_pipeshard(no_single).status == "not shown"
    crashed = claims.c7_geo_pipeshard(c7_table(0.4, {}, status={"Shard": "error"}))
    assert crashed.status == "not shown" and crashed.crashed
    single_site = c7_table(0.4, {}, slice_name=TACC, rtt=0.1)
    assert claims.c7_geo_pipeshard(single_site).status == "not shown"  # not geo-distributed
    assert claims.c7_single_vm(single_site).status == "holds"  # the second half is about every slice


# -- C4 ----------------------------------------------------------------------------------------------
def mem_table(*recs) -> claims.MemoryTable:
    return claims.MemoryTable(list(recs), SLICES)


def placement(model, slice_name, vms, gib: dict, status: dict | None = None, gpus_per_vm: int = 2) -> list[dict]:
    status = status or {}
    return [memory(model, t, slice_name, vms, g, status.get(t, "ok"), gpus_per_vm) for t, g in gib.items()]


NEEDS = {"Data": 14.0, "ZeRO2": 12.0, "Shard": 14.5, "Pipeshard": 18.0}


def test_c4_orderings_on_every_placement():
    recs = placement("gpt2m", GPN, ("vm1", "vm2"), NEEDS) + placement("gpt2m", GPN, ("vm1",), NEEDS)
    assert claims.c4_most(mem_table(*recs)).status == "holds"
    assert claims.c4_least(mem_table(*recs)).status == "holds"
    one_vm_differs = placement("gpt2m", GPN, ("vm1", "vm2"), NEEDS) + placement("gpt2m", GPN, ("vm1",),
                                                                              {**NEEDS, "Pipeshard": 13.0})
    assert claims.c4_most(mem_table(*one_vm_differs)).status == "contradicted"
    crashed = placement("gpt2m", GPN, ("vm1", "vm2"), {**NEEDS, "Pipeshard": None}, {"Pipeshard": "error"})
    verdict = claims.c4_most(mem_table(*crashed))
    assert verdict.status == "not shown" and verdict.crashed
    assert claims.c4_least(mem_table(*placement("gpt2m", GPN, ("vm1", "vm2"), {"Data": 14.0}))).status == "not shown"


def test_c4_orderings_are_not_judged_on_one_gpu():
    """A slice of one-GPU VMs: alone on its GPU, every technique is the single-device program, and
    bytes that differ there by bookkeeping say nothing about the techniques."""
    bookkeeping = {"Data": 20.80, "ZeRO2": 20.79, "Shard": 20.81, "Pipeshard": 20.80}
    alone = placement("gpt2m", GPN, ("vm1",), bookkeeping, gpus_per_vm=1)
    for judge in (claims.c4_most, claims.c4_least):
        verdict = judge(mem_table(*alone))
        assert verdict.status == "not shown" and "on one GPU" in verdict.notes[0]
        both = placement("gpt2m", GPN, ("vm1", "vm2"), NEEDS, gpus_per_vm=1)
        assert judge(mem_table(*alone, *both)).status == "holds"


def test_c4_fails_first_a_crash_is_not_out_of_memory():
    t4 = {"Pipeshard": "oom", "Data": "oom"}
    assert claims.c4_fails_first(mem_table(*placement("gpt2L", GPN, ("vm1", "vm2"), NEEDS, t4))).status == "holds"
    crashed = placement("gpt2L", GPN, ("vm1", "vm2"), {**NEEDS, "Pipeshard": None}, {"Pipeshard": "error", "Data": "oom"})
    verdict = claims.c4_fails_first(mem_table(*crashed))
    assert verdict.status == "not shown" and verdict.crashed
    survives = placement("gpt2L", GPN, ("vm1", "vm2"), NEEDS, {"Data": "oom"})
    assert claims.c4_fails_first(mem_table(*survives)).status == "contradicted"
    nothing_fails = placement("gpt2L", GPN, ("vm1", "vm2"), NEEDS)
    assert claims.c4_fails_first(mem_table(*nothing_fails)).status == "not shown"


def test_c4_zero2_only_names_each_technique():
    paper_like = {"Data": "oom", "Shard": "oom", "Pipeshard": "oom"}
    assert claims.c4_zero2_only(mem_table(*placement("gpt2L", GPN, ("vm1", "vm2"), NEEDS, paper_like))).status == "holds"
    verdict = claims.c4_zero2_only(mem_table(*placement("gpt2L", GPN, ("vm1", "vm2"), NEEDS, {**paper_like, "ZeRO2": "oom"})))
    assert verdict.status == "contradicted"
    assert [c.status for c in verdict.comparisons] == ["holds", "contradicted", "holds", "holds"]
    missing = placement("gpt2L", GPN, ("vm1", "vm2"), {"ZeRO2": 12.0}, {})
    assert claims.c4_zero2_only(mem_table(*missing)).status == "not shown"


def test_c4_gpt2l_one_vm_counts_zero2_and_the_first_vm():
    none_fit = dict.fromkeys(FOUR, "oom")
    recs = placement("gpt2L", TACC, ("vm1",), NEEDS, none_fit) + placement("gpt2L", GPN, ("vm1",), NEEDS, none_fit)
    assert claims.c4_gpt2l_one_vm(mem_table(*recs)).status == "holds"
    zero2_fits = {**none_fit, "ZeRO2": "ok"}
    recs = placement("gpt2L", TACC, ("vm1",), NEEDS, zero2_fits) + placement("gpt2L", GPN, ("vm1",), NEEDS, none_fit)
    assert claims.c4_gpt2l_one_vm(mem_table(*recs)).status == "contradicted"  # 1 of 2 is not most
    no_zero2 = {k: v for k, v in NEEDS.items() if k != "ZeRO2"}
    assert claims.c4_gpt2l_one_vm(mem_table(*placement("gpt2L", TACC, ("vm1",), no_zero2, none_fit))).status == "not shown"


def test_c4_observed_checks_each_run_of_the_paper_and_lists_its_contradictions():
    # UTAH-GPN, gpt2L on 4 GPUs: only ZeRO2 ran. On one VM (2 RTX), the paper's runs disagree
    # (all failed on TACC-TACC, three ran on UTAH-GPN): listed, not counted.
    paper_like = placement("gpt2L", GPN, ("vm1", "vm2"), NEEDS, {"Data": "oom", "Shard": "oom", "Pipeshard": "oom"})
    one_vm = placement("gpt2L", GPN, ("vm1",), NEEDS, dict.fromkeys(FOUR, "oom"))
    verdict = claims.c4_observed(mem_table(*paper_like, *one_vm))
    assert verdict.status == "holds"
    statuses = {c.what: c.status for c in verdict.comparisons}
    assert statuses["gpt2L on 4 GPUs: ZeRO2 ran"] == "holds"
    assert statuses["gpt2L on 1 VM: Pipeshard failed"] == "holds"
    assert any("the paper's own runs disagree" in n and "TACC-TACC 1 VM failed" in n for n in verdict.notes)
    zero2_fails = placement("gpt2L", GPN, ("vm1", "vm2"), NEEDS, dict.fromkeys(FOUR, "oom"))
    assert {c.what: c.status for c in claims.c4_observed(mem_table(*zero2_fails)).comparisons}[
        "gpt2L on 4 GPUs: ZeRO2 ran"] == "contradicted"
    crashed = claims.c4_observed(mem_table(*placement("gpt2L", GPN, ("vm1", "vm2"), {"ZeRO2": None}, {"ZeRO2": "error"})))
    assert crashed.crashed and crashed.status == "not shown"


def test_the_papers_own_observations_disagree_where_it_says_so():
    """docs/paper.md: gpt2L on 2 RTX failed on TACC-TACC but ran on UTAH-GPN and UTAH-MASS; on 4 x 24 GiB
    Data ran on UTAH-MASS and failed on GAT-AMST."""
    from harness.paper import observed

    found = {(m, t, len(g)): runs for (m, t, g), runs in observed.conflicts().items()}
    assert ("TACC-TACC 1 VM", False) in found[("gpt2L", "Data", 2)] and ("UTAH-GPN 1 VM", True) in found[("gpt2L", "Data", 2)]
    assert ("UTAH-MASS 4 GPUs", True) in found[("gpt2L", "Data", 4)] and ("GAT-AMST 4 GPUs", False) in found[("gpt2L", "Data", 4)]
    assert ("gpt2L", "Pipeshard", 2) not in found  # failed everywhere on one VM


def test_c3_emulated_vms_at_other_gpu_speeds_are_other_experiments():
    """A VM's runs pool across slices only where it computed at one speed (its GPU's share,
    harness.backends.emulation.compute): BRIS-STAR's first VM, an A30, computes at 0.63 of
    TACC-TACC's RTX6000, and is an experiment of its own."""
    from harness.backends.emulation import compute

    def at_their_speeds(recs, given):
        shares = compute.shares(given)
        return [{**r, "cluster": {**r["cluster"], "compute_shares": {vm: shares[r["cluster"]["slice"]][vm]
                                                                    for vm in r["cluster"]["vms_used"]}}}
                for r in recs]

    same = at_their_speeds(experiment([1.0] * 3, [2.0] * 3) + experiment([1.0] * 3, [2.0] * 3, slice_name=GPN)
                           + all_vms(GPN, 20, FAST_PIPESHARD), SLICES)
    assert len(claims.Table(same, SLICES).single_vm_experiments()) == 1
    bris = [SLICES[0], slices.load("BRIS-STAR")]
    other = at_their_speeds(experiment([1.0] * 3, [2.0] * 3) + experiment([2.0] * 3, [4.0] * 3, slice_name="BRIS-STAR")
                            + all_vms("BRIS-STAR", 20, FAST_PIPESHARD), bris)
    assert sorted({round(r["cluster"]["compute_shares"]["vm1"], 3) for r in other}) == [0.632, 1.0]
    experiments = claims.Table(other, bris).single_vm_experiments()
    assert len(experiments) == 2 and len({where for _, where, _, _ in experiments}) == 2
    assert "clear wins Data 2, " in claims.c3_data_most(claims.Table(other, bris)).evidence[0]
