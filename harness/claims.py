"""The paper's claims (PAPER.md, C1-C7) as functions over a table of trial records.

Each claim is split into the parts the paper states separately; a part returns a Verdict:
- holds: every comparison it makes goes the paper's way;
- within noise: none goes against the paper by more than the noise measured (the spread of the
  repeated step times of the trials compared), but some does not clearly go its way;
- contradicted: some comparison goes against the paper beyond that noise;
- not shown: the table lacks the trials the part needs (e.g. no two-site slice in the run).
Training time is compared per epoch of the corpus (median step time x steps per epoch), so that
runs with different global batches (4 GPUs or one VM) compare as the paper's 20-epoch times do. A
failed trial (out of memory, error) takes infinite time: the paper's x.

The same functions judge CPU scale-model trials, GPU trials, live slices and predictions.
"""
import math
import statistics
from dataclasses import dataclass, field

ALL = "all"
ORDER = ("holds", "within noise", "not shown", "contradicted")  # from best to worst


@dataclass
class Verdict:
    part: str  # e.g. "C1.two-site"
    statement: str  # the paper's sentence
    status: str
    evidence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"part": self.part, "statement": self.statement, "status": self.status, "evidence": self.evidence}


class Table:
    """Trial records indexed by (technique, slice, VMs used)."""

    def __init__(self, recs: list[dict], slices=()):
        self.records = recs
        self.gpus = {(sl.name, vm.name): vm.gpu for sl in slices for vm in sl.vms}
        self.index = {}
        for r in recs:
            c = r["cluster"]
            vms = ALL if c["hosts"] > 1 or not c["vms_used"] else c["vms_used"][0]
            self.index[(r["technique"], c["slice"], vms)] = r

    def get(self, technique: str, slice_name: str, vms: str = ALL) -> dict | None:
        return self.index.get((technique, slice_name, vms))

    def slices(self) -> list[str]:
        """Slices with trials on all their VMs, by increasing RTT."""
        names = {s for (_, s, v) in self.index if v == ALL}
        return sorted(names, key=lambda s: (rtt(self, s), s))

    def one_vm(self, slice_name: str) -> list[str]:
        return sorted({v for (_, s, v) in self.index if s == slice_name and v != ALL})


def rtt(table: Table, slice_name: str) -> float:
    values = [r["cluster"]["network"]["rtt_ms"] for (t, s, v), r in table.index.items()
              if s == slice_name and v == ALL and r["cluster"]["network"]["rtt_ms"] is not None]
    return statistics.median(values) if values else math.nan


def epoch_time(r: dict | None) -> float:
    if r is None or r["status"] != "ok" or not r["timing"]["epoch_time_s"]:
        return math.inf
    return r["timing"]["epoch_time_s"]


def noise(r: dict | None) -> float:
    """Half the range of the repeated step times, scaled to an epoch."""
    if r is None or r["status"] != "ok":
        return 0.0
    times = r["timing"]["step_times_s"][r["timing"]["excluded_warmup_steps"]:]
    return (max(times) - min(times)) / 2 * r["data"]["steps_per_epoch"] if len(times) > 1 else 0.0


def show(r: dict | None) -> str:
    if r is None:
        return "not run"
    if r["status"] != "ok":
        return f"x ({r['status']})"
    return f"{epoch_time(r):.3g} s/epoch (±{noise(r):.2g})"


def faster(a: dict | None, b: dict | None, what: str) -> tuple[str, str]:
    """Is trial a faster than trial b? (status, one line of evidence)."""
    if a is None or b is None:
        return "not shown", f"{what}: a trial is missing"
    ta, tb = epoch_time(a), epoch_time(b)
    if math.isinf(ta) and math.isinf(tb):
        return "not shown", f"{what}: both failed"
    line = f"{what}: {show(a)} vs {show(b)}"
    if ta < tb:
        return "holds", line + (f", {100 * (1 - ta / tb):.0f}% less" if not math.isinf(tb) else "")
    if ta - tb <= noise(a) + noise(b):
        return "within noise", line + ", within the noise"
    return "contradicted", line + (f", {100 * (ta / tb - 1):.0f}% more" if not math.isinf(ta) else "")


def combine(part: str, statement: str, results: list[tuple[str, str]]) -> Verdict:
    if not results:
        return Verdict(part, statement, "not shown", ["no trials for this part in the run"])
    statuses = [s for s, _ in results]
    shown = [s for s in statuses if s != "not shown"]
    status = max(shown, key=ORDER.index) if shown else "not shown"
    return Verdict(part, statement, status, [line for _, line in results])


def two_site(table: Table) -> list[str]:
    return [s for s in table.slices() if rtt(table, s) >= 1.0]


def single_site(table: Table) -> list[str]:
    return [s for s in table.slices() if rtt(table, s) < 1.0]


# -- C1 ------------------------------------------------------------------------------------------
def c1_two_site(t: Table) -> Verdict:
    return combine("C1.two-site", "On every two-site slice, with all 4 GPUs, Pipeshard has the shortest training time.",
                   [faster(t.get("Pipeshard", s), t.get(o, s), f"{s}: Pipeshard vs {o}")
                    for s in two_site(t) for o in ("Data", "ZeRO2", "Shard")])


def c1_single_site(t: Table) -> Verdict:
    return combine("C1.single-site", "Pipeshard also wins on the single-site 4-GPU slice (TACC-TACC).",
                   [faster(t.get("Pipeshard", s), t.get(o, s), f"{s}: Pipeshard vs {o}")
                    for s in single_site(t) for o in ("Data", "ZeRO2", "Shard")])


# -- C2 ------------------------------------------------------------------------------------------
PAPER_ORDER = ("Pipeshard", "Data", "ZeRO2", "Shard")


def c2_order(t: Table) -> Verdict:
    return combine("C2.order", "On the two-site slices: Pipeshard < Data < ZeRO2 < Shard in training time.",
                   [faster(t.get(a, s), t.get(b, s), f"{s}: {a} vs {b}")
                    for s in two_site(t) for a, b in zip(PAPER_ORDER, PAPER_ORDER[1:])])


def c2_sensitivity(t: Table) -> Verdict:
    """Growth of training time from the lowest-RTT slice to the highest, compared between techniques."""
    statement = "As RTT grows, Shard degrades most, then ZeRO2, then Data; Pipeshard degrades least."
    names = t.slices()
    if len(names) < 2 or rtt(t, names[0]) == rtt(t, names[-1]):
        return Verdict("C2.sensitivity", statement, "not shown", ["needs slices with at least two RTTs"])
    lo, hi = names[0], names[-1]
    growth, spread = {}, {}
    for tech in PAPER_ORDER:
        a, b = t.get(tech, lo), t.get(tech, hi)
        growth[tech] = epoch_time(b) - epoch_time(a) if a and b else math.nan
        spread[tech] = noise(a) + noise(b)
    results = [("holds", f"growth from {lo} ({rtt(t, lo):.1f} ms) to {hi} ({rtt(t, hi):.1f} ms), s/epoch: "
                + ", ".join(f"{k} {v:+.3g}" for k, v in growth.items()))]
    for more, less in zip(PAPER_ORDER[::-1], PAPER_ORDER[::-1][1:]):
        g_more, g_less = growth[more], growth[less]
        line = f"{more} grows {g_more:+.3g} vs {less} {g_less:+.3g}"
        if math.isnan(g_more) or math.isnan(g_less):
            results.append(("not shown", line))
        elif g_more > g_less:
            results.append(("holds", line))
        elif g_less - g_more <= spread[more] + spread[less]:
            results.append(("within noise", line + ", within the noise"))
        else:
            results.append(("contradicted", line))
    return combine("C2.sensitivity", statement, results)


# -- C3 ------------------------------------------------------------------------------------------
def c3_single_vm(t: Table) -> Verdict:
    results = []
    for s in t.slices() or sorted({k[1] for k in t.index}):
        for vm in t.one_vm(s):
            d, sh, p = t.get("Data", s, vm), t.get("Shard", s, vm), t.get("Pipeshard", s, vm)
            best = d if epoch_time(d) <= epoch_time(sh) else sh
            if best is None or epoch_time(best) == math.inf:
                continue  # "when the model fits"
            results.append(faster(best, p, f"{s} {vm}: best of Data/Shard ({best['technique']}) vs Pipeshard"))
    return combine("C3.single-vm", "With 2 GPUs on one VM, when the model fits, Data or Shard beats Pipeshard.", results)


def c3_data_most(t: Table) -> Verdict:
    """Wins counted per single-VM experiment; techniques within the measured noise of the fastest
    tie. Holds if Data wins most even when every tie goes against it; contradicted if another
    technique wins more even when every tie goes to Data."""
    techniques = ("Data", "Shard", "Pipeshard")
    clear, possible = dict.fromkeys(techniques, 0), dict.fromkeys(techniques, 0)
    for s in sorted({k[1] for k in t.index}):
        for vm in t.one_vm(s):
            runs = {tech: t.get(tech, s, vm) for tech in techniques}
            times = {tech: epoch_time(r) for tech, r in runs.items()}
            best = min(times, key=times.get)
            if times[best] == math.inf:
                continue
            winners = {tech for tech in techniques
                       if times[tech] - times[best] <= noise(runs[tech]) + noise(runs[best])}
            for tech in winners:
                possible[tech] += 1
            if len(winners) == 1:
                clear[best] += 1
    statement = "Of the single-VM experiments, Data wins most often (paper: Data 6 of 8, Shard 2, on A30s)."
    if not sum(possible.values()):
        return Verdict("C3.data-most", statement, "not shown", ["no single-VM trials"])
    others = [tech for tech in techniques if tech != "Data"]
    if clear["Data"] >= max(possible[o] for o in others):
        status = "holds"
    elif possible["Data"] < max(clear[o] for o in others):
        status = "contradicted"
    else:
        status = "within noise"
    return Verdict("C3.data-most", statement, status,
                   ["clear wins (beyond the noise): " + ", ".join(f"{k} {v}" for k, v in clear.items()),
                    "wins or ties within the noise: " + ", ".join(f"{k} {v}" for k, v in possible.items())])


# -- C5, C6 --------------------------------------------------------------------------------------
def c5_more_gpus(t: Table) -> Verdict:
    """Existential: some slice where Data on one VM of 2 RTX 6000 beats Pipeshard on all 4 GPUs."""
    results = []
    for s in two_site(t):
        for vm in t.one_vm(s):
            r = t.get("Data", s, vm)
            if r is not None and t.gpus.get((s, vm)) in (None, "RTX6000"):  # None: GPU type not known
                results.append(faster(r, t.get("Pipeshard", s), f"{s}: Data on {vm} alone vs Pipeshard on all GPUs"))
    statement = "More GPUs is not always faster: Data on 2 RTX in one VM beats Pipeshard on 4 GPUs over two VMs."
    if any(s == "holds" for s, _ in results):
        return Verdict("C5.more-gpus", statement, "holds", [line for _, line in results])
    return combine("C5.more-gpus", statement, results)


def c6_shard_worst(t: Table) -> Verdict:
    multi = t.slices()
    return combine("C6.shard-worst", "Shard across VMs is the worst choice on every multi-VM slice.",
                   [faster(t.get(o, s), t.get("Shard", s), f"{s}: {o} vs Shard")
                    for s in multi for o in ("Data", "ZeRO2", "Pipeshard")])


# -- C7 ------------------------------------------------------------------------------------------
class _Missing(Exception):
    pass


def c7_selection(t: Table, delta: float = 0.1) -> Verdict:
    """Algorithm 1 as published, run over the trials of each two-site slice (its T from each
    record), must answer Pipeshard on all VMs or one VM with Data or Shard (having beaten Pipeshard
    by more than delta); ZeRO2 or "none" goes against the paper. The corrected mode's answer and
    the fastest trial in time are shown beside it."""
    from harness import selection

    statement = ("Algorithm 1 picks Pipeshard on both VMs for geo-distributed slices, and a single VM with Data or "
                 f"Shard when that is better by more than delta (= {delta}).")
    results = []
    for s in t.slices():
        every = t.get("Pipeshard", s)
        vms = every["cluster"]["vms_used"] if every else []

        def measure(technique, on, s=s):
            r = t.get(technique, s, ALL if len(on) > 1 else on[0])
            if r is None:
                raise _Missing(f"{technique} on {'+'.join(on)}")
            return selection.average_tflops(r)

        try:
            gpus = every["cluster"]["devices_per_host"] if every else 0
            picks = {mode: selection.select(mode, vms, measure, delta, gpus) for mode in selection.MODES}
        except (_Missing, ValueError) as e:
            results.append(("not shown", f"{s}: the algorithm needs a trial the run lacks ({e})"))
            continue
        d = picks["published"]
        answer = {m: f"{p.technique} on {'+'.join(p.vms)}" if p.technique else "none" for m, p in picks.items()}
        line = (f"{s}: published picks {answer['published']} ({d.rule}); corrected picks {answer['corrected']}; "
                "T per GPU: " + ", ".join(f"{x['technique']} on {'+'.join(x['vms'])} {x['T']:.3g}" for x in d.trials))
        if s not in two_site(t):
            results.append(("not shown", line + " (single site: not part of the claim)"))
        elif d.technique == "Pipeshard" or (d.technique in ("Data", "Shard") and len(d.vms) == 1):
            results.append(("holds", line))
        else:
            results.append(("contradicted", line))
    return combine("C7.selection", statement, results)


TIMED_CLAIMS = (c1_two_site, c1_single_site, c2_order, c2_sensitivity, c3_single_vm, c3_data_most, c5_more_gpus,
                c6_shard_worst, c7_selection)


def judge(records: list[dict], slices=()) -> list[Verdict]:
    table = Table(records, slices)
    return [claim(table) for claim in TIMED_CLAIMS]


# -- C4, from the compile-only memory analysis at paper scale (harness.memory records) ----------
class MemoryTable:
    def __init__(self, recs: list[dict]):
        self.index = {(r["model"]["name"], r["technique"], r["cluster"]["slice"], tuple(r["cluster"]["vms_used"])): r
                      for r in recs}

    def all_vms(self, model: str) -> dict:
        """technique -> record, on all VMs of one slice (per-device bytes do not depend on the slice)."""
        return {t: r for (m, t, s, vms), r in self.index.items() if m == model and len(vms) > 1}

    def placements(self) -> set:
        return {(m, s, vms) for (m, t, s, vms) in self.index}


def gb(r: dict) -> str:
    need = r["memory"]["bytes_per_device"]
    return f"{r['technique']} {need / 1e9:.1f} GB" if need else f"{r['technique']} x ({r['status']})"


def _extreme(t: MemoryTable, technique: str, most: bool, part: str, statement: str) -> Verdict:
    results = []
    for model in sorted({k[0] for k in t.index}):
        by_tech = {}
        for (m, tech, s, vms), r in t.index.items():
            if m == model and len(vms) > 1 and r["memory"]["bytes_per_device"]:
                by_tech[tech] = r
        if technique not in by_tech or len(by_tech) < 2:
            continue
        need = {k: r["memory"]["bytes_per_device"] for k, r in by_tech.items()}
        ok = need[technique] == (max if most else min)(need.values())
        results.append(("holds" if ok else "contradicted",
                        f"{model} on 4 GPUs: " + ", ".join(gb(by_tech[k]) for k in sorted(need, key=need.get))))
    return combine(part, statement, results)


def c4_most(t: MemoryTable) -> Verdict:
    return _extreme(t, "Pipeshard", True, "C4.most", "Pipeshard needs the most GPU memory.")


def c4_least(t: MemoryTable) -> Verdict:
    return _extreme(t, "ZeRO2", False, "C4.least", "ZeRO2 needs the least GPU memory.")


def c4_fails_first(t: MemoryTable) -> Verdict:
    results = []
    for model, s, vms in sorted(t.placements()):
        here = {tech: r for (m, tech, sl, v), r in t.index.items() if (m, sl, v) == (model, s, vms)}
        failed = sorted(k for k, r in here.items() if r["status"] != "ok")
        if failed and "Pipeshard" in here:
            where = f"{model} on {s} {'+'.join(vms)}: out of memory: {', '.join(failed)}"
            results.append(("holds" if "Pipeshard" in failed else "contradicted", where))
    return combine("C4.fails-first", "Pipeshard fails first: wherever a technique runs out of memory, Pipeshard does.",
                   results)


def c4_zero2_only(t: MemoryTable, slices=()) -> Verdict:
    mixed = {sl.name for sl in slices if sorted(vm.gpu for vm in sl.vms) == ["RTX6000", "T4"]}
    results = []
    for (m, tech, s, vms), r in t.index.items():
        if m == "gpt2L" and s in mixed and len(vms) > 1 and tech == "ZeRO2":
            others = [t.index.get((m, o, s, vms)) for o in ("Data", "Shard", "Pipeshard")]
            ok = r["status"] == "ok" and all(o is not None and o["status"] != "ok" for o in others)
            results.append(("holds" if ok else "contradicted",
                            f"gpt2L on {s} (2 RTX + 2 T4): " + ", ".join(
                                f"{gb(x)} {'fits' if x['status'] == 'ok' else 'OOM'}" for x in [r, *filter(None, others)])))
    return combine("C4.zero2-only", "ZeRO2 runs gpt2L on 2 RTX + 2 T4 where all the others run out of memory.", results)


def c4_gpt2l_one_vm(t: MemoryTable) -> Verdict:
    cases = {}
    for (m, tech, s, vms), r in t.index.items():
        if m == "gpt2L" and len(vms) == 1 and tech in ("Data", "Shard", "Pipeshard"):
            cases.setdefault((s, vms[0]), []).append(r)
    fits = {k: [gb(r) for r in rs if r["status"] == "ok"] for k, rs in cases.items()}
    slices_ = {s for s, _ in cases}
    fitting = {s for (s, vm), f in fits.items() if f}
    statement = "gpt2L does not fit on the 2 GPUs of one VM (Data, Shard or Pipeshard) in most slices."
    if not slices_:
        return Verdict("C4.gpt2L-one-vm", statement, "not shown", ["no single-VM gpt2L analysis"])
    status = "holds" if len(fitting) < len(slices_) / 2 else "contradicted"
    return Verdict("C4.gpt2L-one-vm", statement, status,
                   [f"{len(slices_) - len(fitting)} of {len(slices_)} slices: no single VM fits gpt2L"]
                   + [f"{s} {vm}: fits with {', '.join(f)}" for (s, vm), f in sorted(fits.items()) if f])


def judge_memory(records: list[dict], slices=()) -> list[Verdict]:
    table = MemoryTable(records)
    return [c4_most(table), c4_least(table), c4_fails_first(table), c4_zero2_only(table, slices),
            c4_gpt2l_one_vm(table)]
