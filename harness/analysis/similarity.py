"""Similarity scaling: the emulated link that puts the CPU scale model in the paper's regime, as a
wind tunnel matches a full-size aircraft's Reynolds number instead of its size.

What decides the paper's orderings is how a step's time splits, technique by technique, not its
absolute length. From the cost model, per technique (all VMs of a slice):
- latency group: the communication time that grows with the RTT (ring steps, slow start, a
  window's worth of bytes per round trip) over the compute time;
- bandwidth group: the communication time left at zero RTT (bytes over the link's rate, fixed
  costs) over the compute time;
- bubble group: Pipeshard's pipeline bubble over the compute time.
At paper scale (gpt2m on the slice's GPUs, the paper's stack) these are the targets. On the CPU the
same groups follow from the scale model's budget, a device's measured FLOP/s (a calibration
trial) and the emulated link's TCP; `scale` picks the RTT and the link rate whose groups are
nearest the targets: fewest groups beyond the tolerance, then least squares on their logarithms
over the four techniques; it reports both side by side so that the match can be checked. Two
knobs cannot match eight groups whose ratios differ between the models: worst_ratio says how far
the nearest match still is.
"""
import math
from dataclasses import dataclass, field, replace

import scipy.optimize

from harness.analysis import costmodel
from harness.analysis.netmodel import Network
from harness.core import flops
from harness.core.config import GPTConfig, Setup, Technique
from harness.platform.slices import Slice

STILL_RTT_MS = 1e-6  # a link with no delay to speak of, still crossed between the VMs


MATCHED = ("latency", "bandwidth")  # the groups the link is set to match; the bubble follows the budget
# How far a group may be from the paper's and still count as matched: a factor of 2 either way,
# stated before any run. Beyond it a technique's communication could weigh half or twice what it
# did in the paper against its compute, enough to reorder techniques whose times the paper shows
# within 2x of each other.
TOLERANCE = 2.0
# A group under this on both sides (a twentieth of the compute) counts as matched whatever the
# factor: it is within the noise of a step, too small to reorder anything.
NEGLIGIBLE = 0.05
# Points per axis of the grid the link's search starts from (RTT and rate, on their logarithms).
GRID_POINTS = 9
# A rate this close to what the collectives carry anyway is left unshaped: shaping it would
# change little but queue every window (netmodel.Network.shaped_bytes_per_s).
UNSHAPED = 0.9


def groups(technique: str, sl: Slice, cfg: GPTConfig, setup: Setup, net: Network | None = None,
           devices: costmodel.Devices | None = None) -> dict[str, float]:
    """The three groups of one technique on all VMs of `sl`, from the cost model."""
    vms = tuple(vm.name for vm in sl.vms)

    def comm(p: costmodel.Prediction) -> float:
        return p.terms["collectives"] + p.terms["pipeline_transfers"]

    here = costmodel.predict(technique, sl, vms, cfg, setup, net, devices)
    # Not zero: the cost model takes an RTT of 0 for VMs on one host (PCIe, no link).
    still = costmodel.predict(technique, sl.with_rtt(STILL_RTT_MS), vms, cfg, setup, net, devices)
    compute = here.terms["compute"]
    return {"latency": (comm(here) - comm(still)) / compute, "bandwidth": comm(still) / compute,
            "bubble": here.terms["pipeline_bubble"] / compute}


def geometry(cfg: GPTConfig, setup: Setup, gpus: int, stages: int = 2) -> dict[str, float]:
    """The proportions that set how a step splits whatever the hardware, for `cfg` at `setup` on
    `gpus` GPUs: what crosses a link per step against per microbatch (a step's gradients over one
    microbatch's activations at a stage boundary, both in values), how many times Shard's program
    crosses it per step (once per layer and microbatch), Pipeshard's bubble (its share of the
    ticks of a step on `stages` stages) and the embedding's share of the parameters (which Pipeshard's tied-embedding
    exchange carries). A geometrically similar scale model has gpt2m's."""
    params = flops.param_count(cfg)
    seq = setup.seq_len or cfg.n_positions
    micro = setup.batch_per_gpu * gpus / setup.micro_batches
    return {"gradients_per_activation": params / (micro * seq * cfg.n_embd),
            "crossings_per_step": cfg.n_layer * setup.micro_batches,
            "bubble": (stages - 1) / (setup.micro_batches + stages - 1),
            "embedding_share": cfg.vocab_size * cfg.n_embd / params}


def factor(got: float, want: float) -> float:
    """How many times off `got` is from `want`, either way (>= 1); infinite where one of them is
    zero and the other not."""
    if got <= 0 or want <= 0:
        return 1.0 if got == want else math.inf
    return max(got / want, want / got)


@dataclass
class Scaled:
    slice: str
    paper_rtt_ms: float
    rtt_ms: float  # the emulated link's RTT that matches the groups
    link_bytes_per_s: float  # and its rate
    target: dict = field(default_factory=dict)  # technique -> groups at paper scale
    model: dict = field(default_factory=dict)  # technique -> groups of the scale model on that link
    literal: dict = field(default_factory=dict)  # technique -> groups of the scale model on the paper's own link

    def ratio(self, technique: str, group: str, model: dict | None = None) -> float:
        """The factor (>= 1) between the scale model's group and the paper's; infinite where one
        of them has the group and the other none of it."""
        return factor((model or self.model)[technique][group], self.target[technique][group])

    def distance(self, model: dict | None = None) -> tuple[int, int, float]:
        """How far groups (the scale model's on the chosen link, by default) are from the paper's:
        the matched groups one side has and the other lacks, then the groups beyond the tolerance
        (misses), then the squared log-factors of the others, what `scale` minimises. Compare two
        as tuples: fewer missing groups first, then fewer misses."""
        ratios = [self.ratio(t, g, model) for t in self.target for g in MATCHED]
        return (sum(not math.isfinite(r) for r in ratios), len(self.misses(TOLERANCE, model)),
                sum(math.log(r) ** 2 for r in ratios if math.isfinite(r)))

    def worst_ratio(self, group: str) -> float:
        """The largest factor between a technique's group here and at paper scale; infinite where
        the paper has the group and the scale model has none of it, or where nothing compares."""
        ratios = [self.ratio(t, group) for t in self.target if self.target[t][group] > 0]
        return max(ratios, default=math.inf)

    def misses(self, tolerance: float, model: dict | None = None) -> list[dict]:
        """Every group (the scale model's on the chosen link, by default) more than `tolerance`
        times off the paper's, unless negligible on both sides."""
        model = model or self.model
        return [{"slice": self.slice, "technique": t, "group": g, "paper": self.target[t][g],
                 "this_run": model[t][g], "ratio": self.ratio(t, g, model)}
                for t in self.target for g in MATCHED if self.ratio(t, g, model) > tolerance
                and max(self.target[t][g], model[t][g]) >= NEGLIGIBLE]

    def to_dict(self) -> dict:
        return {"slice": self.slice, "paper_rtt_ms": self.paper_rtt_ms, "rtt_ms": self.rtt_ms,
                "link_bytes_per_s": self.link_bytes_per_s, "target": self.target, "model": self.model,
                "literal": self.literal, "worst_ratio": {g: self.worst_ratio(g) for g in MATCHED}}


def scale(sl: Slice, paper_cfg: GPTConfig, paper_setup: Setup, cfg: GPTConfig, setup: Setup, net: Network,
          devices: costmodel.Devices, techniques=tuple(Technique), rtt_ms=(0.05, 5000.0),
          rate=(1e6, 1.5e9)) -> Scaled:
    """The RTT and link rate at which `cfg` with `setup` on `devices` and `net` (the CPU scale
    model on the emulated link) has the latency and bandwidth groups of `paper_cfg` on `sl` at the
    slice's own RTT and rate: least squares on the groups' logarithms, over the techniques, within
    the bounds the emulated link can carry, leaving as few groups beyond the tolerance as it can.

    Least squares alone lets a group that no link brings near the paper's drag the others after
    it: with scale-small, Shard crosses the link too few times for any RTT that suits Data to give
    it the paper's latency group, and pulling the RTT its way put Pipeshard's latency group past
    the tolerance on every two-site slice. So the fit is made again with one group beyond the
    tolerance left out, the worst first, for as long as one is left, and the link kept is the
    nearest by Scaled.distance: fewest groups beyond the tolerance, then least squares over all.
    Where leaving groups out matches no more of the others, that is the first fit's link.

    A group that no link of the bounds brings within the tolerance (the scale model's bandwidth
    groups where its collectives are slow), once left out, is also fitted aimed at the nearest a
    link brings it, and that link is a candidate too: left free, such a group let the fit set
    whatever rate the other groups did not mind, and least squares over all groups then prefers
    the aimed link where it leaves no more groups beyond the tolerance. Every fit is also made
    with the link unshaped, and that link is a candidate too."""
    target = {t: groups(t, sl, paper_cfg, paper_setup) for t in techniques}

    def model_at(x) -> tuple[Slice, Network]:
        return sl.with_rtt(math.exp(x[0])), link_at(net, math.exp(x[1]))

    def model_groups(x) -> dict:
        at, link = model_at(x)
        return {t: groups(t, at, cfg, setup, link, devices) for t in techniques}

    def error_of(got: dict, left: frozenset, aims: dict) -> float:
        return sum((math.log(max(got[t][g], 1e-12)) - math.log(aims[t, g])) ** 2
                   for t in techniques for g in MATCHED if (t, g) in aims and (t, g) not in left)

    bounds = [tuple(math.log(b) for b in rtt_ms), tuple(math.log(b) for b in rate)]
    if sl.rtt_ms <= 0:  # one site, no delay to scale: the rate alone
        bounds[0] = (math.log(rtt_ms[0]),) * 2
    own = (min(max(math.log(max(sl.rtt_ms, rtt_ms[0])), bounds[0][0]), bounds[0][1]),
           min(max(math.log(net.link_bytes_per_s), bounds[1][0]), bounds[1][1]))
    grid = [(r, b) for r in _spaced(bounds[0]) for b in _spaced(bounds[1])]
    on_grid = [model_groups(x) for x in grid]
    paper = {(t, g): target[t][g] for t in techniques for g in MATCHED if target[t][g] > 0}
    # A group that no link of the grid brings within the tolerance may instead aim at the nearest
    # any of them brings it: left out as the others' fit goes on, it went wherever they took the
    # link (under load, a rate a third of what the collectives carried, for no group's sake).
    nearest = {k: min((m[k[0]][k[1]] for m in on_grid), key=lambda v: factor(v, want)) for k, want in paper.items()}
    out_of_reach = frozenset(k for k, v in nearest.items() if factor(v, paper[k]) > TOLERANCE)
    aim = {k: nearest[k] if k in out_of_reach else want for k, want in paper.items() if nearest[k] > 0}

    def fit(left: frozenset, aims: dict, within: list) -> tuple:
        # The groups jump where a flow's window stops covering the link's bandwidth-delay product,
        # so the error has steps: Powell started on the slice's own link has ended further off
        # than it started, and started elsewhere it settles in another basin. So it runs from the
        # own link and from the best point of a grid over the bounds, and the best point seen wins.
        def err(x):
            return error_of(model_groups(x), left, aims)

        def inside(x):
            return tuple(min(max(v, lo), hi) for v, (lo, hi) in zip(x, within))
        starts = [inside(own), inside(min(zip(grid, on_grid), key=lambda p: error_of(p[1], left, aims))[0])]
        ends = [tuple(scipy.optimize.minimize(err, x, method="Powell", bounds=within, options={"xtol": 1e-3}).x)
                for x in starts]
        return min(starts + ends, key=err)

    def scaled(x) -> Scaled:
        at, link = model_at(x)
        return on_link(sl, paper_cfg, paper_setup, cfg, setup, net, devices, at.rtt_ms, math.exp(x[1]), techniques)

    # Just under UNSHAPED every window starts to queue (netmodel), so the groups step there and a
    # fit started on the shaped side stays there: under load one settled at 0.9 of the
    # collectives' rate, shaped, at half the RTT of an unshaped link that matched as many groups
    # and was nearer by least squares. So every fit is also made on the unshaped link, the RTT
    # alone, and Scaled.distance judges between them.
    unshaped = [bounds[0], (math.log(net.link_bytes_per_s),) * 2]

    def fits(left: frozenset, aims: dict) -> list[Scaled]:
        return [scaled(fit(left, aims, within)) for within in (bounds, unshaped)]

    links, left = [scaled(own)], frozenset()
    while True:
        fitted, pinned = fits(left, paper)
        links += [fitted, pinned]
        if left & out_of_reach:  # the same fit with those out of reach aiming at their nearest
            links += fits(left - out_of_reach, aim)
        worst = max((m for m in fitted.misses(TOLERANCE) if (m["technique"], m["group"]) not in left),
                    key=lambda m: m["ratio"], default=None)
        if worst is None:
            break
        left |= {(worst["technique"], worst["group"])}
    return min(links, key=Scaled.distance)


def _spaced(bounds: tuple[float, float]) -> list[float]:
    """GRID_POINTS evenly spaced from one bound to the other (one point where they meet)."""
    lo, hi = bounds
    return [lo] if hi <= lo else [lo + (hi - lo) * i / (GRID_POINTS - 1) for i in range(GRID_POINTS)]


def on_link(sl: Slice, paper_cfg: GPTConfig, paper_setup: Setup, cfg: GPTConfig, setup: Setup, net: Network,
            devices: costmodel.Devices, rtt_ms: float, link_bytes_per_s: float, techniques=tuple(Technique),
            shaped_to: bool | None = None) -> Scaled:
    """The groups of `cfg` with `setup` on `devices` and `net` at the link of `rtt_ms` and
    `link_bytes_per_s` (and on the slice's own link), beside `paper_cfg`'s on `sl`: what `scale`
    reports of the link it picks, and what a finished run's records give of the link it ran on.
    shaped_to: whether the link was shaped to that rate, where a record says so; None: where the
    rate is under what the collectives carry anyway (link_at)."""
    at = sl.with_rtt(rtt_ms)
    link = link_at(net, link_bytes_per_s) if shaped_to is None else replace(
        net, shaped_bytes_per_s=link_bytes_per_s if shaped_to else None)
    return Scaled(sl.name, sl.rtt_ms, at.rtt_ms, link_bytes_per_s, {t: groups(t, sl, paper_cfg, paper_setup) for t in techniques},
                  {t: groups(t, at, cfg, setup, link, devices) for t in techniques},
                  {t: groups(t, sl, cfg, setup, net, devices) for t in techniques})


def shaped(net: Network, link_bytes_per_s: float) -> float | None:
    """The rate to shape the link to for a link of `link_bytes_per_s` under `net`'s collectives;
    None where that is about what they carry anyway (UNSHAPED)."""
    return link_bytes_per_s if link_bytes_per_s < UNSHAPED * net.link_bytes_per_s else None


def link_at(net: Network, link_bytes_per_s: float) -> Network:
    """`net` on an emulated link of `link_bytes_per_s`: shaped to that rate, or unshaped where
    the rate is about what the collectives carry anyway (`shaped`), so that the cost model queues
    each window only where the link would."""
    return replace(net, shaped_bytes_per_s=shaped(net, link_bytes_per_s))


def from_dict(d: dict) -> Scaled:
    """A slice's entry of the links document (Scaled.to_dict) as a Scaled."""
    return Scaled(d["slice"], d["paper_rtt_ms"], d["rtt_ms"], d["link_bytes_per_s"], d["target"], d["model"],
                  d["literal"])


def misses(doc: dict, tolerance: float = TOLERANCE) -> list[dict]:
    """Every group of the links document beyond the tolerance (Scaled.misses), slice by slice."""
    return [m for s in doc["slices"] for m in from_dict(s).misses(tolerance)]


def markdown(doc: dict) -> str:
    """The groups side by side: the paper's (gpt2m on the slice), the scale model's on the paper's
    own link, and on the link this run chose or would choose (similarity.json's document)."""
    c = doc["calibration"]
    lines = ["# Similarity: the groups that decide the orderings, paper scale vs this run", "",
             f"- links this run's trials ran on: {doc['mode']}",
             f"- the scale model's figures, from the trials {', '.join(c['from_trials'])}: "
             f"{c['device_flops'] / 1e9:.3g} GFLOP/s per device, {c['per_collective_s'] * 1e3:.3g} ms per collective, "
             f"TCP window {c['window_bytes'] / 1e3:.0f} kB, link {c['link_bytes_per_s'] / 1e6:.0f} MB/s, "
             f"collectives {'per tensor' if c['per_tensor'] else 'combined'}"
             + (f", TCP buffers of {c['tcp_buffer_bytes'] / 1e3:.0f} kB in each VM" if c.get("tcp_buffer_bytes") else "")
             + "".join(f"; on {k}'s scaled link the window is {v / 1e3:.0f} kB" for k, v in c.get("window_bytes_on", {}).items()),
             f"- tolerance: a factor of {doc['tolerance']:g} either way, for groups of {NEGLIGIBLE:g} or more; "
             f"{len(doc['misses'])} groups beyond it", "",
             "Groups are seconds of communication per second of compute in one step: latency (what grows "
             "with the RTT), bandwidth (what is left at no delay), bubble (Pipeshard's idle ticks).", ""]
    for s in doc["slices"]:
        lines += [f"## {s['slice']}: paper {s['paper_rtt_ms']:g} ms; scaled {s['rtt_ms']:.3g} ms at "
                  f"{s['link_bytes_per_s'] / 1e6:.3g} MB/s", "",
                  "| technique | group | paper (gpt2m) | scale model, paper's link | scale model, scaled link | factor off |",
                  "|---|---|---|---|---|---|"]
        for t, want in s["target"].items():
            for g in (*MATCHED, "bubble"):
                got, lit = s["model"][t][g], s["literal"][t][g]
                lines.append(f"| {t} | {g} | {want[g]:.3g} | {lit:.3g} | {got:.3g} | {factor(got, want[g]):.2f} |")
        lines.append("")
    if doc["misses"]:
        lines += ["## Groups beyond the tolerance", ""]
        for m in doc["misses"]:
            excuse = m.get("excuse")
            why = ("no declared limit covers it" if excuse is None else
                   f"{'excused' if excuse['excused'] else 'NOT excused'}: {excuse['reason']}")
            lines.append(f"- {m['slice']} {m['technique']} {m['group']}: {m['this_run']:.3g} against the paper's "
                         f"{m['paper']:.3g}, {m['ratio']:.3g}x off; {why}")
        lines.append("")
    return "\n".join(lines) + "\n"
