"""Beyond the paper: the five techniques, DiLoCo with the paper's four, timed to one target loss on
every slice's link, and the two claims that answer which to use across sites today.

    B1  Above some RTT, DiLoCo reaches the target loss before Pipeshard (the crossover RTT, with
        its interval from the repeats).
    B2  DiLoCo sends less data across the slow link per target reached, by a measured factor.

The sweep (sweep()), on each slice's own link (its RTT as given, the collectives combined as on
GPUs): on each slice, the target is the held-out loss Data on the slice's first VM
reaches after `reference_steps` steps (harness.experiments.time_to_loss); then every technique on
all the slice's VMs trains to it, `repeats` times, each from the untrained model, its held-out loss
measured every `eval_every` steps, at most `cap_steps` steps. A run that does not reach the target
within the cap is "not reached", a result of its own; a failure is an error and never a time.

These claims are kept apart from the paper's (claims.md's section "Beyond the paper", beyond.json),
with the same rules: comparisons with IDs, a difference counts only beyond the repeats' robust
spread (harness.runs.noise), and a crash is never a result.
"""
import dataclasses
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from harness import schemas
from harness.errors import BadInput
from harness.experiments.time_to_loss import HELD_OUT, ToTarget, target_loss, to_target
from harness.paper.claims import CONTRADICTED, HOLDS, NOISE, NOT_SHOWN, Comparison, Verdict, compare_times
from harness.runs import noise
from harness.runs.trials import ALL_VMS, Runner, Trial
from harness.techniques import technique as technique_named

TECHNIQUES = ("Data", "ZeRO2", "Shard", "Pipeshard", "DiLoCo")
# The fewest repeats whose median absolute deviation one stray run cannot set (with two it is half
# their range, and with one there is no spread at all): fewer, and no difference counts.
MIN_REPEATS = 3
B1 = "B1.crossover"
B2 = "B2.bytes"
STATEMENTS = {
    B1: "Above some RTT, DiLoCo reaches the target loss before Pipeshard.",
    B2: "DiLoCo sends less data across the slow link per target reached than Data and Pipeshard.",
}


@dataclass(frozen=True)
class Settings:
    reference_steps: int = 20  # Data on one VM sets the target after this many steps
    eval_every: int = 2  # finer would time the target more closely, and cost an evaluation more often
    cap_steps: int = 60
    repeats: int = 3
    sync_every: int = 4  # DiLoCo's inner steps per outer step (H)
    techniques: tuple = TECHNIQUES
    # Collectives combined as XLA does on GPUs (Budget.combine), not the CPU runtime's one per
    # tensor, each of which would pay the RTT: across sites that is what a user's GPUs would do.
    combine: bool = True
    # DiLoCo's other settings (harness/techniques/diloco.py: outer_lr, outer_momentum, nesterov,
    # fragments, delay, mix); none given: its own defaults.
    diloco: dict = field(default_factory=dict)

    @property
    def diloco_options(self) -> dict:
        return {"sync_every": self.sync_every, **self.diloco}

    def override(self, given: list[str]) -> "Settings":
        """These settings with NAME=VALUE pairs (`reproduce --beyond-set`): a field of Settings, or
        diloco.OPTION for one of DiLoCo's; techniques as a comma-separated list."""
        changed, diloco = {}, dict(self.diloco)
        names = [f.name for f in dataclasses.fields(self) if f.name != "diloco"]
        for pair in given:
            name, sep, text = pair.partition("=")
            name, text = name.strip(), text.strip()
            if not sep or not name or not text:
                raise BadInput(f"--beyond-set {pair!r}: expected NAME=VALUE")
            if name.startswith("diloco."):
                option = name.removeprefix("diloco.")
                if option not in DILOCO_OPTIONS:
                    raise BadInput(f"--beyond-set {name}: DiLoCo has no option {option!r}; expected one of "
                                   f"{', '.join('diloco.' + o for o in DILOCO_OPTIONS)}")
                diloco[option] = _value(name, text, DILOCO_OPTIONS[option])
            elif name in names:
                kind = type(getattr(self, name))
                changed[name] = tuple(t.strip() for t in text.split(",")) if kind is tuple else _value(name, text, kind)
            else:
                raise BadInput(f"--beyond-set {name}: no such setting; expected one of {', '.join(names)} or "
                               "diloco.OPTION")
        return dataclasses.replace(self, **changed, diloco=diloco)

    def budget(self, base):
        """The claims' budget (model, batch, precision) with the sweep's collectives."""
        return dataclasses.replace(base, combine=self.combine)

    def check(self, model_cfg=None) -> None:
        """Refuses bad settings in one line; with model_cfg, also what that model cannot train."""
        for name in ("reference_steps", "eval_every", "sync_every"):
            if getattr(self, name) < 1:
                raise BadInput(f"beyond: {name} must be at least 1, got {getattr(self, name)}")
        if self.repeats < MIN_REPEATS:
            raise BadInput(f"beyond: repeats must be at least {MIN_REPEATS} (a robust spread of the times to "
                           f"target), got {self.repeats}")
        if self.cap_steps < max(2, self.reference_steps):
            raise BadInput(f"beyond: cap_steps must be at least reference_steps ({self.reference_steps}) and 2, "
                           f"got {self.cap_steps}")
        unknown = sorted(set(self.techniques) - set(TECHNIQUES))
        if unknown:
            raise BadInput(f"beyond: unknown technique(s) {', '.join(unknown)}; expected some of {', '.join(TECHNIQUES)}")
        twice = sorted({t for t in self.techniques if self.techniques.count(t) > 1})
        if twice or not self.techniques:
            raise BadInput(f"beyond: techniques must name each of {', '.join(TECHNIQUES)} at most once, and one at "
                           f"least; got {', '.join(self.techniques) or 'none'}")
        foreign = sorted(set(self.diloco) - set(DILOCO_OPTIONS))
        if foreign:
            raise BadInput(f"beyond: DiLoCo has no option {', '.join(foreign)}; expected some of "
                           f"{', '.join(DILOCO_OPTIONS)}")
        if "DiLoCo" in self.techniques:
            try:
                diloco = technique_named("DiLoCo", **self.diloco_options)  # its own checks, before anything runs
                if model_cfg is not None:
                    diloco.fits(model_cfg)
            except BadInput as e:
                raise BadInput(f"beyond: {e}") from None

    @property
    def runner_options(self) -> dict:
        return {"held_out": HELD_OUT, "schedule_steps": self.cap_steps,
                "options": {"DiLoCo": self.diloco_options}}


# What --beyond-set may give DiLoCo, with the type each is read as.
DILOCO_OPTIONS = {"outer_lr": float, "outer_momentum": float, "nesterov": bool, "fragments": int, "delay": int,
                  "mix": float}


def _value(name: str, text: str, kind: type):
    """A setting's text as its type, or a one-line error naming it."""
    try:
        if kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        return kind(text)
    except ValueError:
        raise BadInput(f"--beyond-set {name}={text}: expected {'true or false' if kind is bool else kind.__name__}") \
            from None


@dataclass
class Sweep:
    settings: Settings
    budget: dict = field(default_factory=dict)  # the runner's (model, batch, precision, collectives)
    rtt_ms: dict = field(default_factory=dict)  # slice -> its link's RTT, as measured by the runs
    targets: dict = field(default_factory=dict)  # slice -> target held-out loss
    results: list = field(default_factory=list)  # ToTarget, each with its repeat

    def to_dict(self) -> dict:
        return {"settings": {**self.settings.__dict__, "techniques": list(self.settings.techniques)},
                "budget": self.budget, "rtt_ms": self.rtt_ms, "targets": self.targets,
                "results": [r.to_dict() for r in self.results]}


def sweep(runner: Runner, settings: Settings, keep=lambda result: None) -> Sweep:
    """Every technique of settings on every slice of the runner (made with settings.runner_options),
    timed to the slice's target; keep(result) gets each result as it comes, failed ones too."""
    settings.check()
    done = Sweep(settings, dataclasses.asdict(runner.budget))
    for sl in runner.slices.values():
        done.targets[sl.name] = target_loss(runner, sl, settings.reference_steps)
        for repeat in range(settings.repeats):
            for technique in settings.techniques:
                result = to_target(runner, Trial.on(sl, technique), done.targets[sl.name], settings.eval_every,
                                   settings.cap_steps)
                result.repeat = repeat
                done.results.append(result)
                keep(result)
        done.rtt_ms[sl.name] = runner.rtt_ms.get(sl.name, sl.rtt_ms)
    return done


def append(path, result: ToTarget) -> None:
    """One result as a line of JSON (not a trial record: its own shape, ToTarget's)."""
    with open(path, "a") as f:
        f.write(json.dumps(result.to_dict()) + "\n")


# -- the table --------------------------------------------------------------------------------------
def runs(doc: dict, technique: str, slice_name: str) -> list[dict]:
    return [r for r in doc["results"] if r["technique"] == technique and r["slice"] == slice_name
            and r["vms"] == ALL_VMS]


def times(doc: dict, technique: str, slice_name: str) -> list[float] | None:
    """Each repeat's seconds to the target, infinite where it was not reached; None where a repeat
    failed, is missing or is there twice, or its time is not a number: such a run is never a time."""
    rs = runs(doc, technique, slice_name)
    if sorted(r.get("repeat") for r in rs) != list(range(doc["settings"]["repeats"])):
        return None
    if any(r["status"] not in ("reached", "not reached") for r in rs):
        return None
    ts = [r["seconds"] if r["status"] == "reached" else math.inf for r in rs]
    if not all(isinstance(t, (int, float)) and (math.isinf(t) or (math.isfinite(t) and t >= 0)) for t in ts):
        return None
    return ts


def unjudgeable(doc: dict, techniques) -> str | None:
    """Why no comparison of these techniques can be made in this sweep at all (it did not run one of
    them, or ran too few repeats for a spread), or None. Not a crash: nothing failed."""
    absent = [t for t in techniques if t not in doc["settings"]["techniques"]]
    if absent:
        return f"{' and '.join(absent)} {'was' if len(absent) == 1 else 'were'} not among this sweep's techniques"
    repeats = doc["settings"]["repeats"]
    if not (isinstance(repeats, int) and repeats >= MIN_REPEATS):
        return f"the sweep ran {repeats} repeats, fewer than the {MIN_REPEATS} a robust spread needs"
    return None


def spread(ts: list[float]) -> float:
    finite = [t for t in ts if math.isfinite(t)]
    return noise.spread(finite) if len(finite) == len(ts) else 0.0


def show(ts: list[float] | None) -> str:
    if ts is None:
        return "error"
    if not all(math.isfinite(t) for t in ts):
        return f"not reached in {sum(not math.isfinite(t) for t in ts)} of {len(ts)}"
    return f"{statistics.median(ts):.3g} s ({min(ts):.3g}-{max(ts):.3g})"


# -- B1: the crossover RTT -----------------------------------------------------------------------------
def _before(doc: dict, a: str, b: str, slice_name: str) -> Comparison:
    """Does a reach the target before b on the slice, beyond the repeats' spread of both?"""
    key, where = f"{a}<{b}", slice_name
    unjudged = unjudgeable(doc, (a, b))
    if unjudged:
        return Comparison(key, where, NOT_SHOWN, f"{where}: time to target: not shown, {unjudged}", (), (slice_name,))
    ta, tb = times(doc, a, slice_name), times(doc, b, slice_name)
    line = f"{where}: time to target: {a} {show(ta)} vs {b} {show(tb)}"
    if ta is None or tb is None:
        crashed = tuple(t for t, ts in ((a, ta), (b, tb)) if ts is None)
        return Comparison(key, where, NOT_SHOWN, line + ": not shown, a run failed, is missing, is there twice or "
                          "has no time", crashed,
                          (slice_name,))
    ma, mb = statistics.median(ta), statistics.median(tb)
    if math.isinf(ma) and math.isinf(mb):
        return Comparison(key, where, NOT_SHOWN, line + ": not shown, neither reached the target", (), (slice_name,))
    if math.isinf(ma) or math.isinf(mb):
        status = HOLDS if math.isinf(mb) else CONTRADICTED
        return Comparison(key, where, status, line, (), (slice_name,), 0.0 if status == HOLDS else math.inf)
    band = spread(ta) + spread(tb)
    status = compare_times(ma, mb, band)
    words = {HOLDS: f", {100 * (1 - ma / mb):.0f}% less", NOISE: f", within the repeats' spread (±{band:.2g} s)",
             CONTRADICTED: f", {100 * (ma / mb - 1):.0f}% more"}[status]
    return Comparison(key, where, status, line + words, (), (slice_name,), ma / mb)


def crossing(points: list[tuple[float, float]]) -> tuple[str, float | None]:
    """Where a difference d(RTT) (b's time less a's; points sorted by RTT) turns positive for good:
    ("below", rtt0) if it is positive everywhere, ("above", last rtt) if it ends not positive,
    else ("at", the RTT by linear interpolation between the last point at or under zero and the
    next; that next point's RTT where either is infinite)."""
    last = max((i for i, (_, d) in enumerate(points) if not d > 0), default=None)
    if last is None:
        return "below", points[0][0]
    if last == len(points) - 1:
        return "above", points[-1][0]
    (r0, d0), (r1, d1) = points[last], points[last + 1]
    if not (math.isfinite(d0) and math.isfinite(d1)):
        return "at", r1
    return "at", r0 + (r1 - r0) * (0 - d0) / (d1 - d0)


def crossover(doc: dict, a: str = "DiLoCo", b: str = "Pipeshard") -> dict | None:
    """The RTT above which a reaches the target before b: from the medians of the repeats, and its
    interval from their extremes (b's slowest against a's fastest, and the reverse). None where a
    slice has no time for either (an error), or the sweep cannot compare them (unjudgeable)."""
    if unjudgeable(doc, (a, b)):
        return None
    d_mid, d_low, d_high = [], [], []
    for name, rtt in sorted(doc["rtt_ms"].items(), key=lambda kv: kv[1]):
        ta, tb = times(doc, a, name), times(doc, b, name)
        if ta is None or tb is None:
            return None
        d_mid.append((rtt, _less(statistics.median(tb), statistics.median(ta))))
        d_low.append((rtt, _less(max(tb), min(ta))))  # the most favourable to a: the earliest crossing
        d_high.append((rtt, _less(min(tb), max(ta))))
    return {"a": a, "b": b, "estimate": crossing(d_mid), "low": crossing(d_low), "high": crossing(d_high)}


def _less(x: float, y: float) -> float:
    if math.isinf(x) and math.isinf(y):
        return 0.0  # neither reached: no side
    return x - y


def describe(c: dict) -> str:
    def one(kind, rtt):
        return {"below": f"at or below {rtt:.3g} ms", "above": f"above {rtt:.3g} ms", "at": f"{rtt:.3g} ms"}[kind]
    return (f"crossover RTT for {c['a']} before {c['b']}: {one(*c['estimate'])} "
            f"(interval {one(*c['low'])} to {one(*c['high'])})")


def b1(doc: dict) -> Verdict:
    """Judged on the slice of the longest RTT: DiLoCo first there, beyond the repeats' spread,
    means the crossover lies within the run's RTTs or below them. The other slices place it (notes)."""
    v = Verdict(B1, STATEMENTS[B1])
    by_rtt = sorted(doc["rtt_ms"], key=doc["rtt_ms"].get)
    if not by_rtt:
        return v
    v.add(_before(doc, "DiLoCo", "Pipeshard", by_rtt[-1]))
    v.notes.extend(_before(doc, "DiLoCo", "Pipeshard", name).line for name in by_rtt[:-1])
    c = crossover(doc)
    if c is not None:
        v.notes.append(describe(c))
    return v


# -- B2: bytes across the link per target --------------------------------------------------------------
def reached(doc: dict, technique: str, slice_name: str) -> list[dict] | None:
    """Its runs on the slice where every repeat is there once and reached the target; else None."""
    ts = times(doc, technique, slice_name)
    return runs(doc, technique, slice_name) if ts is not None and all(map(math.isfinite, ts)) else None


def _bytes(doc: dict, technique: str, slice_name: str) -> list[int] | None:
    rs = reached(doc, technique, slice_name)
    if rs is None or not all(isinstance(r.get("link_bytes"), int) and r["link_bytes"] >= 0 for r in rs):
        return None
    return [r["link_bytes"] for r in rs]


def b2(doc: dict) -> Verdict:
    v = Verdict(B2, STATEMENTS[B2])
    for name in sorted(doc["rtt_ms"], key=doc["rtt_ms"].get):
        mine = _bytes(doc, "DiLoCo", name)
        for other in ("Data", "Pipeshard"):
            theirs = _bytes(doc, other, name)
            key = f"DiLoCo<{other}"
            unjudged = unjudgeable(doc, ("DiLoCo", other))
            if unjudged:
                v.add(Comparison(key, name, NOT_SHOWN, f"{name}: bytes per target: not shown, {unjudged}", (), (name,)))
                continue
            if mine is None or theirs is None:
                v.add(Comparison(key, name, NOT_SHOWN, f"{name}: bytes per target: not shown, a run did not reach "
                                 "the target, failed, or crossed no counted link", (), (name,)))
                continue
            # Bytes are counted, not timed: their spread is the repeats' own, and a difference
            # beyond both ranges counts.
            status = HOLDS if max(mine) < min(theirs) else CONTRADICTED if min(mine) > max(theirs) else NOISE
            factor = statistics.median(theirs) / statistics.median(mine) if statistics.median(mine) else math.inf
            said = ("DiLoCo sent none" if factor == math.inf else f"{other} sent none" if factor == 0
                    else f"{factor:.3g}x less" if factor >= 1 else f"{1 / factor:.3g}x more")
            v.add(Comparison(key, name, status, f"{name}: bytes across the link per target: DiLoCo "
                             f"{statistics.median(mine) / 1e6:.3g} MB vs {other} {statistics.median(theirs) / 1e6:.3g} MB, "
                             f"{said}", (), (name,), 1 / factor if factor else math.inf))
    return v


def verdicts(doc: dict) -> list[Verdict]:
    return [b1(doc), b2(doc)]


# -- what predict takes from a sweep ------------------------------------------------------------------
def load(folder) -> dict:
    """A run folder's beyond.json, refused in one line where it is not one."""
    path = Path(folder) / "beyond.json"
    if not path.is_file():
        raise BadInput(f"--beyond-run {folder}: no beyond.json there (expected a run folder of reproduce --beyond)")
    try:
        doc = schemas.read(path, "beyond", finite=("rtt_ms",))
    except BadInput as e:
        raise BadInput(f"--beyond-run {e}") from None
    # What a schema cannot say: each result's slice is one the sweep measured an RTT on.
    stray = next((i for i, r in enumerate(doc["results"]) if r["slice"] not in doc["rtt_ms"]), None)
    if stray is not None:
        raise BadInput(f"--beyond-run {path}: field 'results[{stray}].slice' must be a slice of rtt_ms "
                       f"({', '.join(doc['rtt_ms']) or 'none'}), got {doc['results'][stray]['slice']!r}")
    return doc


def measured_factor(folder) -> dict:
    """tokens_factor of a run folder's sweep (`--beyond-run`), refused in one line where it has none."""
    factor = tokens_factor(load(folder))
    if factor is None:
        raise BadInput(f"--beyond-run {folder}: Data and DiLoCo did not both reach the target on any slice, "
                       "so the tokens DiLoCo needs against Data were not measured")
    return factor


def trained_options(factor: dict) -> dict:
    """The DiLoCo options a sweep's tokens factor was measured with (a sweep written before its
    other options were kept: its sync interval alone)."""
    return factor.get("options") or {"sync_every": factor["sync_every"]}


def trained_said(factor: dict) -> str:
    """The DiLoCo a tokens factor was measured with, for a summary line."""
    options = trained_options(factor)
    return f"{options['sync_every']} steps between syncs" + "".join(
        f", {k} {v}" for k, v in options.items() if k != "sync_every")


def tokens_factor(doc: dict) -> dict | None:
    """DiLoCo's tokens to the target over Data's (both on all VMs, medians of the repeats), per
    slice where both reached it every time, and their median: how much more data DiLoCo needs to
    learn as much. None where no slice has both."""
    per = {}
    for name in doc["rtt_ms"]:
        data, diloco = reached(doc, "Data", name), reached(doc, "DiLoCo", name)
        if data and diloco:
            per[name] = statistics.median(r["tokens"] for r in diloco) / statistics.median(r["tokens"] for r in data)
    if not per:
        return None
    settings = doc["settings"]
    return {"factor": statistics.median(per.values()), "per_slice": per, "sync_every": settings["sync_every"],
            "options": {"sync_every": settings["sync_every"], **settings.get("diloco", {})},
            "model": doc.get("budget", {}).get("model")}


def candidate(chosen: dict | None, diloco: dict, factor: dict) -> dict:
    """DiLoCo's trial against a selection's choice (their trial records), by the time to learn as
    much: each one's seconds per token (its median step over the tokens of a step), DiLoCo's
    times the tokens it needs over Data's (tokens_factor). Below 1, DiLoCo would learn as much
    sooner. It never changes the paper's decision: it is beyond the paper."""
    out = {"technique": "DiLoCo", "vms": diloco["cluster"]["vms_used"], "beyond_paper": True,
           "tokens_to_target": factor, "record_id": diloco["record_id"], "time_over_choice": None}

    def per_token(r):
        return r["timing"]["median_step_s"] / (r["batch"]["global_batch"] * r["batch"]["seq_len"])

    if diloco["status"] != "ok":
        return {**out, "reason": f"DiLoCo's trial: {diloco['status']}"}
    if chosen is None or chosen["status"] != "ok":
        return {**out, "reason": "the selection chose nothing that ran"}
    return {**out, "time_over_choice": per_token(diloco) * factor["factor"] / per_token(chosen),
            "choice": {"technique": chosen["technique"], "vms": chosen["cluster"]["vms_used"]}}


# -- the report ---------------------------------------------------------------------------------------
def markdown(doc: dict, judged: list[dict]) -> str:
    s = doc["settings"]
    slices = sorted(doc["rtt_ms"], key=doc["rtt_ms"].get)
    b = doc.get("budget", {})
    lines = ["## Beyond the paper", "",
             f"Kept apart from the paper's claims. Model {b.get('model')}, {b.get('batch_per_gpu')} sequences per GPU, "
             f"{b.get('precision')}, on each slice's own link, collectives "
             f"{'combined as on GPUs' if b.get('combine') else 'one per tensor'}. Every technique trained from the untrained model to the held-out "
             f"loss Data on the slice's first VM reaches after {s['reference_steps']} steps, measured every "
             f"{s['eval_every']} steps, at most {s['cap_steps']} steps, {s['repeats']} repeats; DiLoCo syncs every "
             f"{s['sync_every']} steps" + "".join(f", {k} {v}" for k, v in s.get("diloco", {}).items())
             + ". Time: the timed steps' seconds, median (min-max) over the repeats.", "",
             "| technique | " + " | ".join(f"{n} ({doc['rtt_ms'][n]:.3g} ms)" for n in slices) + " |",
             "|---|" + "---|" * len(slices)]
    for t in s["techniques"]:
        lines.append(f"| {t} | " + " | ".join(show(times(doc, t, n)) for n in slices) + " |")
    lines += ["", "Targets: " + ", ".join(f"{n} {doc['targets'][n]:.4g}" for n in slices), "",
              "| part | statement | verdict |", "|---|---|---|"]
    lines += [f"| {v['part']} | {v['statement']} | {v['status']} |" for v in judged]
    for v in judged:
        lines += ["", f"### {v['part']}", ""] + [f"- `{c['id']}`: {c['status']}: {c['line']}" for c in v["comparisons"]]
        lines += [f"- {n}" for n in v["notes"]]
    return "\n".join(lines) + "\n"


def judge(doc: dict) -> list[dict]:
    return [v.to_dict() for v in verdicts(doc)]


def counts(judged: list[dict]) -> str:
    return ", ".join(f"{v['part']} {v['status']}" for v in judged) or "nothing judged"


def figures(doc: dict, directory) -> list[str]:
    """beyond-<slice>.png: held-out loss against timed seconds, every technique (its first repeat);
    beyond-rtt.png: time to target against RTT."""
    import matplotlib  # deferred: matplotlib loads only when figures are drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: matplotlib loads only when figures are drawn

    written = []
    slices = sorted(doc["rtt_ms"], key=doc["rtt_ms"].get)
    for name in slices:
        fig, ax = plt.subplots(figsize=(6, 4))
        for t in doc["settings"]["techniques"]:
            rs = runs(doc, t, name)
            if rs and rs[0]["curve"]:
                ax.plot([c[1] for c in rs[0]["curve"]], [c[2] for c in rs[0]["curve"]], marker=".", label=t)
        ax.axhline(doc["targets"][name], color="grey", linestyle="--", label="target")
        ax.set(xlabel="timed seconds", ylabel="held-out loss", title=f"{name} ({doc['rtt_ms'][name]:.3g} ms)")
        ax.legend()
        path = directory / f"beyond-{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path.name)
    fig, ax = plt.subplots(figsize=(6, 4))
    for t in doc["settings"]["techniques"]:
        points = [(doc["rtt_ms"][n], times(doc, t, n)) for n in slices]
        points = [(rtt, statistics.median(ts)) for rtt, ts in points if ts and math.isfinite(statistics.median(ts))]
        if points:
            ax.plot(*zip(*points), marker="o", label=t)
    ax.set(xlabel="RTT (ms)", ylabel="seconds to target", title="time to target against RTT")
    ax.legend()
    path = directory / "beyond-rtt.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return written + [path.name]
