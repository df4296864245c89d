"""Property: no claim part holds unless every comparison it names was made and went the paper's way.

Hypothesis draws tables of trials (two slices, every technique on all VMs and on each VM alone,
each trial absent, out of memory, crashed or timed) and of memory analyses. For each part an
oracle written from the paper's sentence, independently of harness.paper.claims, states what must be
true of the raw table for the part to hold; the part may say less (not shown, within noise),
never more."""
import statistics

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.paper import claims, observed
from harness.platform import slices
from tests_cpu.claim_records import CORPUS_SEQUENCES, links_doc, memory, trial

TACC, GPN = "TACC-TACC", "UTAH-GPN"  # 0.1 ms and 20 ms; both 2 RTX + 2 T4
SLICES = [slices.load(TACC), slices.load(GPN)]
RTT = {TACC: 0.1, GPN: 20.0}
TECHS = ("Data", "ZeRO2", "Shard", "Pipeshard")
WHERE = ("all", "vm1", "vm2")
DELTA = 0.1

outcome = st.one_of(st.none(), st.just(("oom", None)), st.just(("error", None)),
                    st.tuples(st.just("ok"), st.lists(st.sampled_from([0.5, 1.0, 1.1, 2.0, 3.0]), min_size=3, max_size=3)))
spec_strategy = st.fixed_dictionaries({(t, s, w): outcome for t in TECHS for s in (TACC, GPN) for w in WHERE})
PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def build(spec: dict, mechanism: str) -> claims.Table:
    recs = []
    for (t, s, w), o in spec.items():
        if o is not None:
            vms = ("vm1", "vm2") if w == "all" else (w,)
            recs.append(trial(t, s, o[1] or [], vms=vms, rtt=RTT[s], status=o[0], mechanism=mechanism))
    return claims.Table(recs, SLICES)


class Raw:
    """The oracle's view of a spec: plain medians and means, with no noise allowance."""

    def __init__(self, spec, emulated):
        # only all-VM trials cross the (emulated) link and say so
        self.spec = spec
        self.emulated = emulated and any(o is not None for (t, s, w), o in spec.items() if w == "all")

    def get(self, t, s, w="all"):
        return self.spec[(t, s, w)]

    def ok(self, t, s, w="all"):
        o = self.get(t, s, w)
        return o is not None and o[0] == "ok"

    def usable(self, t, s, w="all"):
        o = self.get(t, s, w)
        return o is not None and o[0] != "error"

    def epoch(self, o, w):
        return statistics.median(o[1]) * CORPUS_SEQUENCES // (8 if w == "all" else 4)

    def beats(self, a, b, s, wa="all", wb="all") -> bool:
        """a ran and trains faster than b (or b is out of memory), both usable."""
        oa, ob = self.get(a, s, wa), self.get(b, s, wb)
        if not (self.usable(a, s, wa) and self.usable(b, s, wb) and oa[0] == "ok"):
            return False
        return ob[0] == "oom" or self.epoch(oa, wa) < self.epoch(ob, wb)

    def slices_with_all(self):
        return [s for s in (TACC, GPN) if any(self.get(t, s) is not None for t in TECHS)]

    def experiments(self):
        """Groups of slices whose vm1 runs are one experiment."""
        on = [s for s in (TACC, GPN) if any(self.get(t, s, "vm1") is not None for t in TECHS)]
        return ([on] if on else []) if self.emulated else [[s] for s in on]

    def pooled(self, t, group):
        outs = [self.get(t, s, "vm1") for s in group]
        if any(o is not None and o[0] == "error" for o in outs):
            return ("error", None)
        if any(o is None for o in outs):
            return None
        if any(o[0] == "oom" for o in outs):
            return ("oom", None)
        return ("ok", [x for o in outs for x in o[1]])


def oracle(raw: Raw) -> dict:
    """part -> whether the raw table lets it hold (a necessary condition)."""
    every = raw.slices_with_all()
    two = [s for s in every if s == GPN]
    one = [s for s in every if s == TACC]
    others = ("Data", "ZeRO2", "Shard")
    out = {
        "C1.two-site": bool(two) and all(raw.beats("Pipeshard", o, s) for s in two for o in others),
        "C1.single-site": bool(one) and all(raw.beats("Pipeshard", o, s) for s in one for o in others),
        "C2.order": bool(two) and all(raw.beats(a, b, s) for s in two for a, b in
                                      zip(claims.PAPER_ORDER, claims.PAPER_ORDER[1:])),
        "C6.shard-worst": bool(every) and all(raw.beats(o, "Shard", s) for s in every
                                              for o in ("Data", "ZeRO2", "Pipeshard")),
        "C5.more-gpus": TACC in every and raw.beats("Data", "Pipeshard", TACC, "vm1", "all"),
    }
    if len(every) == 2 and all(raw.ok(t, s) for t in TECHS for s in every):
        growth = {t: raw.epoch(raw.get(t, GPN), "all") - raw.epoch(raw.get(t, TACC), "all") for t in TECHS}
        out["C2.sensitivity"] = growth["Shard"] > growth["ZeRO2"] > growth["Data"] > growth["Pipeshard"]
    else:
        out["C2.sensitivity"] = False
    groups = raw.experiments()
    pooled = [{t: raw.pooled(t, g) for t in TECHS} for g in groups]
    complete = [p for p in pooled if all(o is not None and o[0] != "error" for o in p.values())]

    def epoch(o):
        return statistics.median(o[1]) * CORPUS_SEQUENCES // 4 if o[0] == "ok" else float("inf")

    out["C3.single-vm"] = bool(groups) and all(
        p["Data"] is not None and p["Shard"] is not None and p["Pipeshard"] is not None
        and all(p[t][0] != "error" for t in ("Data", "Shard", "Pipeshard")) for p in pooled) and all(
        min(epoch(p["Data"]), epoch(p["Shard"])) < epoch(p["Pipeshard"]) or p["Pipeshard"][0] == "oom"
        for p in pooled if not p["Data"][0] == p["Shard"][0] == "oom") and any(
        not p["Data"][0] == p["Shard"][0] == "oom" for p in pooled)
    out["C3.data-most"] = len(complete) == len(pooled) > 0 and any(
        p["Data"][0] == "ok" and all(epoch(p["Data"]) < epoch(p[t]) for t in TECHS if t != "Data") for p in complete)

    def singles_usable(s):
        return all(raw.usable(t, s, w) for t in ("Data", "Shard") for w in ("vm1", "vm2"))

    mean = lambda o: statistics.fmean(o[1])  # noqa: E731 (Algorithm 1's T is over the mean step)
    if two and raw.ok("Pipeshard", GPN) and singles_usable(GPN):
        singles = [raw.get(t, GPN, w) for t in ("Data", "Shard") for w in ("vm1", "vm2")]
        ran = [mean(o) for o in singles if o[0] == "ok"]
        out["C7.geo-pipeshard"] = bool(ran) and mean(raw.get("Pipeshard", GPN)) < min(ran)
    else:
        out["C7.geo-pipeshard"] = False
    out["C7.single-vm"] = bool(every) and all(raw.usable("Pipeshard", s) and raw.get("Pipeshard", s) is not None
                                              and singles_usable(s) for s in every)
    return out


@PROPERTY
@given(spec=spec_strategy, emulated=st.booleans())
def test_no_timed_part_holds_unless_its_comparisons_were_made_and_went_the_papers_way(spec, emulated):
    table = build(spec, "userspace" if emulated else "live")
    allowed = oracle(Raw(spec, emulated))
    for claim in claims.TIMED_CLAIMS:
        verdict = claim(table)
        if verdict.status == "holds":
            assert allowed[verdict.part], (verdict.part, verdict.evidence)
            assert verdict.comparisons and not verdict.crashed
            assert all(c.status == "holds" for c in verdict.comparisons)


# -- memory ------------------------------------------------------------------------------------------
mem_outcome = st.one_of(st.none(), st.tuples(st.sampled_from(["ok", "oom", "error"]), st.sampled_from([12.0, 14.0, 19.0, 23.0])))
MODELS = ("gpt2m", "gpt2L")
mem_strategy = st.fixed_dictionaries({(m, t, s, w): mem_outcome for m in MODELS for t in TECHS for s in (TACC, GPN)
                                      for w in WHERE})


def mem_build(spec) -> claims.MemoryTable:
    recs = [memory(m, t, s, ("vm1", "vm2") if w == "all" else (w,), o[1] if o[0] != "error" else None, o[0])
            for (m, t, s, w), o in spec.items() if o is not None]
    return claims.MemoryTable(recs, SLICES)


def mem_oracle(spec) -> dict:
    placements = {(m, s, w) for (m, t, s, w), o in spec.items() if o is not None}

    def runs(m, s, w):
        return {t: spec[(m, t, s, w)] for t in TECHS}

    def complete(rs):
        return all(o is not None and o[0] != "error" for o in rs.values())

    def extreme(tech, most):
        return bool(placements) and all(
            complete(rs := runs(*p)) and all((rs[tech][1] > rs[o][1]) if most else (rs[tech][1] < rs[o][1])
                                             for o in TECHS if o != tech) for p in placements)

    # both slices are 2 RTX + 2 T4: all-VM placements are heterogeneous, single-VM ones are not
    mixed = [p for p in placements if p[2] == "all"]
    fails_first = bool(mixed) and all(complete(runs(*p)) for p in mixed) and any(
        runs(*p)[o][0] == "oom" for p in mixed for o in TECHS if o != "Pipeshard") and all(
        runs(*p)["Pipeshard"][0] == "oom" for p in mixed if any(runs(*p)[o][0] == "oom" for o in TECHS[:3]))
    big = [p for p in mixed if p[0] == "gpt2L"]
    zero2_only = bool(big) and all(complete(rs := runs(*p)) and rs["ZeRO2"][0] == "ok"
                                   and all(rs[o][0] == "oom" for o in ("Data", "Shard", "Pipeshard")) for p in big)
    first = [p for p in placements if p[0] == "gpt2L" and p[2] == "vm1"]
    one_vm = bool(first) and all(complete(runs(*p)) for p in first) and sum(
        all(o[0] == "oom" for o in runs(*p).values()) for p in first) > len(first) / 2
    conflicts = observed.conflicts()
    scope = [(s, pl, m, t, ran) for (s, pl, m, t), ran in observed.RUNS.items()
             if any(q[0] == m and q[1] == s for q in placements) and s in (TACC, GPN)
             and (m, t, observed.gpu_memory(s, pl)) not in conflicts]
    as_observed = bool(scope) and all(
        (o := spec[(m, t, s, "all" if pl == observed.FOUR_GPUS else "vm1")]) is not None and o[0] != "error"
        and (o[0] == "ok") == ran for s, pl, m, t, ran in scope)
    return {"C4.most": extreme("Pipeshard", True), "C4.least": extreme("ZeRO2", False),
            "C4.fails-first": fails_first, "C4.zero2-only": zero2_only, "C4.gpt2L-one-vm": one_vm,
            "C4.observed": as_observed}


@PROPERTY
@given(spec=mem_strategy)
def test_no_memory_part_holds_unless_its_comparisons_were_made_and_went_the_papers_way(spec):
    table = mem_build(spec)
    allowed = mem_oracle(spec)
    for claim in claims.MEMORY_CLAIMS:
        verdict = claim(table)
        if verdict.status == "holds":
            assert allowed[verdict.part], (verdict.part, verdict.evidence)
            assert verdict.comparisons and not verdict.crashed


# -- declared limits -----------------------------------------------------------------------------------
@PROPERTY
@given(pipeshard_over_data=st.floats(0.5, 5.0), here=st.floats(0.01, 3.0), paper=st.floats(0.01, 3.0),
       slice_name=st.sampled_from([TACC, GPN]))
def test_a_limit_excuses_nothing_beyond_its_reach_off_its_slices_or_without_its_mechanism(
        pipeshard_over_data, here, paper, slice_name):
    """C1's Pipeshard made that many times slower than Data on one slice, and a links document in
    which Pipeshard's overhead weighs `here` of its compute against the paper's `paper`: whatever
    the figures, a contradiction is excused only on TACC-TACC, within here / paper, where
    here / paper reaches the threshold."""
    from harness.paper import deviations, limits

    times = {"Pipeshard": [pipeshard_over_data] * 5, "Data": [1.0] * 5, "ZeRO2": [1.0] * 5, "Shard": [9.0] * 5}
    table = claims.Table([trial(t, slice_name, ts, rtt=RTT[slice_name]) for t, ts in times.items()],
                         [sl for sl in SLICES if sl.name == slice_name])
    verdicts = [claims.c1_single_site(table), claims.c1_two_site(table)]
    limits.apply(verdicts, deviations.declared("emulated-cpu/similarity"),
                 limits.Run(links=links_doc(slice_name, pipeshard_here=here, pipeshard_paper=paper)))
    for c in (c for v in verdicts for c in v.comparisons if c.excused):
        assert c.part == "C1.single-site" and c.slices == (TACC,), c.id
        assert here / paper >= 2.0 and c.gap <= here / paper * (1 + 1e-9), (c.id, c.gap, here / paper)
