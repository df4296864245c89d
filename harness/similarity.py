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
nearest the targets, in the least-squares sense on their logarithms over the four techniques, and
reports both side by side so that the match can be checked. Two knobs cannot match eight groups
whose ratios differ between the models: worst_ratio says how far the nearest match still is.
"""
import math
from dataclasses import dataclass, field, replace

import scipy.optimize

from harness import costmodel
from harness.config import GPTConfig, Setup, Technique
from harness.netmodel import Network
from harness.slices import Slice

def groups(technique: str, sl: Slice, cfg: GPTConfig, setup: Setup, net: Network | None = None,
           devices: costmodel.Devices | None = None) -> dict[str, float]:
    """The three groups of one technique on all VMs of `sl`, from the cost model."""
    vms = tuple(vm.name for vm in sl.vms)

    def comm(p: costmodel.Prediction) -> float:
        return p.terms["collectives"] + p.terms["pipeline_transfers"]

    here = costmodel.predict(technique, sl, vms, cfg, setup, net, devices)
    still = costmodel.predict(technique, sl.with_rtt(0.0), vms, cfg, setup, net, devices)
    compute = here.terms["compute"]
    return {"latency": (comm(here) - comm(still)) / compute, "bandwidth": comm(still) / compute,
            "bubble": here.terms["pipeline_bubble"] / compute}


@dataclass
class Scaled:
    slice: str
    paper_rtt_ms: float
    rtt_ms: float  # the emulated link's RTT that matches the groups
    link_bytes_per_s: float  # and its rate
    target: dict = field(default_factory=dict)  # technique -> groups at paper scale
    model: dict = field(default_factory=dict)  # technique -> groups of the scale model on that link

    def worst_ratio(self, group: str) -> float:
        """The largest factor between a technique's group here and at paper scale; infinite where
        the paper has the group and the scale model has none of it, or where nothing compares."""
        ratios = [self.model[t][group] / self.target[t][group] for t in self.target if self.target[t][group] > 0]
        return max((max(r, 1 / r) if r > 0 else math.inf for r in ratios), default=math.inf)

    def to_dict(self) -> dict:
        return {"slice": self.slice, "paper_rtt_ms": self.paper_rtt_ms, "rtt_ms": self.rtt_ms,
                "link_bytes_per_s": self.link_bytes_per_s, "target": self.target, "model": self.model,
                "worst_ratio": {g: self.worst_ratio(g) for g in ("latency", "bandwidth")}}


def scale(sl: Slice, paper_cfg: GPTConfig, paper_setup: Setup, cfg: GPTConfig, setup: Setup, net: Network,
          devices: costmodel.Devices, techniques=tuple(Technique), rtt_ms=(0.05, 5000.0),
          rate=(1e6, 1.5e9)) -> Scaled:
    """The RTT and link rate at which `cfg` with `setup` on `devices` and `net` (the CPU scale
    model on the emulated link) has the latency and bandwidth groups of `paper_cfg` on `sl` at the
    slice's own RTT and rate: least squares on the groups' logarithms, over the techniques, within
    the bounds the emulated link can carry."""
    target = {t: groups(t, sl, paper_cfg, paper_setup) for t in techniques}

    def model_at(x) -> tuple[Slice, Network]:
        return sl.with_rtt(math.exp(x[0])), replace(net, link_bytes_per_s=math.exp(x[1]))

    def error(x) -> float:
        at, link = model_at(x)
        total = 0.0
        for t in techniques:
            got = groups(t, at, cfg, setup, link, devices)
            for g in ("latency", "bandwidth"):
                if target[t][g] > 0:
                    total += (math.log(max(got[g], 1e-12)) - math.log(target[t][g])) ** 2
        return total

    bounds = [tuple(math.log(b) for b in rtt_ms), tuple(math.log(b) for b in rate)]
    if sl.rtt_ms <= 0:  # one site, no delay to scale: the rate alone
        bounds[0] = (math.log(rtt_ms[0]),) * 2
    start = [min(max(math.log(max(sl.rtt_ms, rtt_ms[0])), bounds[0][0]), bounds[0][1]),
             min(max(math.log(net.link_bytes_per_s), bounds[1][0]), bounds[1][1])]
    best = scipy.optimize.minimize(error, start, method="Powell", bounds=bounds, options={"xtol": 1e-3})
    at, link = model_at(best.x)
    return Scaled(sl.name, sl.rtt_ms, at.rtt_ms, link.link_bytes_per_s, target,
                  {t: groups(t, at, cfg, setup, link, devices) for t in techniques})
