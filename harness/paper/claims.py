"""The paper's claims (docs/paper.md, "Claims C1-C7") as functions over a table of trial records.

Each claim is split into the parts the paper states separately. A part makes comparisons, each
with a stable ID, "<part>/<where>/<key>" (e.g. "C1.two-site/UTAH-GPN/Pipeshard<Data"), made by
the part itself: declarations of a backend's limits (harness.paper.limits), the report, `compare` and
the baselines all key by it. Each comparison comes out as
- holds: it goes the paper's way beyond the noise (the robust spreads of the step times of the
  trials compared, harness.runs.noise);
- within noise: the difference, either way, is inside that noise;
- contradicted: it goes against the paper beyond that noise;
- not shown: a trial it needs was not run, crashed, or both sides ran out of memory.
A part's verdict is its worst comparison, in the order holds, within noise, not shown,
contradicted: it holds only if every comparison it names was made and went the paper's way
beyond the noise, and it is not shown when it has nothing to compare. A crashed trial is never
the paper's x: the comparison is not shown and the verdict says which trial crashed, and the test
suite fails on it. Only the device allocator's out of memory counts as the paper's x (see
state()): the run that failed loses to the run that ran.

Each comparison also says how far it goes against the paper (`gap`: the factor by which the side
the paper says is better is worse; above 1 when against), which a declared limit bounds.

Training time is compared per epoch of the corpus (median step time x steps per epoch), so that
runs with different global batches (4 GPUs or one VM) compare as the paper's 20-epoch times do.
The same functions judge CPU scale-model trials, GPU trials, live slices and predictions.
"""
import math
import statistics
from dataclasses import dataclass, field
from enum import StrEnum

from harness.backends.emulation import compute
from harness.core.config import Technique
from harness.errors import BadInput
from harness.paper import observed, selection
from harness.platform import hardware
from harness.runs import noise as noise_
from harness.runs import records

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
    key: str  # what is compared, short and stable: "Pipeshard<Data"
    where: str  # the slice, slices ("A..B"), experiment ("*:vm1") or placement it is made on
    status: str
    line: str  # the evidence, with where it was made and the numbers
    crashed: tuple[str, ...] = ()  # trials that crashed and left it not shown
    slices: tuple[str, ...] = ()  # the slices whose records it reads
    gap: float | None = None  # how far it goes against the paper, as a factor (> 1: against)
    what: str = ""  # the comparison in words
    part: str = ""  # set by the Verdict that makes it
    excuse: dict | None = None  # a declared limit's judgement of it (harness.paper.limits.apply)

    @property
    def id(self) -> str:
        return f"{self.part}/{self.where}/{self.key}"

    @property
    def excused(self) -> bool:
        return self.status == CONTRADICTED and bool(self.excuse and self.excuse["excused"])

    def to_dict(self) -> dict:
        return {"id": self.id, "key": self.key, "where": self.where, "what": self.what, "status": self.status,
                "line": self.line, "crashed": list(self.crashed), "slices": list(self.slices),
                "gap": _finite_or_none(self.gap), "excuse": self.excuse}


def _finite_or_none(x: float | None):
    """JSON has no infinity: an infinite gap (a run out of memory against one that ran) is 'inf'."""
    if x is None or math.isfinite(x):
        return x
    return "inf" if x > 0 else "-inf"


def worst(statuses) -> str:
    return max(statuses, key=ORDER.index, default=NOT_SHOWN)


# A part's outcome once a backend's declared limits have judged its contradictions (harness.paper.limits):
# what the report counts and the tests act on.
EXCUSED = "contradicted within a declared limit"
OUTCOMES = (HOLDS, NOISE, EXCUSED, NOT_SHOWN, CONTRADICTED)


@dataclass
class Verdict:
    part: str  # e.g. "C1.two-site"
    statement: str  # the paper's sentence
    comparisons: list[Comparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # context that is not a comparison

    def __post_init__(self):
        for c in self.comparisons:
            c.part = self.part

    def add(self, c: Comparison) -> None:
        c.part = self.part
        self.comparisons.append(c)

    @property
    def status(self) -> str:
        """The worst comparison, declared limits aside."""
        return worst(c.status for c in self.comparisons)

    @property
    def outcome(self) -> str:
        """The verdict with the declared limits: contradicted if a contradiction is not excused;
        else not shown if a comparison was not made (a declared one too); else excused if a
        contradiction is; else holds or within noise."""
        statuses = [c.status for c in self.comparisons]
        if any(c.status == CONTRADICTED and not c.excused for c in self.comparisons):
            return CONTRADICTED
        if not statuses or NOT_SHOWN in statuses:
            return NOT_SHOWN
        if CONTRADICTED in statuses:
            return EXCUSED
        return NOISE if NOISE in statuses else HOLDS

    @property
    def evidence(self) -> list[str]:
        return [c.line for c in self.comparisons] + self.notes

    @property
    def crashed(self) -> list[str]:
        return sorted({t for c in self.comparisons for t in c.crashed})

    def to_dict(self) -> dict:
        return {"part": self.part, "statement": self.statement, "status": self.status, "outcome": self.outcome,
                "evidence": self.evidence, "notes": self.notes,
                "comparisons": [c.to_dict() for c in self.comparisons], "crashed": self.crashed}


class DuplicateRecord(BadInput):
    pass


# -- one trial -------------------------------------------------------------------------------------
def timed(r: dict) -> list[float]:
    return r["timing"]["step_times_s"][r["timing"]["excluded_warmup_steps"]:]


def problem(r: dict, usable_bytes: int | None = None) -> str | None:
    """Why a record is no measurement (a crash), or None. A step time that is not a positive
    number is no measurement, nor a step of a run whose loss is not a finite number (training
    that diverged, or a record the suite did not write: it never writes one), nor an out of memory
    that is not the paper's x (records.not_the_papers_x; usable_bytes: the modelled GPU's, where
    it ran on a shared one or the CPU)."""
    if r["status"] == "oom":
        return records.not_the_papers_x(r, usable_bytes)
    if r["status"] != "ok":
        return r["reason"] or "failed"
    times = timed(r)
    if not times:
        return "no timed step"
    bad = [t for t in times if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0)]
    if bad:
        return f"step times {bad} are not positive numbers: no measurement"
    epoch = r["timing"]["epoch_time_s"]
    if not (isinstance(epoch, (int, float)) and math.isfinite(epoch) and epoch > 0):
        return f"epoch time {epoch} is not a positive number"
    diverged = [x for x in r["losses"] if not (isinstance(x, (int, float)) and math.isfinite(x))]
    if diverged:
        return f"losses {diverged} are not finite numbers: no measurement of training"
    return None


def state(r: dict | None, usable_bytes: int | None = None) -> str:
    """missing, crashed (see problem()), oom (the paper's x) or ok."""
    if r is None:
        return "missing"
    if problem(r, usable_bytes) is not None:
        return "crashed"
    return "oom" if r["status"] == "oom" else "ok"


def epoch_time(r: dict) -> float:
    return r["timing"]["epoch_time_s"] if state(r) == "ok" else math.inf


def noise(r: dict | None) -> float:
    """The robust spread of the timed step times (harness.runs.noise), scaled to an epoch; on an
    emulated run, at least the share its repeats drifted (drift(), set by Table)."""
    if state(r) != "ok":
        return 0.0
    share = max(noise_.relative(timed(r)), r["timing"].get("spread_floor", 0.0))
    return share * r["timing"]["epoch_time_s"]


label = records.label


EMULATED = ("userspace", "netem")  # the mechanisms of an emulated link (harness.backends.emulation)


def emulated(recs: list[dict]) -> bool:
    """Whether the run's slices are emulated: every VM a share of one machine."""
    return any(r["cluster"]["network"]["mechanism"] in EMULATED for r in recs)


def drift(recs: list[dict]) -> float:
    """The share by which an emulated run's machine drifted between its trials. There a technique
    on one VM of as many devices at one speed crosses no link, so its trials on each such VM of
    each slice are one experiment repeated at different times of the run. The median relative spread of such
    experiments' step times pooled (noise.shared_floor) is how far the same work moved while the
    run went on, and every comparison of two trials made at different times can move as far.
    0 where nothing was repeated, and on live slices, whose VMs are different machines. Only the
    paper's four techniques count: a technique registered beside them moves no verdict."""
    if not emulated(recs):
        return 0.0
    repeats: dict[tuple, list[dict]] = {}
    for r in recs:
        c = r["cluster"]
        if (r["technique"] in tuple(Technique) and r["status"] == "ok" and problem(r) is None and c["hosts"] == 1
                and c["vms_used"]):
            speed = (c.get("compute_shares") or {}).get(c["vms_used"][0], 1.0)
            repeats.setdefault((r["technique"], c["devices_per_host"], speed), []).append(r)
    return noise_.shared_floor([noise_.relative([t for r in rs for t in timed(r)])
                                for rs in repeats.values() if len(rs) > 1])


def at_least(r: dict, floor: float) -> dict:
    """The record with its relative noise at least floor (a copy: the run's records stay as written)."""
    if not floor or r["status"] != "ok":
        return r
    return {**r, "timing": {**r["timing"], "spread_floor": max(r["timing"].get("spread_floor", 0.0), floor)}}


# -- the table of trials ---------------------------------------------------------------------------
def on_its_slice(r: dict, given: dict) -> None:
    """Refuse, in one line, a record on a slice that is not one of the run's (given by name), or
    naming a VM its slice does not have. With no slices given there is nothing to check against."""
    if not given:
        return
    sl = given.get(r["cluster"]["slice"])
    if sl is None:
        raise BadInput(f"the record {label(r)} (record_id {r['record_id']}) is on {r['cluster']['slice']}, which is "
                       f"not one of the run's slices ({', '.join(given)})")
    foreign = sorted(set(r["cluster"]["vms_used"] or []) - {vm.name for vm in sl.vms})
    if foreign:
        raise BadInput(f"the record {label(r)} (record_id {r['record_id']}) names {', '.join(foreign)}, which "
                       f"{sl.name} does not have (its VMs: {', '.join(vm.name for vm in sl.vms)})")
    scaled_from(r, sl)
    at_its_gpus_speed(r, given)


def at_its_gpus_speed(r: dict, given: dict) -> None:
    """Refuse, in one line, a record whose VMs computed at other shares of their cores than their
    GPUs give against the run's fastest (compute.shares, as the emulator set them): the single-VM
    experiments and the drift group trials by those shares."""
    named = r["cluster"].get("compute_shares")
    if named is None:
        return
    if set(named) != set(r["cluster"]["vms_used"] or []):  # a VM left out would count as at full speed
        raise BadInput(f"the record {label(r)} (record_id {r['record_id']}): cluster.compute_shares names "
                       f"{', '.join(sorted(named)) or 'no VM'} where it ran on {', '.join(r['cluster']['vms_used'] or [])}: "
                       "a run gives every VM of a trial its share")
    expected = compute.shares(list(given.values()))[r["cluster"]["slice"]]
    for vm, share in named.items():
        if not records.same(share, expected[vm]):
            raise BadInput(f"the record {label(r)} (record_id {r['record_id']}): cluster.compute_shares gives {vm} "
                           f"{share:.4g} of its cores where its GPU computes at {expected[vm]:.4g} of the run's "
                           "fastest: a run sets each VM to its GPU's speed")


def scaled_from(r: dict, sl) -> None:
    """Refuse, in one line, a record whose emulated link was not made from its slice: the paper's
    RTT and rate its scaling names must be the slice's (C1 reads which slices are two-site from
    them), and the links between the slice's farthest VMs must hold the RTT it was scaled to."""
    scaling = r["cluster"]["network"].get("scaling")
    if not scaling:
        return
    where = f"the record {label(r)} (record_id {r['record_id']})"
    mechanism = r["cluster"]["network"]["mechanism"]
    if r["cluster"]["hosts"] > 1 and mechanism not in EMULATED:
        # Only an emulated run makes links from the paper's; judged as live, its drift would go uncounted.
        raise BadInput(f"{where}: network.mechanism is {mechanism!r} where its network.scaling names a link made "
                       f"from the paper's, which only an emulated link ({' or '.join(EMULATED)}) is")
    for name, paper in (("paper_rtt_ms", sl.rtt_ms), ("paper_bandwidth_gbps", sl.bandwidth_gbps)):
        if not records.same(scaling.get(name), paper):
            raise BadInput(f"{where}: network.scaling.{name} is {scaling.get(name)!r} where {sl.name}'s is "
                           f"{paper!r}: a run makes each slice's link from that slice's own")
    links, vms = r["cluster"]["network"].get("links") or {}, r["cluster"]["vms_used"] or []
    a, b = sl.farthest_pair if len(sl.vms) > 1 else (None, None)
    if r["cluster"]["hosts"] < 2 or a not in vms or b not in vms or scaling.get("rtt_ms") is None:
        return
    # Without its links a record's measured RTT has nothing to be held against (records.sooner_than_its_links).
    delays = [(links.get(direction) or {}).get("delay_ms") for direction in (f"{a}>{b}", f"{b}>{a}")]
    if not all(isinstance(d, (int, float)) for d in delays):
        raise BadInput(f"{where} names no delay for its link {a}>{b} or back, where its network.scaling names a "
                       "link made from the paper's: a run records the links its trials crossed")
    if not records.same(sum(delays), scaling["rtt_ms"]):
        raise BadInput(f"{where} names its link scaled to {scaling['rtt_ms']:.4g} ms where its links {a}>{b} and "
                       f"back delay {sum(delays):.4g} ms: a run sets the links to the RTT it scaled to")


class Table:
    """Trial records indexed by (technique, slice, VMs used: ALL or the one VM's name). The slices
    given are the run's: one with no records is still judged, its comparisons not shown."""

    def __init__(self, recs: list[dict], slices=()):
        self.records = recs
        self.given = {sl.name: sl for sl in slices}
        self.gpus = {(sl.name, vm.name): vm.gpu for sl in slices for vm in sl.vms}
        self.vm_order = {sl.name: [vm.name for vm in sl.vms] for sl in slices}
        records.one_experiment(recs)
        self.index = {}
        for r in recs:
            c = r["cluster"]
            on_its_slice(r, self.given)
            vms = ALL if c["hosts"] > 1 or not c["vms_used"] or len(c["vms_used"]) > 1 else c["vms_used"][0]
            key = (r["technique"], c["slice"], vms)
            if key in self.index:
                raise DuplicateRecord(f"two records of the trial {label(r)} (record_id {self.index[key]['record_id']} "
                                      f"and {r['record_id']}): a run has one record per trial")
            self.index[key] = r
        # On an emulated slice a VM is a share of one machine, at its GPU's speed (compute_shares),
        # and a run on one VM crosses no link: the single-VM runs of different slices on VMs of
        # one name and speed are one experiment, repeated.
        self.emulated = emulated(recs)
        # How far those repeats moved apart is how far the machine moved under every trial of the
        # run: no comparison counts a difference inside it.
        self.drift = drift(recs)
        self.index = {key: at_least(r, self.drift) for key, r in self.index.items()}

    def get(self, technique: str, slice_name: str, vms: str = ALL) -> dict | None:
        return self.index.get((technique, slice_name, vms))

    def usable_bytes(self, r: dict) -> int | None:
        """The usable memory of the GPU the record's VMs stand for (the smallest of them)."""
        c = r["cluster"]
        names = [self.gpus.get((c["slice"], vm)) for vm in c["vms_used"] or []]
        if not names or None in names:
            return None
        return min(hardware.accelerator(n).usable_bytes for n in names)

    def state(self, r: dict | None) -> str:
        return state(r, self.usable_bytes(r) if r is not None else None)

    def show(self, r: dict | None) -> str:
        """A trial's outcome as a verdict's line gives it, judged against the GPU its VMs stand for."""
        s = self.state(r)
        if s == "missing":
            return "not run"
        if s == "oom":
            return "x (out of memory)"
        if s == "crashed":
            return f"crashed ({problem(r, self.usable_bytes(r))})"
        return f"{epoch_time(r):.3g} s/epoch (±{noise(r):.2g})"

    def slices(self) -> list[str]:
        """Slices judged on all their VMs (with such trials, or given with more than one VM), by increasing RTT."""
        names = {s for (_, s, v) in self.index if v == ALL} | {s for s, sl in self.given.items() if len(sl.vms) > 1}
        return sorted(names, key=lambda s: (rtt(self, s), s))

    def all_slices(self) -> list[str]:
        names = {s for (_, s, _) in self.index} | set(self.given)
        return sorted(names, key=lambda s: (rtt(self, s), s))

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

    def single_vm_experiments(self) -> list[tuple[str, str, tuple, dict]]:
        """(name, where, slices, technique -> record or None) for each experiment on the first VM
        alone. On emulated slices the first VMs of all slices are one experiment: their step
        times are pooled, so that one measurement is not counted once per slice."""
        by_slice = {s: self.first_vm(s) for s in self.all_slices()}
        by_slice = {s: vm for s, vm in by_slice.items() if vm is not None and (vm in self.one_vm(s) or s in self.given)}
        if not self.emulated:
            return [(f"{s} {vm} alone", f"{s}:{vm}", (s,), {t: self.get(t, s, vm) for t in Technique})
                    for s, vm in by_slice.items()]
        groups: dict[tuple[str, float], list[str]] = {}
        for s, vm in by_slice.items():
            groups.setdefault((vm, self.compute_share(s, vm)), []).append(s)
        speeds = lambda vm: len({share for v, share in groups if v == vm})
        return [(f"{vm} alone (one emulated VM{'' if share == 1.0 else f' at {share:.2g} of its cores'}, "
                 f"measured on {', '.join(ss)})", f"*:{vm}" if speeds(vm) == 1 else f"*:{vm}@{share:.3g}", tuple(ss),
                 self.pooled_experiment({t: [self.get(t, s, vm) for s in ss] for t in Technique}))
                for (vm, share), ss in groups.items()]

    def compute_share(self, slice_name: str, vm: str) -> float:
        """The share of its cores an emulated VM computed with on the slice (its GPU's speed,
        harness.backends.emulation.compute); 1 where the records give none."""
        for r in self.records:
            c = r["cluster"]
            if c["slice"] == slice_name and vm in (c["vms_used"] or []) and c.get("compute_shares"):
                return c["compute_shares"][vm]
        return 1.0

    def pooled_experiment(self, repeats: dict) -> dict:
        """technique -> its repeats pooled (pooled()); where the experiment was repeated, every
        technique's noise is at least the median relative spread of them all (noise.shared_floor)."""
        runs = {t: self.pooled(recs) for t, recs in repeats.items()}
        if max(len(recs) for recs in repeats.values()) < 2:
            return runs
        ok = [t for t, r in runs.items() if self.state(r) == "ok"]
        floor = max(noise_.shared_floor([noise_.relative(timed(runs[t])) for t in ok]), self.drift)
        return {t: {**r, "timing": {**r["timing"], "spread_floor": floor}} if t in ok else r for t, r in runs.items()}

    def pooled(self, recs: list[dict | None]) -> dict | None:
        """One experiment measured several times: its step times together. A crashed, missing or
        failed measurement stands for the experiment, in that order."""
        for bad in ("crashed", "missing", "oom"):
            for r in recs:
                if self.state(r) == bad:
                    return r
        times = [t for r in recs for t in timed(r)]
        median = statistics.median(times)
        first = recs[0]
        return {**first, "timing": {**first["timing"], "step_times_s": times, "excluded_warmup_steps": 0,
                                    "median_step_s": median,
                                    "epoch_time_s": median * first["data"]["steps_per_epoch"]}}


def rtt(table: Table, slice_name: str) -> float:
    """The slice's RTT as ping gives it, the lowest measured (each record's is already a minimum);
    for a slice given with no such record, its own."""
    values = [r["cluster"]["network"]["rtt_ms"] for (t, s, v), r in table.index.items()
              if s == slice_name and v == ALL and r["cluster"]["network"]["rtt_ms"] is not None]
    if values:
        return min(values)
    return table.given[slice_name].rtt_ms if slice_name in table.given else math.nan


def paper_rtt(table: Table, slice_name: str) -> float:
    """The slice's RTT in the paper: what its records say the run's link was scaled from
    (network.scaling), or the slice's own where given, or the measured one."""
    given = [r["cluster"]["network"].get("scaling", {}).get("paper_rtt_ms") for (t, s, v), r in table.index.items()
             if s == slice_name and v == ALL]
    given = [x for x in given if x is not None]
    if given:
        return min(given)
    return table.given[slice_name].rtt_ms if slice_name in table.given else rtt(table, slice_name)


TWO_SITE_MS = 1.0


def two_site(table: Table) -> list[str]:
    return [s for s in table.slices() if paper_rtt(table, s) >= TWO_SITE_MS]


def single_site(table: Table) -> list[str]:
    return [s for s in table.slices() if paper_rtt(table, s) < TWO_SITE_MS]


# -- one comparison --------------------------------------------------------------------------------
def unusable(t: Table, key: str, where: str, slices: tuple, what: str, line: str, *recs) -> Comparison | None:
    """The comparison when a trial it needs is missing or crashed, else None."""
    crashed = tuple(label(r) for r in recs if t.state(r) == "crashed")
    if crashed:
        why = "; ".join(f"{label(r)}: {problem(r, t.usable_bytes(r))}" for r in recs if t.state(r) == "crashed")
        return Comparison(key, where, NOT_SHOWN, f"{line}: not shown, a trial crashed, not the paper's x ({why})",
                          crashed, slices, what=what)
    if any(r is None for r in recs):
        return Comparison(key, where, NOT_SHOWN, f"{line}: not shown, a trial was not run", (), slices, what=what)
    return None


def compare_times(ta: float, tb: float, band: float) -> str:
    """a's time against b's, where the paper says a is shorter."""
    if tb - ta > band:
        return HOLDS
    if abs(ta - tb) <= band:
        return NOISE
    return CONTRADICTED


def faster(t: Table, a: dict | None, b: dict | None, key: str, where: str, slices: tuple, what: str = "",
           margin: float = 0.0) -> Comparison:
    """Does a train faster than b (by more than `margin`, a fraction of a's time), beyond the
    noise of both? Out of memory loses to a run that ran."""
    what = what or key.replace("<", " vs ")
    line = f"{where}: {what}: {t.show(a)} vs {t.show(b)}"
    bad = unusable(t, key, where, slices, what, line, a, b)
    if bad:
        return bad
    sa, sb = t.state(a), t.state(b)
    if sa == sb == "oom":
        return Comparison(key, where, NOT_SHOWN, line + ": not shown, both out of memory", (), slices, what=what)
    if sb == "oom":
        return Comparison(key, where, HOLDS, line, (), slices, 0.0, what)
    if sa == "oom":
        return Comparison(key, where, CONTRADICTED, line, (), slices, math.inf, what)
    ta, tb = epoch_time(a) * (1 + margin), epoch_time(b)
    band = noise(a) * (1 + margin) + noise(b)
    status = compare_times(ta, tb, band)
    words = {HOLDS: f", {100 * (1 - ta / tb):.0f}% less", NOISE: f", within the noise (±{band:.2g})",
             CONTRADICTED: f", {100 * (ta / tb - 1):.0f}% more"}[status]
    return Comparison(key, where, status, line + words, (), slices, ta / tb, what)


# -- C1 --------------------------------------------------------------------------------------------
OTHERS = ("Data", "ZeRO2", "Shard")


def c1_two_site(t: Table) -> Verdict:
    return Verdict("C1.two-site", "On every two-site slice, with all 4 GPUs, Pipeshard has the shortest training time.",
                   [faster(t, t.get("Pipeshard", s), t.get(o, s), f"Pipeshard<{o}", s, (s,)) for s in two_site(t)
                    for o in OTHERS])


def c1_single_site(t: Table) -> Verdict:
    return Verdict("C1.single-site", "Pipeshard also wins on the single-site 4-GPU slice (TACC-TACC).",
                   [faster(t, t.get("Pipeshard", s), t.get(o, s), f"Pipeshard<{o}", s, (s,)) for s in single_site(t)
                    for o in OTHERS])


# -- C2 --------------------------------------------------------------------------------------------
PAPER_ORDER = ("Pipeshard", "Data", "ZeRO2", "Shard")  # shortest training time first
DEGRADE_ORDER = PAPER_ORDER[::-1]  # degrades most with RTT first


def pairs(order: tuple) -> list[tuple[str, str]]:
    """Every pair (earlier, later) of an order: a whole ordering, not only neighbours."""
    return [(a, b) for i, a in enumerate(order) for b in order[i + 1:]]


def c2_order(t: Table) -> Verdict:
    return Verdict("C2.order", "On the two-site slices: Pipeshard < Data < ZeRO2 < Shard in training time.",
                   [faster(t, t.get(a, s), t.get(b, s), f"{a}<{b}", s, (s,)) for s in two_site(t)
                    for a, b in pairs(PAPER_ORDER)])


def c2_sensitivity(t: Table) -> Verdict:
    """Growth of training time from each slice to the next one up in RTT, compared between every
    pair of techniques in the paper's order."""
    v = Verdict("C2.sensitivity", "As RTT grows, Shard degrades most, then ZeRO2, then Data; Pipeshard degrades least.")
    names = t.slices()
    steps = [(lo, hi) for lo, hi in zip(names, names[1:]) if rtt(t, lo) < rtt(t, hi)]
    for lo, hi in zip(names, names[1:]):
        if not rtt(t, lo) < rtt(t, hi):
            v.notes.append(f"{lo} and {hi}: the same RTT ({rtt(t, lo):.3g} ms), no growth to compare")
    if not steps:
        v.notes.append("needs slices with at least two RTTs")
        return v
    for lo, hi in steps:
        where = f"{lo}..{hi}"
        span = f"{lo} ({rtt(t, lo):.3g} ms) to {hi} ({rtt(t, hi):.3g} ms)"
        runs = {tech: (t.get(tech, lo), t.get(tech, hi)) for tech in DEGRADE_ORDER}
        ok = {tech: t.state(a) == t.state(b) == "ok" for tech, (a, b) in runs.items()}
        growth = {tech: epoch_time(b) - epoch_time(a) if ok[tech] else math.nan for tech, (a, b) in runs.items()}
        spread = {tech: noise(a) + noise(b) for tech, (a, b) in runs.items()}
        for more, less in pairs(DEGRADE_ORDER):
            key, what = f"{more}>{less}", f"{more} degrades more than {less}"
            line = f"{span}: {what}: {more} grows {growth[more]:+.3g} s/epoch, {less} {growth[less]:+.3g}"
            bad = unusable(t, key, where, (lo, hi), what, line, *runs[more], *runs[less])
            if bad:
                v.add(bad)
                continue
            if not (ok[more] and ok[less]):
                v.add(Comparison(key, where, NOT_SHOWN, line + ": not shown, a run is out of memory", (), (lo, hi),
                                 what=what))
                continue
            gm, gl, band = growth[more], growth[less], spread[more] + spread[less]
            status = compare_times(-gm, -gl, band)  # more growth is the "shorter" side of the paper
            gap = gl / gm if gm > 0 else (math.inf if gl > gm else 0.0)
            words = "" if status == HOLDS else f", within the noise (±{band:.2g})" if status == NOISE else ""
            v.add(Comparison(key, where, status, line + words, (), (lo, hi), gap, what))
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
    key = "best-of-Data-Shard<Pipeshard"
    for name, where, slices_, runs in t.single_vm_experiments():
        if _on_one_gpu(runs):
            v.notes.append(f"{name}: {ONE_GPU}")
            continue
        d, sh, p = runs["Data"], runs["Shard"], runs["Pipeshard"]
        what = "best of Data and Shard vs Pipeshard"
        bad = unusable(t, key, where, slices_, what, f"{name}: {what}: Data {t.show(d)}, Shard {t.show(sh)}, "
                                                     f"Pipeshard {t.show(p)}", d, sh, p)
        if bad:
            v.add(bad)
        elif t.state(d) == t.state(sh) == "oom":
            v.notes.append(f"{name}: the model does not fit (Data and Shard out of memory): not part of the claim")
        else:
            best = d if epoch_time(d) <= epoch_time(sh) else sh
            v.add(faster(t, best, p, key, where, slices_, f"{what} ({best['technique']})"))
    return v


def c3_data_most(t: Table) -> Verdict:
    """Wins counted per single-VM experiment (the first VM alone, every technique); a run within
    the measured noise of the fastest ties with it, and a run slower than the fastest beyond the
    noise loses. Per rival: holds if Data's clear wins outnumber the rival's wins and ties;
    contradicted if Data's wins and ties are no more than the rival's clear wins (so Data, slower
    than a winner beyond the noise in every experiment, wins none: contradicted); within noise
    otherwise."""
    v = Verdict("C3.data-most", "Of the single-VM experiments, Data wins most often (paper: "
                + ", ".join(f"{k} {n}" for k, n in observed.SINGLE_VM_WINS.items()) + " of 8; Shard on A30s).")
    clear, possible = dict.fromkeys(Technique, 0), dict.fromkeys(Technique, 0)
    worst_ratio = dict.fromkeys(Technique, 0.0)  # Data's time over each rival's, at worst
    what, where, judged = "Data wins most single-VM experiments", "single-VM", []
    for name, exp, slices_, runs in t.single_vm_experiments():
        if _on_one_gpu(runs):
            v.notes.append(f"{name}: {ONE_GPU}")
            continue
        shown = ", ".join(f"{k} {t.show(r)}" for k, r in runs.items())
        bad = unusable(t, "Data-wins", exp, slices_, what, f"{name}: {shown}", *runs.values())
        if bad:
            v.add(bad)
            continue
        times = {tech: epoch_time(r) for tech, r in runs.items()}
        best = min(times, key=times.get)
        if times[best] == math.inf:
            v.notes.append(f"{name}: every technique out of memory: no winner")
            continue
        judged += slices_
        winners = sorted(tech for tech in Technique
                         if times[tech] - times[best] <= noise(runs[tech]) + noise(runs[best]))
        for tech in winners:
            possible[tech] += 1
        if len(winners) == 1:
            clear[best] += 1
        for rival in Technique:
            worst_ratio[rival] = max(worst_ratio[rival], times["Data"] / times[rival])
        v.notes.append(f"{name}: " + (f"{best} wins" if len(winners) == 1 else f"tie within the noise: {', '.join(winners)}")
                       + f" ({shown})")
    if not sum(possible.values()):
        return v
    counts = ("clear wins " + ", ".join(f"{k} {n}" for k, n in clear.items())
              + "; wins or ties " + ", ".join(f"{k} {n}" for k, n in possible.items()))
    # "Most often" is "more often than each rival": one comparison per rival.
    for rival in list(Technique)[1:]:
        what = f"Data wins more single-VM experiments than {rival}"
        if clear["Data"] > possible[rival]:
            status = HOLDS
        elif possible["Data"] <= clear[rival]:
            status = CONTRADICTED
        else:
            status = NOISE
        v.add(Comparison(f"Data>{rival}", where, status, f"{what}: {counts}", (), tuple(dict.fromkeys(judged)),
                         worst_ratio[rival], what))
    return v


# -- C5, C6 ----------------------------------------------------------------------------------------
def c5_more_gpus(t: Table) -> Verdict:
    """Where the paper makes the point (TACC-TACC): Data on the first VM alone beats Pipeshard on all
    GPUs, beyond the noise. Other slices are shown, not judged: the paper states it for that one."""
    v = Verdict("C5.more-gpus", "More GPUs is not always faster: on TACC-TACC, Data on the 2 RTX of one VM "
                                "beats Pipeshard on all 4 GPUs over two VMs.")
    for s in t.all_slices():
        vm = t.first_vm(s)
        c = faster(t, t.get("Data", s, vm), t.get("Pipeshard", s), f"Data@{vm}<Pipeshard", s, (s,),
                   f"Data on {vm} alone vs Pipeshard on all GPUs")
        if s in observed.MORE_GPUS_SLICES:
            v.add(c)
        else:
            v.notes.append(f"{c.line} (not a slice where the paper makes the point)")
    return v


def c6_shard_worst(t: Table) -> Verdict:
    return Verdict("C6.shard-worst", "Shard across VMs is the worst choice on every multi-VM slice.",
                   [faster(t, t.get(o, s), t.get("Shard", s), f"{o}<Shard", s, (s,)) for s in t.slices()
                    for o in ("Data", "ZeRO2", "Pipeshard")])


# -- C7 --------------------------------------------------------------------------------------------
class _Missing(Exception):
    pass


class _Crashed(Exception):
    pass


def algorithm_1(t: Table, s: str, delta: float):
    """Algorithm 1 as published over the trials of slice s (its T from each record): the decision,
    or raises _Missing / _Crashed for a trial it needs."""
    every = t.get("Pipeshard", s)
    if every is None:
        raise _Missing(f"Pipeshard on all VMs of {s}")
    vms = every["cluster"]["vms_used"]

    def measure(technique, on):
        r = t.get(technique, s, ALL if len(on) > 1 else on[0])
        if r is None:
            raise _Missing(f"{technique} on {'+'.join(on)}")
        if t.state(r) == "crashed":
            raise _Crashed(label(r))
        return selection.average_tflops(r)

    return selection.select("published", vms, measure, delta, every["cluster"]["devices_per_host"])


def _decisions(t: Table, delta: float, statement: str, part: str, slices_: list[str]):
    """(verdict, [(slice, decision, line)]) for the slices whose trials the algorithm could use."""
    v = Verdict(part, statement)
    out = []
    key, what = "answer", "Algorithm 1's answer"
    for s in slices_:
        try:
            d = algorithm_1(t, s, delta)
        except _Missing as e:
            v.add(Comparison(key, s, NOT_SHOWN, f"{s}: not shown, the algorithm needs a trial the run lacks ({e})",
                             (), (s,), what=what))
            continue
        except _Crashed as e:
            v.add(Comparison(key, s, NOT_SHOWN, f"{s}: not shown, a trial it needs crashed ({e})", (str(e),), (s,),
                             what=what))
            continue
        answer = f"{d.technique} on {'+'.join(d.vms)}" if d.technique else "none"
        line = (f"{s}: published picks {answer} ({d.rule}); T per GPU: "
                + ", ".join(f"{x['technique']} on {'+'.join(x['vms'])} {x['T']:.3g}" for x in d.trials))
        out.append((s, d, line))
    return v, out


DELTA = 0.1  # Algorithm 1's threshold, as the paper runs it


def c7_geo_pipeshard(t: Table, delta: float = DELTA) -> Verdict:
    """First half of C7: on every two-site slice, Algorithm 1 (as published) answers Pipeshard on
    all VMs, and that answer is right: no other technique on all VMs trains faster."""
    v, decisions = _decisions(t, delta, "Algorithm 1 picks Pipeshard on both VMs for geo-distributed (two-site) "
                                        f"slices (delta = {delta}).", "C7.geo-pipeshard", two_site(t))
    for s, d, line in decisions:
        ok = d.technique == "Pipeshard" and len(d.vms) > 1
        tp = next(x["T"] for x in d.trials if x["technique"] == "Pipeshard")
        tz = max((x["T"] or 0.0) for x in d.trials if len(x["vms"]) == 1)
        gap = tz * (1 + delta) / tp if tp > 0 else math.inf  # how far Pipeshard's T falls short of step 4's
        v.add(Comparison("picks-Pipeshard", s, HOLDS if ok else CONTRADICTED, line, (), (s,), gap,
                         "picks Pipeshard on all VMs"))
    key, what = "Pipeshard<others@all-VMs", "no other technique on all VMs trains faster than Pipeshard"
    for s in two_site(t):
        p, others = t.get("Pipeshard", s), [t.get(o, s) for o in OTHERS]
        shown = ", ".join(f"{o} {t.show(r)}" for o, r in zip(OTHERS, others))
        bad = unusable(t, key, s, (s,), what, f"{s}: {what}: Pipeshard {t.show(p)}, {shown}", p, *others)
        if bad:
            v.add(bad)
            continue
        ran = [r for r in others if t.state(r) == "ok"]
        v.add(faster(t, p, min(ran, key=epoch_time) if ran else others[0], key, s, (s,), what))
    return v


def c7_single_vm(t: Table, delta: float = DELTA) -> Verdict:
    """Second half of C7, on every slice: when Algorithm 1 picks one VM, that run trains faster than
    Pipeshard on all VMs by more than delta; when it does not, no single-VM run of Data or Shard
    would have (time per epoch, beyond the measured noise)."""
    v, decisions = _decisions(t, delta, "Algorithm 1 picks a single VM with Data or Shard when that is better "
                                        f"than Pipeshard on both VMs by more than delta (= {delta}).",
                              "C7.single-vm", t.slices())
    for s, d, line in decisions:
        p = t.get("Pipeshard", s)
        if d.technique in ("Data", "Shard") and len(d.vms) == 1:
            c = faster(t, t.get(d.technique, s, d.vms[0]), p, "picked-VM<Pipeshard", s, (s,),
                       "the single VM it picks trains faster than Pipeshard by more than delta", margin=delta)
            c.line = f"{c.line}; {line}"
            v.add(c)
            continue
        singles = [t.get(tech, s, vm) for vm in t.one_vm(s) for tech in ("Data", "Shard")]
        key, what = "no-passed-over-VM<Pipeshard", "no single VM it passes over trains faster than Pipeshard by more than delta"
        bad = unusable(t, key, s, (s,), what, f"{s}: {line}", *singles)
        if bad:
            v.add(bad)
            continue
        singles = [r for r in singles if t.state(r) == "ok"]
        if not singles:
            v.add(Comparison(key, s, HOLDS, f"{s}: no single-VM run of Data or Shard ran; {line}", (), (s,), 0.0, what))
            continue
        best = min(singles, key=epoch_time)
        c = faster(t, best, p, key, s, (s,), margin=delta)
        flipped = {HOLDS: CONTRADICTED, CONTRADICTED: HOLDS}.get(c.status, c.status)
        gap = None if c.gap is None else 1 / c.gap if c.gap else math.inf
        v.add(Comparison(key, s, flipped, f"{s}: fastest single VM {label(best)} {t.show(best)} vs "
                                          f"Pipeshard {t.show(p)}; {line}", (), (s,), gap, what))
    return v


TIMED_CLAIMS = (c1_two_site, c1_single_site, c2_order, c2_sensitivity, c3_single_vm, c3_data_most, c5_more_gpus,
                c6_shard_worst, c7_geo_pipeshard, c7_single_vm)


def judge(records_: list[dict], slices=()) -> list[Verdict]:
    """Every timed part over the run's trial records; `slices`: the run's slices (a slice with no
    records is judged too, its comparisons not shown). Two records of one trial are refused."""
    table = Table(records_, slices)
    return [claim(table) for claim in TIMED_CLAIMS]


# -- C4, from the compile-only memory analysis at paper scale (harness.analysis.memory records) -------------
class MemoryTable:
    """Memory records indexed by (model, technique, slice, VMs used)."""

    def __init__(self, recs: list[dict], slices=()):
        self.index = {}
        self.slices = {sl.name: sl for sl in slices}
        for r in recs:
            on_its_slice(r, self.slices)
            key = (r["model"]["name"], r["technique"], r["cluster"]["slice"], tuple(r["cluster"]["vms_used"]))
            if key in self.index:
                raise DuplicateRecord(f"two memory analyses of {r['model']['name']} {label(r)} (record_id "
                                      f"{self.index[key]['record_id']} and {r['record_id']}): a run has one per placement")
            self.index[key] = r

    def placements(self) -> set:
        return {(m, s, vms) for (m, t, s, vms) in self.index}

    def at(self, model: str, s: str, vms: tuple) -> dict:
        """technique -> record (None where not analysed)."""
        return {tech: self.index.get((model, tech, s, vms)) for tech in Technique}

    def fit(self, r: dict | None) -> float | None:
        """The record's need over the usable memory of its tightest GPU (above 1: out of memory),
        or None where either is unknown."""
        sl = self.slices.get(r["cluster"]["slice"]) if r else None
        if r is None or sl is None or need(r) is None:
            return None
        used = [vm for vm in sl.vms if vm.name in r["cluster"]["vms_used"]]
        rows = r["memory"].get("bytes_per_stage") or r["memory"].get("bytes_per_row")
        needs = rows if rows and len(rows) == len(used) else [need(r)] * len(used)
        return max(n / vm.accelerator.usable_bytes for n, vm in zip(needs, used)) if used else None


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


def _mem_unusable(key: str, where: str, slices: tuple, what: str, line: str, *recs) -> Comparison | None:
    crashed = tuple(f"{r['model']['name']} {label(r)}" for r in recs if mem_state(r) == "crashed")
    if crashed:
        return Comparison(key, where, NOT_SHOWN, f"{line}: not shown, an analysis crashed (not out of memory)",
                          crashed, slices, what=what)
    if any(r is None for r in recs):
        return Comparison(key, where, NOT_SHOWN, f"{line}: not shown, not analysed", (), slices, what=what)
    return None


def _outcome(t: MemoryTable, r: dict, expect: str, key: str, where: str, slices: tuple, what: str,
             line: str) -> Comparison:
    """A comparison that a run fits (expect "ok") or runs out of memory ("oom"); its gap is how far
    the need sits on the wrong side of the GPU's usable memory."""
    fit = t.fit(r)
    gap = None if fit is None else (fit if expect == "ok" else 1 / fit)
    return Comparison(key, where, HOLDS if mem_state(r) == expect else CONTRADICTED, line, (), slices, gap, what)


def _groups(t: MemoryTable) -> list[tuple[str, str, tuple, dict]]:
    """(name, where, slices, technique -> record) per model and placement; slices whose analyses
    need the same bytes per technique are one group (the per-device need does not depend on the link)."""
    seen: dict[tuple, list] = {}
    for model, s, vms in sorted(t.placements()):
        runs = t.at(model, s, vms)
        key = (model, len(vms), tuple((k, need(r), mem_state(r)) for k, r in runs.items()))
        seen.setdefault(key, []).append((s, vms, runs))
    out = []
    for (model, n_vms, _), members in seen.items():
        on = ", ".join(s if len(vms) > 1 else f"{s} {vms[0]}" for s, vms, _ in members)
        where = f"{model}:{'all-GPUs' if n_vms > 1 else 'one-VM'}:" + "+".join(
            s if len(vms) > 1 else f"{s}.{vms[0]}" for s, vms, _ in members)
        out.append((f"{model} on {'all GPUs' if n_vms > 1 else 'one VM'} ({on})", where,
                    tuple(dict.fromkeys(s for s, _, _ in members)), members[0][2]))
    return out


def _extreme(t: MemoryTable, technique: str, most: bool, part: str, statement: str) -> Verdict:
    v = Verdict(part, statement)
    for name, where, slices_, runs in _groups(t):
        if _on_one_gpu(runs):
            v.notes.append(f"{name}: {ONE_GPU}")
            continue
        for other in Technique:
            if other == technique:
                continue
            key = f"{technique}{'>' if most else '<'}{other}"
            what = f"{technique} needs {'more' if most else 'less'} than {other}"
            line = f"{name}: {what}: {gib(runs[technique])} vs {gib(runs[other])}"
            bad = _mem_unusable(key, where, slices_, what, line, runs[technique], runs[other])
            a, b = need(runs[technique]), need(runs[other])
            if bad:
                v.add(bad)
            elif a is None or b is None:
                v.add(Comparison(key, where, NOT_SHOWN, line + ": not shown, no figure", (), slices_, what=what))
            else:
                gap = (b / a if most else a / b) if a and b else None
                status = HOLDS if ((a > b) if most else (a < b)) else NOISE if a == b else CONTRADICTED
                v.add(Comparison(key, where, status, line, (), slices_, gap, what))
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
        where = f"{model}:{s}:{'+'.join(vms)}"
        for other in OTHERS:
            key, what = f"Pipeshard-x-where-{other}-x", f"Pipeshard fails where {other} fails"
            line = f"{model} on {s} {'+'.join(vms)}: {what}: " + ", ".join(gib(r) for r in (runs[other], runs["Pipeshard"]))
            bad = _mem_unusable(key, where, (s,), what, line, runs[other], runs["Pipeshard"])
            if bad:
                v.add(bad)
            elif mem_state(runs[other]) == "oom":
                v.add(_outcome(t, runs["Pipeshard"], "oom", key, where, (s,), what, line))
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
            key, what = f"{tech}-{'runs' if expect == 'ok' else 'x'}", f"{tech} {'runs' if expect == 'ok' else 'runs out of memory'}"
            line = f"gpt2L on {s} (2 RTX + 2 T4): {what}: {gib(runs[tech])}"
            where = f"gpt2L:{s}"
            v.add(_mem_unusable(key, where, (s,), what, line, runs[tech])
                  or _outcome(t, runs[tech], expect, key, where, (s,), what, line))
    return v


def c4_gpt2l_one_vm(t: MemoryTable) -> Verdict:
    """On the first VM alone of each slice analysed: in more than half of them no technique fits
    gpt2L; and so, technique by technique, each runs out of memory in more than half of them."""
    v = Verdict("C4.gpt2L-one-vm", "gpt2L does not fit on the 2 GPUs of one VM (any technique) in most slices.")
    where = "first-VMs"
    fails = dict.fromkeys(Technique, 0)
    none_fit, counted, slices_ = 0, 0, []
    # technique -> its need over the usable memory where it fits, the farthest below it: how far
    # the need would have to grow for every such run to run out
    fits_at: dict[str, float] = {}
    for model, s, vms in sorted(t.placements()):
        sl = t.slices.get(s)
        first = sl.vms[0].name if sl else None
        if model != "gpt2L" or len(vms) != 1 or vms[0] != (first or vms[0]):
            continue
        runs = t.at(model, s, vms)
        line = f"gpt2L on {s} {vms[0]} alone: " + ", ".join(gib(r) for r in runs.values())
        bad = _mem_unusable("none-fits-in-most", where, (s,), "gpt2L fits no technique on one VM in most slices",
                            line, *runs.values())
        if bad:
            v.add(bad)
            continue
        counted += 1
        slices_.append(s)
        fits = [k for k, r in runs.items() if mem_state(r) == "ok"]
        none_fit += not fits
        for k, r in runs.items():
            fails[k] += mem_state(r) == "oom"
            fit = t.fit(r)
            if mem_state(r) == "ok" and fit:
                fits_at[k] = min(fits_at.get(k, math.inf), fit)
        v.notes.append(line + (f": fits with {', '.join(fits)}" if fits else ": no technique fits"))
    if not counted:
        return v
    for tech in Technique:
        what = f"{tech} runs out of memory on one VM in most slices"
        gap = 1 / fits_at[tech] if tech in fits_at else None
        held = fails[tech] > counted / 2
        v.add(Comparison(f"{tech}-x-in-most", where, HOLDS if held else CONTRADICTED,
                         f"{fails[tech]} of {counted} slices: {tech} runs out of memory with gpt2L on one VM", (),
                         tuple(slices_), None if held else gap, what))
    what = "gpt2L fits no technique on one VM in most slices"
    gap = 1 / min(fits_at.values()) if fits_at else None
    held = none_fit > counted / 2
    v.add(Comparison("none-fits-in-most", where, HOLDS if held else CONTRADICTED,
                     f"{none_fit} of {counted} slices: no technique fits gpt2L on one VM", (), tuple(slices_),
                     None if held else gap, what))
    return v


def c4_observed(t: MemoryTable) -> Verdict:
    """Every run the paper reports as ran or failed (observed.RUNS), on the slices and models analysed:
    the analysis must say fits where it ran and out of memory where it failed. Where the paper's
    own observations disagree (same model, technique and GPU memory, different outcome), no
    analysis can match both: they are listed, not counted."""
    v = Verdict("C4.observed", "The memory analysis reproduces which of the paper's runs ran and which ran out "
                               "of memory.")
    conflicts = observed.conflicts()
    analysed = {(m, s) for (m, _, s, _) in t.index}
    for (s, placement, model, tech), ran in sorted(observed.RUNS.items()):
        if (model, s) not in analysed or s not in t.slices:
            continue
        sl = t.slices[s]
        vms = tuple(vm.name for vm in sl.vms) if placement == observed.FOUR_GPUS else (sl.vms[0].name,)
        r = t.index.get((model, tech, s, vms))
        what = f"{model} on {placement}: {tech} {'ran' if ran else 'failed'}"
        key, where = f"{model}:{tech}-{'ran' if ran else 'failed'}", f"{s}:{placement.replace(' ', '-')}"
        line = f"{s}: {what} in the paper; the analysis: {gib(r)}"
        hardware_key = (model, tech, observed.gpu_memory(s, placement))
        if hardware_key in conflicts:
            v.notes.append(f"{line} (the paper's own runs disagree on this hardware: "
                           + ", ".join(f"{w} {'ran' if x else 'failed'}" for w, x in conflicts[hardware_key])
                           + "; not counted)")
            continue
        v.add(_mem_unusable(key, where, (s,), what, line, r)
              or _outcome(t, r, "ok" if ran else "oom", key, where, (s,), what, line))
    return v


MEMORY_CLAIMS = (c4_most, c4_least, c4_fails_first, c4_zero2_only, c4_gpt2l_one_vm, c4_observed)


def judge_memory(records_: list[dict], slices=()) -> list[Verdict]:
    table = MemoryTable(records_, slices)
    return [claim(table) for claim in MEMORY_CLAIMS]
