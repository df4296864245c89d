"""The paper's claims (docs/paper.md, "Claims C1-C7") as functions over a table of trial records.

Each claim is split into the parts the paper states separately. A part makes named comparisons
(e.g. "Pipeshard vs Data" on each two-site slice); each comes out as
- holds: it goes the paper's way;
- within noise: it goes against the paper by no more than the noise measured (the spread of the
  repeated step times of the trials compared), or the other way by less;
- contradicted: it goes against the paper beyond that noise;
- not shown: a trial it needs was not run, crashed, or both sides ran out of memory.
A part's verdict is its worst comparison, in the order holds, within noise, not shown,
contradicted: it holds only if every comparison it names was made and went the paper's way, and
it is not shown when it has nothing to compare. A crashed trial (status error) is never the
paper's x: the comparison is not shown and the verdict says which trial crashed, and the test
suite fails on it. Only out of memory (status oom) counts as the paper's x: the run that failed
loses to the run that ran.

Training time is compared per epoch of the corpus (median step time x steps per epoch), so that
runs with different global batches (4 GPUs or one VM) compare as the paper's 20-epoch times do.
The same functions judge CPU scale-model trials, GPU trials, live slices and predictions; which
comparisons a backend cannot show is declared by its suite (see harness.suite.checks.check_claim), per
comparison, never for a whole part.
"""
import math
import statistics
from dataclasses import dataclass, field
from enum import StrEnum

from harness import paper
from harness.config import Technique

ALL = "all"


class Status(StrEnum):
    """How a comparison, and a part, came out; from best to worst."""
    HOLDS = "holds"
    NOISE = "within noise"
    NOT_SHOWN = "not shown"
    CONTRADICTED = "contradicted"


HOLDS, NOISE, NOT_SHOWN, CONTRADICTED = Status
ORDER = tuple(Status)


@dataclass
class Comparison:
    what: str  # the comparison wherever it is made, e.g. "Data vs ZeRO2": deviations name this
    status: str
    line: str  # the evidence, with where it was made and the numbers
    crashed: tuple[str, ...] = ()  # trials that crashed (status error) and left it not shown


def worst(statuses) -> str:
    return max(statuses, key=ORDER.index, default=NOT_SHOWN)


@dataclass
class Verdict:
    part: str  # e.g. "C1.two-site"
    statement: str  # the paper's sentence
    comparisons: list[Comparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # context that is not a comparison

    @property
    def status(self) -> str:
        return worst(c.status for c in self.comparisons)

    @property
    def evidence(self) -> list[str]:
        return [c.line for c in self.comparisons] + self.notes

    @property
    def crashed(self) -> list[str]:
        return sorted({t for c in self.comparisons for t in c.crashed})

    def to_dict(self) -> dict:
        return {"part": self.part, "statement": self.statement, "status": self.status, "evidence": self.evidence,
                "notes": self.notes,
                "comparisons": [{"what": c.what, "status": c.status, "line": c.line, "crashed": list(c.crashed)}
                                for c in self.comparisons],
                "crashed": self.crashed}


# -- the table of trials ---------------------------------------------------------------------------
class Table:
    """Trial records indexed by (technique, slice, VMs used: ALL or the one VM's name)."""

    def __init__(self, recs: list[dict], slices=()):
        self.records = recs
        self.gpus = {(sl.name, vm.name): vm.gpu for sl in slices for vm in sl.vms}
        self.vm_order = {sl.name: [vm.name for vm in sl.vms] for sl in slices}
        self.index = {}
        for r in recs:
            c = r["cluster"]
            vms = ALL if c["hosts"] > 1 or not c["vms_used"] else c["vms_used"][0]
            self.index[(r["technique"], c["slice"], vms)] = r
        # On an emulated slice every VM is the same share of one machine and a run on one VM
        # crosses no link: the single-VM runs of different slices are one experiment, repeated.
        self.emulated = any(r["cluster"]["network"]["mechanism"] in ("userspace", "netem") for r in recs)

    def get(self, technique: str, slice_name: str, vms: str = ALL) -> dict | None:
        return self.index.get((technique, slice_name, vms))

    def slices(self) -> list[str]:
        """Slices with trials on all their VMs, by increasing RTT."""
        names = {s for (_, s, v) in self.index if v == ALL}
        return sorted(names, key=lambda s: (rtt(self, s), s))

    def all_slices(self) -> list[str]:
        return sorted({s for (_, s, _) in self.index}, key=lambda s: (rtt(self, s), s))

    def one_vm(self, slice_name: str) -> list[str]:
        return sorted({v for (_, s, v) in self.index if s == slice_name and v != ALL})

    def first_vm(self, slice_name: str) -> str | None:
        """The paper's "1 VM" runs are the first VM's GPUs alone."""
        if slice_name in self.vm_order:
            return self.vm_order[slice_name][0]
        every = next((r for (_, s, v), r in self.index.items() if s == slice_name and v == ALL), None)
        if every is not None:
            return every["cluster"]["vms_used"][0]
        alone = self.one_vm(slice_name)
        return alone[0] if alone else None

    def single_vm_experiments(self) -> list[tuple[str, dict]]:
        """(name, technique -> record or None) for each experiment on the first VM alone. On
        emulated slices the first VMs of all slices are one experiment: their step times are
        pooled, so that one measurement is not counted once per slice."""
        by_slice = {s: self.first_vm(s) for s in self.all_slices()}
        by_slice = {s: vm for s, vm in by_slice.items() if vm in self.one_vm(s)}
        if not self.emulated:
            return [(f"{s} {vm} alone", {t: self.get(t, s, vm) for t in Technique}) for s, vm in by_slice.items()]
        groups: dict[str, list[str]] = {}
        for s, vm in by_slice.items():
            groups.setdefault(vm, []).append(s)
        return [(f"{vm} alone (one emulated VM, measured on {', '.join(ss)})",
                 {t: pooled([self.get(t, s, vm) for s in ss]) for t in Technique}) for vm, ss in groups.items()]


def pooled(recs: list[dict | None]) -> dict | None:
    """One experiment measured several times: its step times together. A crashed, missing or
    failed measurement stands for the experiment, in that order."""
    for bad in ("crashed", "missing", "oom"):
        for r in recs:
            if state(r) == bad:
                return r
    times = [t for r in recs for t in r["timing"]["step_times_s"][r["timing"]["excluded_warmup_steps"]:]]
    median = statistics.median(times)
    first = recs[0]
    return {**first, "timing": {**first["timing"], "step_times_s": times, "excluded_warmup_steps": 0,
                                "median_step_s": median,
                                "epoch_time_s": median * first["data"]["steps_per_epoch"]}}


def rtt(table: Table, slice_name: str) -> float:
    """The slice's RTT as ping gives it, the lowest measured (each record's is already a minimum)."""
    values = [r["cluster"]["network"]["rtt_ms"] for (t, s, v), r in table.index.items()
              if s == slice_name and v == ALL and r["cluster"]["network"]["rtt_ms"] is not None]
    return min(values) if values else math.nan


def paper_rtt(table: Table, slice_name: str) -> float:
    """The slice's RTT in the paper: what its records say the run's link was scaled from
    (network.scaling), or the measured one where the run kept the paper's link."""
    given = [r["cluster"]["network"].get("scaling", {}).get("paper_rtt_ms") for (t, s, v), r in table.index.items()
             if s == slice_name and v == ALL]
    given = [x for x in given if x is not None]
    return min(given) if given else rtt(table, slice_name)


def two_site(table: Table) -> list[str]:
    return [s for s in table.slices() if paper_rtt(table, s) >= 1.0]


def single_site(table: Table) -> list[str]:
    return [s for s in table.slices() if paper_rtt(table, s) < 1.0]


# -- one trial, one comparison ---------------------------------------------------------------------
def state(r: dict | None) -> str:
    """missing, crashed (an error, or ok without a timing), oom (the paper's x) or ok."""
    if r is None:
        return "missing"
    if r["status"] == "oom":
        return "oom"
    if r["status"] != "ok" or not r["timing"]["epoch_time_s"]:
        return "crashed"
    return "ok"


def epoch_time(r: dict) -> float:
    return r["timing"]["epoch_time_s"] if state(r) == "ok" else math.inf


def noise(r: dict | None) -> float:
    """Half the range of the repeated step times, scaled to an epoch."""
    if state(r) != "ok":
        return 0.0
    times = r["timing"]["step_times_s"][r["timing"]["excluded_warmup_steps"]:]
    return (max(times) - min(times)) / 2 * r["data"]["steps_per_epoch"] if len(times) > 1 else 0.0


def label(r: dict) -> str:
    c = r["cluster"]
    return f"{r['technique']} on {c['slice']} {'+'.join(c['vms_used'] or [])}"


def show(r: dict | None) -> str:
    s = state(r)
    if s == "missing":
        return "not run"
    if s == "oom":
        return "x (out of memory)"
    if s == "crashed":
        return f"crashed ({r['reason'] or 'no timing'})"
    return f"{epoch_time(r):.3g} s/epoch (±{noise(r):.2g})"


def unusable(what: str, line: str, *recs) -> Comparison | None:
    """The comparison when a trial it needs is missing or crashed, else None."""
    crashed = tuple(label(r) for r in recs if state(r) == "crashed")
    if crashed:
        return Comparison(what, NOT_SHOWN, f"{line}: not shown, a trial crashed (not the paper's x)", crashed)
    if any(r is None for r in recs):
        return Comparison(what, NOT_SHOWN, f"{line}: not shown, a trial was not run")
    return None


def faster(a: dict | None, b: dict | None, what: str, where: str, margin: float = 0.0) -> Comparison:
    """Does a train faster than b (by more than `margin`, a fraction of a's time)? Out of memory
    loses to a run that ran."""
    line = f"{where}: {what}: {show(a)} vs {show(b)}"
    bad = unusable(what, line, a, b)
    if bad:
        return bad
    if state(a) == state(b) == "oom":
        return Comparison(what, NOT_SHOWN, line + ": not shown, both out of memory")
    if state(b) == "oom":
        return Comparison(what, HOLDS, line)
    if state(a) == "oom":
        return Comparison(what, CONTRADICTED, line)
    ta, tb = epoch_time(a) * (1 + margin), epoch_time(b)
    if ta < tb:
        return Comparison(what, HOLDS, line + f", {100 * (1 - epoch_time(a) / tb):.0f}% less")
    if ta - tb <= noise(a) * (1 + margin) + noise(b):
        return Comparison(what, NOISE, line + ", within the noise")
    return Comparison(what, CONTRADICTED, line + f", {100 * (epoch_time(a) / tb - 1):.0f}% more")


# -- C1 --------------------------------------------------------------------------------------------
def c1_two_site(t: Table) -> Verdict:
    return Verdict("C1.two-site", "On every two-site slice, with all 4 GPUs, Pipeshard has the shortest training time.",
                   [faster(t.get("Pipeshard", s), t.get(o, s), f"Pipeshard vs {o}", s)
                    for s in two_site(t) for o in ("Data", "ZeRO2", "Shard")])


def c1_single_site(t: Table) -> Verdict:
    return Verdict("C1.single-site", "Pipeshard also wins on the single-site 4-GPU slice (TACC-TACC).",
                   [faster(t.get("Pipeshard", s), t.get(o, s), f"Pipeshard vs {o}", s)
                    for s in single_site(t) for o in ("Data", "ZeRO2", "Shard")])


# -- C2 --------------------------------------------------------------------------------------------
PAPER_ORDER = ("Pipeshard", "Data", "ZeRO2", "Shard")


def c2_order(t: Table) -> Verdict:
    return Verdict("C2.order", "On the two-site slices: Pipeshard < Data < ZeRO2 < Shard in training time.",
                   [faster(t.get(a, s), t.get(b, s), f"{a} vs {b}", s)
                    for s in two_site(t) for a, b in zip(PAPER_ORDER, PAPER_ORDER[1:])])


def c2_sensitivity(t: Table) -> Verdict:
    """Growth of training time from the lowest-RTT slice to the highest, compared between techniques."""
    v = Verdict("C2.sensitivity", "As RTT grows, Shard degrades most, then ZeRO2, then Data; Pipeshard degrades least.")
    names = t.slices()
    if len(names) < 2 or rtt(t, names[0]) == rtt(t, names[-1]):
        v.notes.append("needs slices with at least two RTTs")
        return v
    lo, hi = names[0], names[-1]
    where = f"{lo} ({rtt(t, lo):.1f} ms) to {hi} ({rtt(t, hi):.1f} ms)"
    growth, spread, runs = {}, {}, {}
    for tech in PAPER_ORDER:
        a, b = t.get(tech, lo), t.get(tech, hi)
        runs[tech] = (a, b)
        ok = state(a) == state(b) == "ok"
        growth[tech] = epoch_time(b) - epoch_time(a) if ok else math.nan
        spread[tech] = noise(a) + noise(b)
    for more, less in zip(PAPER_ORDER[::-1], PAPER_ORDER[::-1][1:]):
        what = f"{more} degrades more than {less}"
        line = f"{where}: {what}: {more} grows {growth[more]:+.3g} s/epoch, {less} {growth[less]:+.3g}"
        bad = unusable(what, line, *runs[more], *runs[less])
        if bad:
            v.comparisons.append(bad)
        elif math.isnan(growth[more]) or math.isnan(growth[less]):
            v.comparisons.append(Comparison(what, NOT_SHOWN, line + ": not shown, a run is out of memory"))
        elif growth[more] > growth[less]:
            v.comparisons.append(Comparison(what, HOLDS, line))
        elif growth[less] - growth[more] <= spread[more] + spread[less]:
            v.comparisons.append(Comparison(what, NOISE, line + ", within the noise"))
        else:
            v.comparisons.append(Comparison(what, CONTRADICTED, line))
    return v


# -- C3 --------------------------------------------------------------------------------------------
ONE_GPU = "not compared, on one GPU every technique is the single-device program"


def _on_one_gpu(runs: dict) -> bool:
    """Every technique of a placement on a single GPU (a VM of one, alone) is the same
    single-device program: what differs there (time, bytes) differs by bookkeeping, not by technique."""
    return any(r is not None and r["cluster"]["hosts"] * r["cluster"]["devices_per_host"] == 1
               for r in runs.values())


def c3_single_vm(t: Table) -> Verdict:
    """On the first VM alone (the paper's single-VM runs), when the model fits (Data or Shard ran),
    the faster of Data and Shard beats Pipeshard. A VM of one GPU is not the claim's case."""
    v = Verdict("C3.single-vm", "With 2 GPUs on one VM, when the model fits, Data or Shard beats Pipeshard.")
    for name, runs in t.single_vm_experiments():
        if _on_one_gpu(runs):
            v.notes.append(f"{name}: {ONE_GPU}")
            continue
        d, sh, p = runs["Data"], runs["Shard"], runs["Pipeshard"]
        what = "best of Data and Shard vs Pipeshard"
        bad = unusable(what, f"{name}: {what}: Data {show(d)}, Shard {show(sh)}, Pipeshard {show(p)}", d, sh, p)
        if bad:
            v.comparisons.append(bad)
        elif state(d) == state(sh) == "oom":
            v.notes.append(f"{name}: the model does not fit (Data and Shard out of memory): not part of the claim")
        else:
            best = d if epoch_time(d) <= epoch_time(sh) else sh
            v.comparisons.append(faster(best, p, f"{what} ({best['technique']})", name))
    return v


def c3_data_most(t: Table) -> Verdict:
    """Wins counted per single-VM experiment (the first VM alone, every technique); a run within
    the measured noise of the fastest ties. Holds if Data's clear wins outnumber every other
    technique's wins and ties; contradicted if another technique's clear wins outnumber Data's wins
    and ties; within noise otherwise."""
    v = Verdict("C3.data-most", "Of the single-VM experiments, Data wins most often (paper: "
                + ", ".join(f"{k} {n}" for k, n in paper.SINGLE_VM_WINS.items()) + " of 8; Shard on A30s).")
    clear, possible = dict.fromkeys(Technique, 0), dict.fromkeys(Technique, 0)
    what = "Data wins most single-VM experiments"
    for name, runs in t.single_vm_experiments():
        if _on_one_gpu(runs):
            v.notes.append(f"{name}: {ONE_GPU}")
            continue
        bad = unusable(what, f"{name}: " + ", ".join(f"{k} {show(r)}" for k, r in runs.items()), *runs.values())
        if bad:
            v.comparisons.append(bad)
            continue
        times = {tech: epoch_time(r) for tech, r in runs.items()}
        best = min(times, key=times.get)
        if times[best] == math.inf:
            v.notes.append(f"{name}: every technique out of memory: no winner")
            continue
        winners = sorted(tech for tech in Technique
                         if times[tech] - times[best] <= noise(runs[tech]) + noise(runs[best]))
        for tech in winners:
            possible[tech] += 1
        if len(winners) == 1:
            clear[best] += 1
        v.notes.append(f"{name}: " + (f"{best} wins" if len(winners) == 1 else f"tie within the noise: {', '.join(winners)}")
                       + " (" + ", ".join(f"{k} {show(r)}" for k, r in runs.items()) + ")")
    if not sum(possible.values()):
        return v
    counts = ("clear wins " + ", ".join(f"{k} {n}" for k, n in clear.items())
              + "; wins or ties " + ", ".join(f"{k} {n}" for k, n in possible.items()))
    # "Most often" is "more often than each rival": one comparison per rival, so that a backend
    # can declare the one rival it cannot separate from Data without hiding the others.
    for rival in list(Technique)[1:]:
        what = f"Data wins more single-VM experiments than {rival}"
        if clear["Data"] > possible[rival]:
            status = HOLDS
        elif possible["Data"] < clear[rival]:
            status = CONTRADICTED
        else:
            status = NOISE
        v.comparisons.append(Comparison(what, status, f"{what}: {counts}"))
    return v


# -- C5, C6 ----------------------------------------------------------------------------------------
def c5_more_gpus(t: Table) -> Verdict:
    """Where the paper makes the point (TACC-TACC): Data on the first VM alone beats Pipeshard on all
    GPUs, beyond the noise. Other slices are shown, not judged: the paper states it for that one."""
    v = Verdict("C5.more-gpus", "More GPUs is not always faster: on TACC-TACC, Data on the 2 RTX of one VM "
                                "beats Pipeshard on all 4 GPUs over two VMs.")
    for s in t.all_slices():
        vm = t.first_vm(s)
        c = faster(t.get("Data", s, vm), t.get("Pipeshard", s), f"Data on {vm} alone vs Pipeshard on all GPUs", s)
        if s in paper.MORE_GPUS_SLICES:
            v.comparisons.append(c)
        else:
            v.notes.append(f"{c.line} (not a slice where the paper makes the point)")
    return v


def c6_shard_worst(t: Table) -> Verdict:
    return Verdict("C6.shard-worst", "Shard across VMs is the worst choice on every multi-VM slice.",
                   [faster(t.get(o, s), t.get("Shard", s), f"{o} vs Shard", s)
                    for s in t.slices() for o in ("Data", "ZeRO2", "Pipeshard")])


# -- C7 --------------------------------------------------------------------------------------------
class _Missing(Exception):
    pass


class _Crashed(Exception):
    pass


def algorithm_1(t: Table, s: str, delta: float):
    """Algorithm 1 as published over the trials of slice s (its T from each record): the decision,
    or raises _Missing / _Crashed for a trial it needs."""
    from harness import selection

    every = t.get("Pipeshard", s)
    if every is None:
        raise _Missing(f"Pipeshard on all VMs of {s}")
    vms = every["cluster"]["vms_used"]

    def measure(technique, on):
        r = t.get(technique, s, ALL if len(on) > 1 else on[0])
        if r is None:
            raise _Missing(f"{technique} on {'+'.join(on)}")
        if state(r) == "crashed":
            raise _Crashed(label(r))
        return selection.average_tflops(r)

    return selection.select("published", vms, measure, delta, every["cluster"]["devices_per_host"])


def _decisions(t: Table, delta: float, statement: str, part: str, slices_: list[str]):
    """(verdict, [(slice, decision, line)]) for the slices whose trials the algorithm could use."""
    v = Verdict(part, statement)
    out = []
    what = "Algorithm 1's answer"
    for s in slices_:
        try:
            d = algorithm_1(t, s, delta)
        except _Missing as e:
            v.comparisons.append(Comparison(what, NOT_SHOWN, f"{s}: not shown, the algorithm needs a trial the run lacks ({e})"))
            continue
        except _Crashed as e:
            v.comparisons.append(Comparison(what, NOT_SHOWN, f"{s}: not shown, a trial it needs crashed ({e})", (str(e),)))
            continue
        answer = f"{d.technique} on {'+'.join(d.vms)}" if d.technique else "none"
        line = (f"{s}: published picks {answer} ({d.rule}); T per GPU: "
                + ", ".join(f"{x['technique']} on {'+'.join(x['vms'])} {x['T']:.3g}" for x in d.trials))
        out.append((s, d, line))
    return v, out


def c7_geo_pipeshard(t: Table, delta: float = 0.1) -> Verdict:
    """First half of C7: on every two-site slice, Algorithm 1 (as published) answers Pipeshard on all VMs."""
    v, decisions = _decisions(t, delta, "Algorithm 1 picks Pipeshard on both VMs for geo-distributed (two-site) "
                                        f"slices (delta = {delta}).", "C7.geo-pipeshard", two_site(t))
    for s, d, line in decisions:
        ok = d.technique == "Pipeshard" and len(d.vms) > 1
        v.comparisons.append(Comparison("picks Pipeshard on all VMs", HOLDS if ok else CONTRADICTED, line))
    return v


def c7_single_vm(t: Table, delta: float = 0.1) -> Verdict:
    """Second half of C7, on every slice: when Algorithm 1 picks one VM, that run trains faster than
    Pipeshard on all VMs by more than delta; when it does not, no single-VM run of Data or Shard
    would have (time per epoch, within the measured noise)."""
    v, decisions = _decisions(t, delta, "Algorithm 1 picks a single VM with Data or Shard when that is better "
                                        f"than Pipeshard on both VMs by more than delta (= {delta}).",
                              "C7.single-vm", t.slices())
    for s, d, line in decisions:
        p = t.get("Pipeshard", s)
        if d.technique in ("Data", "Shard") and len(d.vms) == 1:
            c = faster(t.get(d.technique, s, d.vms[0]), p, "the single VM it picks trains faster than Pipeshard "
                                                            "by more than delta", s, margin=delta)
            v.comparisons.append(Comparison(c.what, c.status, f"{c.line}; {line}", c.crashed))
            continue
        singles = [t.get(tech, s, vm) for vm in t.one_vm(s) for tech in ("Data", "Shard")]
        what = "no single VM it passes over trains faster than Pipeshard by more than delta"
        bad = unusable(what, f"{s}: {line}", *singles)
        if bad:
            v.comparisons.append(bad)
            continue
        singles = [r for r in singles if state(r) == "ok"]
        if not singles:
            v.comparisons.append(Comparison(what, HOLDS, f"{s}: no single-VM run of Data or Shard ran; {line}"))
            continue
        best = min(singles, key=epoch_time)
        c = faster(best, p, "", s, margin=delta)
        flipped = {HOLDS: CONTRADICTED, CONTRADICTED: HOLDS}.get(c.status, c.status)
        v.comparisons.append(Comparison(what, flipped, f"{s}: fastest single VM {label(best)} {show(best)} vs "
                                                       f"Pipeshard {show(p)}; {line}"))
    return v


TIMED_CLAIMS = (c1_two_site, c1_single_site, c2_order, c2_sensitivity, c3_single_vm, c3_data_most, c5_more_gpus,
                c6_shard_worst, c7_geo_pipeshard, c7_single_vm)


def judge(records: list[dict], slices=()) -> list[Verdict]:
    table = Table(records, slices)
    return [claim(table) for claim in TIMED_CLAIMS]


# -- C4, from the compile-only memory analysis at paper scale (harness.memory records) -------------
class MemoryTable:
    """Memory records indexed by (model, technique, slice, VMs used)."""

    def __init__(self, recs: list[dict], slices=()):
        self.index = {(r["model"]["name"], r["technique"], r["cluster"]["slice"], tuple(r["cluster"]["vms_used"])): r
                      for r in recs}
        self.slices = {sl.name: sl for sl in slices}

    def placements(self) -> set:
        return {(m, s, vms) for (m, t, s, vms) in self.index}

    def at(self, model: str, s: str, vms: tuple) -> dict:
        """technique -> record (None where not analysed)."""
        return {tech: self.index.get((model, tech, s, vms)) for tech in Technique}


def need(r: dict | None) -> int | None:
    return r["memory"]["bytes_per_device"] if r is not None and r["status"] in ("ok", "oom") else None


def gib(r: dict | None) -> str:
    if r is None:
        return "not analysed"
    if r["status"] == "error":
        return f"{r['technique']} crashed ({r['reason']})"
    n = need(r)
    return f"{r['technique']} {n / 2**30:.1f} GiB" + ("" if r["status"] == "ok" else " x") if n else \
        f"{r['technique']} x ({r['reason']})"


def mem_state(r: dict | None) -> str:
    if r is None:
        return "missing"
    return {"ok": "ok", "oom": "oom"}.get(r["status"], "crashed")


def _mem_unusable(what: str, line: str, *recs) -> Comparison | None:
    crashed = tuple(f"{r['model']['name']} {label(r)}" for r in recs if mem_state(r) == "crashed")
    if crashed:
        return Comparison(what, NOT_SHOWN, f"{line}: not shown, an analysis crashed (not out of memory)", crashed)
    if any(r is None for r in recs):
        return Comparison(what, NOT_SHOWN, f"{line}: not shown, not analysed")
    return None


def _groups(t: MemoryTable) -> list[tuple[str, dict]]:
    """(where, technique -> record) per model and placement; slices whose analyses need the same
    bytes per technique are one group (the per-device need does not depend on the link)."""
    seen: dict[tuple, list] = {}
    for model, s, vms in sorted(t.placements()):
        runs = t.at(model, s, vms)
        key = (model, len(vms), tuple((k, need(r), mem_state(r)) for k, r in runs.items()))
        seen.setdefault(key, []).append((s, vms, runs))
    out = []
    for (model, n_vms, _), members in seen.items():
        on = ", ".join(s if len(vms) > 1 else f"{s} {vms[0]}" for s, vms, _ in members)
        out.append((f"{model} on {'all GPUs' if n_vms > 1 else 'one VM'} ({on})", members[0][2]))
    return out


def _extreme(t: MemoryTable, technique: str, most: bool, part: str, statement: str) -> Verdict:
    v = Verdict(part, statement)
    for where, runs in _groups(t):
        if _on_one_gpu(runs):
            v.notes.append(f"{where}: {ONE_GPU}")
            continue
        for other in Technique:
            if other == technique:
                continue
            what = f"{technique} needs {'more' if most else 'less'} than {other}"
            line = f"{where}: {what}: {gib(runs[technique])} vs {gib(runs[other])}"
            bad = _mem_unusable(what, line, runs[technique], runs[other])
            a, b = need(runs[technique]), need(runs[other])
            if bad:
                v.comparisons.append(bad)
            elif a is None or b is None:
                v.comparisons.append(Comparison(what, NOT_SHOWN, line + ": not shown, no figure"))
            elif (a > b) if most else (a < b):
                v.comparisons.append(Comparison(what, HOLDS, line))
            else:
                v.comparisons.append(Comparison(what, NOISE if a == b else CONTRADICTED, line))
    return v


def c4_most(t: MemoryTable) -> Verdict:
    return _extreme(t, "Pipeshard", True, "C4.most", "Pipeshard needs more GPU memory than the others.")


def c4_least(t: MemoryTable) -> Verdict:
    return _extreme(t, "ZeRO2", False, "C4.least", "ZeRO2 needs less GPU memory than the others.")


def _heterogeneous(t: MemoryTable, s: str, vms: tuple) -> bool:
    sl = t.slices.get(s)
    return sl is not None and len({vm.accelerator.memory_bytes for vm in sl.vms if vm.name in vms}) > 1


def c4_fails_first(t: MemoryTable) -> Verdict:
    """On heterogeneous GPUs (VMs whose GPUs differ in memory), wherever a technique runs out of
    memory, Pipeshard does too."""
    v = Verdict("C4.fails-first", "Pipeshard fails first on heterogeneous GPUs: wherever a technique runs out of "
                                  "memory there, Pipeshard does.")
    for model, s, vms in sorted(t.placements()):
        if not _heterogeneous(t, s, vms):
            continue
        runs = t.at(model, s, vms)
        where = f"{model} on {s} {'+'.join(vms)}"
        for other in ("Data", "ZeRO2", "Shard"):
            what = f"Pipeshard fails where {other} fails"
            line = f"{where}: {what}: " + ", ".join(gib(r) for r in (runs[other], runs["Pipeshard"]))
            bad = _mem_unusable(what, line, runs[other], runs["Pipeshard"])
            if bad:
                v.comparisons.append(bad)
            elif mem_state(runs[other]) == "oom":
                v.comparisons.append(Comparison(what, HOLDS if mem_state(runs["Pipeshard"]) == "oom" else CONTRADICTED,
                                                line))
    if not v.comparisons:
        v.notes.append("no technique runs out of memory on heterogeneous GPUs in this analysis")
    return v


def c4_zero2_only(t: MemoryTable) -> Verdict:
    v = Verdict("C4.zero2-only", "ZeRO2 runs gpt2L on 2 RTX + 2 T4 where all the others run out of memory.")
    for model, s, vms in sorted(t.placements()):
        sl = t.slices.get(s)
        if model != "gpt2L" or sl is None or len(vms) < 2 or sorted(vm.gpu for vm in sl.vms) != ["RTX6000", "T4"]:
            continue
        runs = t.at(model, s, vms)
        for tech in Technique:
            expect = "ok" if tech == "ZeRO2" else "oom"
            what = f"{tech} {'runs' if expect == 'ok' else 'runs out of memory'}"
            line = f"gpt2L on {s} (2 RTX + 2 T4): {what}: {gib(runs[tech])}"
            bad = _mem_unusable(what, line, runs[tech])
            v.comparisons.append(bad or Comparison(what, HOLDS if mem_state(runs[tech]) == expect else CONTRADICTED, line))
    return v


def c4_gpt2l_one_vm(t: MemoryTable) -> Verdict:
    """On the first VM alone of each slice, none of the four techniques fits gpt2L, in more than
    half of the slices analysed."""
    v = Verdict("C4.gpt2L-one-vm", "gpt2L does not fit on the 2 GPUs of one VM (any technique) in most slices.")
    what = "gpt2L fits no technique on one VM in most slices"
    none_fit, counted = 0, 0
    for model, s, vms in sorted(t.placements()):
        sl = t.slices.get(s)
        first = sl.vms[0].name if sl else None
        if model != "gpt2L" or len(vms) != 1 or vms[0] != (first or vms[0]):
            continue
        runs = t.at(model, s, vms)
        line = f"gpt2L on {s} {vms[0]} alone: " + ", ".join(gib(r) for r in runs.values())
        bad = _mem_unusable(what, line, *runs.values())
        if bad:
            v.comparisons.append(bad)
            continue
        counted += 1
        fits = [k for k, r in runs.items() if mem_state(r) == "ok"]
        none_fit += not fits
        v.notes.append(line + (f": fits with {', '.join(fits)}" if fits else ": no technique fits"))
    if counted:
        v.comparisons.append(Comparison(what, HOLDS if none_fit > counted / 2 else CONTRADICTED,
                                        f"{none_fit} of {counted} slices: no technique fits gpt2L on one VM"))
    return v


def c4_observed(t: MemoryTable) -> Verdict:
    """Every run the paper reports as ran or failed (paper.RUNS), on the slices and models analysed:
    the analysis must say fits where it ran and out of memory where it failed. Where the paper's
    own observations disagree (same model, technique and GPU memory, different outcome), no
    analysis can match both: they are listed, not counted."""
    v = Verdict("C4.observed", "The memory analysis reproduces which of the paper's runs ran and which ran out "
                               "of memory.")
    conflicts = paper.conflicts()
    analysed = {(m, s) for (m, _, s, _) in t.index}
    for (s, placement, model, tech), ran in sorted(paper.RUNS.items()):
        if (model, s) not in analysed or s not in t.slices:
            continue
        sl = t.slices[s]
        vms = tuple(vm.name for vm in sl.vms) if placement == paper.FOUR_GPUS else (sl.vms[0].name,)
        r = t.index.get((model, tech, s, vms))
        what = f"{model} on {placement}: {tech} {'ran' if ran else 'failed'}"
        line = f"{s}: {what} in the paper; the analysis: {gib(r)}"
        key = (model, tech, paper.gpu_memory(s, placement))
        if key in conflicts:
            v.notes.append(f"{line} (the paper's own runs disagree on this hardware: "
                           + ", ".join(f"{w} {'ran' if x else 'failed'}" for w, x in conflicts[key]) + "; not counted)")
            continue
        bad = _mem_unusable(what, line, r)
        v.comparisons.append(bad or Comparison(what, HOLDS if (mem_state(r) == "ok") == ran else CONTRADICTED, line))
    return v


MEMORY_CLAIMS = (c4_most, c4_least, c4_fails_first, c4_zero2_only, c4_gpt2l_one_vm, c4_observed)


def judge_memory(records: list[dict], slices=()) -> list[Verdict]:
    table = MemoryTable(records, slices)
    return [claim(table) for claim in MEMORY_CLAIMS]
