"""A backend's declared limits: data that excuses a contradiction only as far as the run itself
shows the cause.

A Limit names
- the comparisons it covers: a claim part, the comparisons' keys, and the slices they may be made
  on (harness.paper.claims: an ID is "<part>/<where>/<key>");
- a bound: the largest gap (harness.paper.claims.Comparison.gap: how many times against the paper the
  comparison goes) it excuses;
- a mechanism that the run being judged measures, with the threshold at which it shows.
A bound left unset is the mechanism's own factor as this run measured it (the figure for a
mechanism that shows at or above its threshold, its inverse for one that shows at or below): a
cause that weighs k times what it weighed in the paper explains a gap of at most k.
A contradiction is excused only when a limit covers it, its gap is within the bound, and this
run's own figure for the mechanism passes the threshold. Beyond the bound, on a slice the limit
does not name, or in a run whose measurement does not show the mechanism, it stays a
contradiction and its test fails. The reason printed is built from the run's figures and the
limit's own bound and threshold: no measured figure is written into a declaration.

The declarations themselves are in harness.paper.deviations.
"""
import math
from dataclasses import dataclass, field

from harness.analysis import costmodel, similarity
from harness.core import flops
from harness.core.config import Setup, model_config
from harness.errors import BadInput
from harness.paper.claims import DELTA
from harness.paper.figures import apart, times
from harness.platform import slices


@dataclass
class Run:
    """What a run measured, besides its comparisons, that a mechanism may read."""
    trials: list = field(default_factory=list)  # the trial records
    memory: list = field(default_factory=list)  # the compile-only memory records
    links: dict | None = None  # the links document (similarity.json): calibration and groups per slice

    def link_groups(self, slice_name: str) -> tuple[dict, dict] | None:
        """(this run's groups, the paper's groups) by technique on the slice's link, or None."""
        for s in (self.links or {}).get("slices", []):
            if s["slice"] == slice_name:
                return (s["model"] if self.links["mode"] == "similarity" else s["literal"]), s["target"]
        return None


@dataclass(frozen=True)
class Figure:
    value: float
    says: str  # the figure in words, with the run's numbers
    reach: float | None = None  # the largest gap it explains, where the mechanism works it out itself


class Mechanism:
    """A figure the run measures (measure), and the threshold at which the mechanism shows."""
    name = "mechanism"

    def measure(self, run: Run, comparison) -> Figure | None:
        """comparison: the claims.Comparison a Limit judges, or the group a GroupLimit judges (a miss
        of similarity.misses); None where nothing of the run gives the figure."""
        raise NotImplementedError

    def shows(self, value: float) -> bool:
        raise NotImplementedError

    def rule(self) -> str:
        """The threshold in words."""
        raise NotImplementedError

    def reach(self, value: float) -> float:
        """The largest gap a figure of `value` explains (a limit's bound when it states none)."""
        raise NotImplementedError


@dataclass(frozen=True)
class AtLeast(Mechanism):
    threshold: float

    def shows(self, value: float) -> bool:
        return value >= self.threshold

    def rule(self) -> str:
        return f"it shows at {self.threshold:g}x or more"

    def reach(self, value: float) -> float:
        return value


@dataclass(frozen=True)
class AtMost(Mechanism):
    threshold: float

    def shows(self, value: float) -> bool:
        return value <= self.threshold

    def rule(self) -> str:
        return f"it shows at {self.threshold:g}x or less"

    def reach(self, value: float) -> float:
        return 1 / value if value > 0 else math.inf


# -- mechanisms of the timed claims ---------------------------------------------------------------
COMMUNICATION = ("latency", "bandwidth")
GROUPS = (*COMMUNICATION, "bubble")


@dataclass(frozen=True)
class PipelineOverhead(AtLeast):
    """Pipeshard's bubble and communication, over its compute, on the slice's link in this run
    (the cost model calibrated on the run's own trials: similarity.json), against gpt2m's on the
    paper's slice. Where they weigh more than the paper's, Pipeshard loses ground that the paper's
    did not lose."""
    name = "Pipeshard's overhead against the paper's"

    def measure(self, run, comparison):
        figures = []
        for s in comparison.slices:
            groups = run.link_groups(s)
            if groups is None:
                return None
            (bubble, comm), (paper_bubble, paper_comm) = (
                (g["Pipeshard"]["bubble"], sum(g["Pipeshard"][k] for k in COMMUNICATION)) for g in groups)
            if paper_bubble + paper_comm <= 0:
                return None
            value = (bubble + comm) / (paper_bubble + paper_comm)
            figures.append(Figure(value, f"on {s}'s link Pipeshard's bubble comes to {bubble:.3g} of its compute and "
                                         f"its communication to {comm:.3g} in this run, gpt2m's in the paper to "
                                         f"{paper_bubble:.3g} and {paper_comm:.3g}: together "
                                         f"{apart(value, self.threshold, 2)}x"))
        return min(figures, key=lambda f: f.value, default=None)


def _step_inflation(run: Run, slice_name: str, technique: str) -> float | None:
    """How much longer, against its compute, the technique's step is on the slice's link in this
    run than gpt2m's was in the paper: (1 + its groups here) / (1 + its groups in the paper)."""
    groups = run.link_groups(slice_name)
    if groups is None:
        return None
    here, paper = (1 + sum(g[technique][k] for k in GROUPS) for g in groups)
    return here / paper


@dataclass(frozen=True)
class PaperScalePick(AtLeast):
    """Algorithm 1 as published, run on the cost model's T per GPU for gpt2m at the stated setup
    on the paper's own slice: how far Pipeshard's T falls short of step 4's (the best single VM's
    T x (1 + delta) over Pipeshard's; at 1 or more the published algorithm does not pick Pipeshard
    even at the paper's scale). Its reach multiplies that by how much longer this run's Pipeshard
    step is against its compute than gpt2m's was (the links document): the paper's own shortfall,
    as this run's link makes it larger. Its figure is the smaller of the two, so it shows only where
    both hold: the published algorithm falls short at the paper's scale, and this run's Pipeshard
    carries at least gpt2m's overhead (a run with less cannot lean on the paper's shortfall)."""
    name = "the paper-scale shortfall of Pipeshard's T per GPU"

    def measure(self, run, comparison):
        (s,) = comparison.slices
        inflation = _step_inflation(run, s, "Pipeshard")
        try:
            sl = slices.load(s)
        except BadInput:
            return None
        if inflation is None:
            return None
        gpt2m = model_config("gpt2m")
        tp = costmodel.predict("Pipeshard", sl, tuple(vm.name for vm in sl.vms), gpt2m).tflops_per_gpu
        tz = max(costmodel.predict(t, sl, (vm.name,), gpt2m).tflops_per_gpu for vm in sl.vms for t in ("Data", "Shard"))
        short = tz * (1 + DELTA) / tp
        return Figure(min(short, inflation),
                      f"at the paper's scale the cost model gives {s}'s best single VM {tz:.3g} TFLOP/s per GPU "
                      f"and Pipeshard on both VMs {tp:.3g}, a shortfall of {apart(short, self.threshold)}x after "
                      f"delta, and this run's Pipeshard step is {apart(inflation, self.threshold)}x as long "
                      f"against its compute as gpt2m's was (the smaller, "
                      f"{apart(min(short, inflation), self.threshold)}x, is the figure)",
                      short * inflation)


# -- mechanism of the memory claims ---------------------------------------------------------------
@dataclass(frozen=True)
class NearUsable(AtMost):
    """How near the boundary the analysis puts the run: its need over the GPU's usable memory (or
    the other way), from the run's memory records. Near it, the outcome turns on what the paper
    does not state (batch per GPU, microbatches, precision), which the analysis assumes."""
    name = "the need's distance from the usable memory"

    def measure(self, run, comparison):
        if comparison.gap is None or not math.isfinite(comparison.gap):
            return None
        need = apart(comparison.gap, self.threshold, 2)
        return Figure(comparison.gap, f"the analysis, at its stated setup, puts the need {need}x on the wrong side of "
                                      "the GPU's usable memory")


# -- mechanisms of the similarity groups -----------------------------------------------------------
def _first_trial(run: Run) -> dict | None:
    return next((r for r in run.trials if r["status"] == "ok"), None)


@dataclass(frozen=True)
class CollectiveFloor(AtLeast):
    """The lowest bandwidth group any link gives the technique in this run, against gpt2m's on the
    paper's slice (the links document: the cost model calibrated on the run's own trials).

    At no delay a technique's communication is its own wire pattern through the calibrated
    collectives: their fixed cost each, then their bytes at their rate. A link carries them no
    faster than that rate (similarity.scale searches at or below it), so the group at that rate is
    the floor; it is the scale model's bandwidth group on the paper's own link in the links
    document, which prices the collectives at their calibrated rate (at no delay the RTT does not
    count). The mechanism shows where that floor is itself beyond the tolerance: then no link
    brings the group within it. It explains a group as far as the tolerance from the floor; what
    lies beyond is a link the solver set slower for the other groups' sake, which it does not
    excuse, and so is a group below the paper's, which a slower link would raise."""
    name = "the lowest bandwidth group a link gives, against the paper's"

    def measure(self, run, miss=None):
        s = next((x for x in (run.links or {}).get("slices", []) if miss and x["slice"] == miss["slice"]), None)
        if s is None or miss["technique"] not in s["literal"] or miss["technique"] not in s["target"]:
            return None
        t = miss["technique"]
        floor, paper = s["literal"][t]["bandwidth"], s["target"][t]["bandwidth"]
        if not paper > 0:  # a factor against no paper group reaches anything: nothing to excuse by
            return None
        value = floor / paper
        return Figure(value, f"at no delay and the fastest rate its collectives carry{_collectives(run)}, {t}'s "
                             f"communication comes to {floor:.3g} of its compute, gpt2m's in the paper to {paper:.3g}: "
                             f"{apart(value, self.threshold)}x, the nearest any link brings it (a group within "
                             f"{similarity.TOLERANCE:g}x of that is as near as the link can make it)",
                      reach=similarity.TOLERANCE * value)


def _collectives(run: Run) -> str:
    """The calibrated collectives beside the link's own rate, in words ("" where the run has none)."""
    c = (run.links or {}).get("calibration") or {}
    if not (c.get("per_collective_s") and c.get("link_bytes_per_s")):
        return ""
    links = [x for x in (r["cluster"]["network"].get("link_bytes_per_s") for r in run.trials) if x]
    tcp = f", where one TCP flow over the link carries {max(links) / 1e6:.3g} MB/s" if links else ""
    return f" ({c['per_collective_s'] * 1e3:.2g} ms each, then {c['link_bytes_per_s'] / 1e6:.3g} MB/s{tcp})"


def _paper_setup(slice_gpus: int) -> tuple:
    """gpt2m at the claims' stated setup (harness.core.config.Setup), on a slice of slice_gpus GPUs."""
    s = Setup()
    return model_config("gpt2m"), s.batch_per_gpu * slice_gpus, s.micro_batches, s.seq_len or 1024


def _gradients_per_activation(params: int, global_batch: int, micro_batches: int, seq_len: int, width: int) -> float:
    """A step's gradients over one microbatch's activations at a stage boundary (same value size)."""
    return params / (global_batch / micro_batches * seq_len * width)


@dataclass(frozen=True)
class GradientsToActivations(AtMost):
    """The trials' model: its gradients over one microbatch's activations at a stage boundary,
    against gpt2m's at the stated setup. What Data sends per step grows with the first, what
    Pipeshard sends per tick with the second: at the link that gives Data the paper's latency
    group, Pipeshard's is off by the factor between the two models."""
    name = "gradients per microbatch of activations against gpt2m's"

    def measure(self, run, comparison=None):
        r = _first_trial(run)
        if r is None:
            return None
        m, b = r["model"], r["batch"]
        here = _gradients_per_activation(m["params"], b["global_batch"], b["micro_batches"], b["seq_len"], m["n_embd"])
        gpus = r["cluster"]["hosts"] * r["cluster"]["devices_per_host"] if len(r["cluster"]["vms_used"] or []) > 1 else None
        cfg, batch, micro, seq = _paper_setup(gpus or 2 * r["cluster"]["devices_per_host"])
        paper = _gradients_per_activation(flops.param_count(cfg), batch, micro, seq, cfg.n_embd)
        return Figure(here / paper, f"{m['name']}'s gradients are {here:.3g} times one microbatch's activations at a "
                                    f"stage boundary, gpt2m's {paper:.3g} times at the stated setup: "
                                    f"{apart(here / paper, self.threshold, 2)}x")


@dataclass(frozen=True)
class CrossingsPerStep(AtMost):
    """How many times per step Shard's program crosses the link (once per layer and microbatch, in
    small messages), for the trials' model and budget against gpt2m's at the stated setup."""
    name = "Shard's crossings per step against gpt2m's"

    def measure(self, run, comparison=None):
        r = _first_trial(run)
        if r is None:
            return None
        here = r["model"]["n_layer"] * r["batch"]["micro_batches"]
        paper = model_config("gpt2m").n_layer * Setup().micro_batches
        return Figure(here / paper, f"{r['model']['name']} crosses {r['model']['n_layer']} layers x "
                                    f"{r['batch']['micro_batches']} microbatches = {here} times a step, gpt2m "
                                    f"{paper}: {apart(here / paper, self.threshold, 2)}x")


# -- the declarations and their judgement ----------------------------------------------------------
def _judgement(why: str, mechanism: Mechanism, figure: Figure | None, bound: float | None, gap: float | None,
               against: str) -> dict:
    """Whether a gap is excused: within the bound (or the mechanism's reach) and the mechanism
    showing in this run; the reason, in words built from the run's figures."""
    shows = figure is not None and mechanism.shows(figure.value)
    limit = bound if bound is not None else (
        None if figure is None else figure.reach if figure.reach is not None else mechanism.reach(figure.value))
    within = gap is not None and limit is not None and gap <= limit
    measured = (f"{figure.says} ({mechanism.rule()})" if figure is not None
                else f"this run did not measure {mechanism.name}")
    went = f"how far it goes {against} is unknown" if gap is None else f"it goes {times(gap, limit)} {against}"
    stated = "its bound" if bound is not None else "what the mechanism's figure explains"
    if within and shows:
        reason = f"{why}: {measured}; {went}, within {stated}, {times(limit, gap)}"
    elif not shows:
        reason = f"a declared limit covers it but does not excuse it: {measured}"
    else:
        reason = (f"a declared limit covers it but does not excuse it: {went}, beyond {stated}"
                  + (f", {times(limit, gap)}" if limit is not None else ""))
    return {"bound": limit, "bound_stated": bound is not None, "gap": None if gap is None or not math.isfinite(gap) else gap,
            "mechanism": mechanism.name, "figure": None if figure is None else figure.value,
            "threshold": getattr(mechanism, "threshold", None), "shows": shows, "within_bound": within,
            "excused": within and shows, "reason": reason}


@dataclass(frozen=True)
class Limit:
    part: str
    keys: tuple[str, ...]
    slices: tuple[str, ...]
    mechanism: Mechanism
    why: str  # what this backend does differently, in words, with no figures
    bound: float | None = None  # the largest gap it excuses; None: the mechanism's reach

    def covers(self, comparison) -> bool:
        return (comparison.part == self.part and comparison.key in self.keys and bool(comparison.slices)
                and set(comparison.slices) <= set(self.slices))

    def judge(self, comparison, run: Run) -> dict:
        judged = _judgement(self.why, self.mechanism, self.mechanism.measure(run, comparison), self.bound,
                            comparison.gap, "against the paper")
        return {"part": self.part, "keys": list(self.keys), "slices": list(self.slices), **judged}


def apply(verdicts, limits, run: Run) -> None:
    """Judge every contradicted comparison a limit covers (Comparison.excuse)."""
    for v in verdicts:
        for c in v.comparisons:
            c.excuse = None
            if c.status != "contradicted":
                continue
            judged = [limit.judge(c, run) for limit in limits if limit.covers(c)]
            if judged:
                c.excuse = next((j for j in judged if j["excused"]), judged[0])


@dataclass(frozen=True)
class GroupLimit:
    """A declared limit of similarity scaling: a group (harness.analysis.similarity) of these techniques
    that the scale model cannot bring within the tolerance of the paper's, on these slices, as
    far as the bound (the factor off; None: the mechanism's reach), where the mechanism shows."""
    techniques: tuple[str, ...]
    group: str
    slices: tuple[str, ...]
    mechanism: Mechanism
    why: str
    bound: float | None = None

    def covers(self, miss: dict) -> bool:
        return miss["technique"] in self.techniques and miss["group"] == self.group and miss["slice"] in self.slices

    def judge(self, miss: dict, run: Run) -> dict:
        return _judgement(self.why, self.mechanism, self.mechanism.measure(run, miss), self.bound, miss["ratio"],
                          "off the paper's")


def judge_misses(misses: list[dict], limits, run: Run) -> list[dict]:
    """Each group beyond the tolerance with the judgement of the limit that covers it (None: none)."""
    out = []
    for m in misses:
        judged = [g.judge(m, run) for g in limits if g.covers(m)]
        out.append({**m, "excuse": next((j for j in judged if j["excused"]), judged[0] if judged else None)})
    return out
