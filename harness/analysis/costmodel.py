"""Predict each technique on a slice before spending GPU hours: step time, 20 epochs, TFLOP/s, memory.

Each technique says what one step of it does (its cost, techniques/contract.py): its compute,
its pipeline's bubble, its memory, and its wire, every collective with the ranks it spans and its
bytes. This module prices the wire and never asks which technique it prices. A step is the sum of
separate terms, each shown in the output:
- compute: Alpa's FLOPs of the step (flops.py) at each GPU's peak times COMPUTE_EFFICIENCY, at
  the pace of the slowest GPU that takes part (data-parallel ranks wait for each other; a pipeline
  goes at the pace of its slowest stage);
- collectives: the ring collectives of the wire (all-reduce, reduce-scatter, all-gather), priced
  over the links they cross, NCCL's rings, their buckets back to back, with no overlap with compute
  (Alpa turned asynchronous all-reduce off: ALPA-WIRE.md) unless the technique says a collective
  runs alongside a step's compute (DiLoCo's delayed sync) and the network's runtime overlaps them
  (Network.overlaps_compute): then only what it takes beyond that;
- pipeline: the bubble, and the point-to-point transfers of the wire (activations forward,
  gradients back, scalars around the ring of stages) that the schedule cannot hide.

A transfer between VMs rides one TCP connection: its rate is capped by the link and by
window / RTT, and after an idle gap Linux restarts the connection from its initial window (slow
start after idle), so a transfer of n bytes takes the RTTs that slow start needs to move them.
Each ring step also waits one one-way latency for its predecessor.

Calibration constants, each named below with its source, are the only numbers not derived from
the model, the slice and the data sheets: COMPUTE_EFFICIENCY here, and netmodel's TCP and PCIe
figures. For the emulated CPU slices (validation), costmodel_check derives the core's rate and the
link's figures from named trials.
"""
from dataclasses import dataclass, field

from harness.analysis.netmodel import DEFAULT_LINK_GBPS, Network
from harness.core.config import GPTConfig, Setup, Technique
from harness.errors import BadInput
from harness.platform import slices
from harness.techniques.contract import PHASES, POINT_TO_POINT, REGISTRY, RING_PASS, SEND, Collective, Step, lookup

# Fraction of a GPU's peak a GPT-2 training step sustains. Megatron-LM reports 44-52% of A100
# peak for GPT training (Narayanan et al., SC'21); Alpa's GPT benchmarks are in the same range.
COMPUTE_EFFICIENCY = 0.45
BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass
class Prediction:
    technique: str
    vms: tuple[str, ...]
    gpus: int
    terms: dict  # seconds per step: compute, collectives, pipeline_bubble, pipeline_transfers
    step_s: float
    tflops_per_gpu: float  # Alpa's formula, as the paper's figures
    memory_bytes: float  # per GPU, on the fullest GPU
    memory_limit_bytes: float
    epochs_s: float | None
    notes: list = field(default_factory=list)
    wire: list = field(default_factory=list)  # every collective of the step, with its seconds (see wire_row)

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.memory_limit_bytes

    def to_dict(self) -> dict:
        return {"technique": self.technique, "vms": list(self.vms), "gpus": self.gpus,
                "terms_s": {k: round(v, 6) for k, v in self.terms.items()}, "step_s": self.step_s,
                "tflops_per_gpu": self.tflops_per_gpu, "memory_gb": self.memory_bytes / 1e9,
                "memory_limit_gb": self.memory_limit_bytes / 1e9, "fits": self.fits,
                "epochs_s": self.epochs_s, "notes": self.notes, "wire": self.wire}


@dataclass(frozen=True)
class Devices:
    """The GPUs of the VMs used: FLOP/s each sustains and its memory, in VM order."""
    flops: tuple[float, ...]
    memory: tuple[float, ...]
    per_vm: int

    @classmethod
    def of(cls, sl: slices.Slice, vms: tuple[str, ...], precision: str, efficiency: float = COMPUTE_EFFICIENCY):
        chosen = [vm for vm in sl.vms if vm.name in vms]
        return cls(tuple(vm.accelerator.peak_tflops(precision) * 1e12 * efficiency for vm in chosen),
                   tuple(vm.accelerator.usable_bytes for vm in chosen), sl.gpus_per_vm)


def network_for(sl: slices.Slice) -> Network:
    """The paper's stack on the slice's links: their slowest rate where one is set (slowest_gbps)."""
    return Network(link_bytes_per_s=(sl.slowest_gbps or DEFAULT_LINK_GBPS) * 1e9 / 8)


def price(c: Collective, net: Network, rtt: float) -> float:
    """Seconds of one step's `c`: a ring collective over the links its ranks span (across VMs at
    the RTT, inside one over PCIe), its buckets back to back; a point-to-point transfer from a cold
    start; a scalar passed around the ring of stages, one one-way latency a hop."""
    hosts, devices = c.over
    across = rtt if hosts > 1 else 0.0
    if c.kind == SEND:
        one = (net.per_collective_s + net.send_s(c.nbytes[0], across) if across
               else c.nbytes[0] / net.ici_bytes_per_s + net.ici_latency_s)
    elif c.kind == RING_PASS:
        one = hosts * devices * (across / 2 if across else net.ici_latency_s)
    else:
        one = net.buckets_s(list(c.nbytes), hosts, devices, across, phases=PHASES[c.kind])
    return c.times * one / c.every


def predict(technique: str, sl: slices.Slice, vms: tuple[str, ...], cfg: GPTConfig, setup: Setup = Setup(),
            net: Network | None = None, devices: Devices | None = None, epochs: int = 20,
            dataset_tokens: float = 0.0, options: dict | None = None) -> Prediction:
    """dataset_tokens: tokens in one epoch of the dataset, for the time of `epochs` (0: the step alone).
    options: the technique's own settings (DiLoCo's sync_every) instead of the analyses' for setup."""
    try:
        kind = lookup(technique)
    except KeyError:
        raise ValueError(f"unknown technique {technique!r}; expected one of {', '.join(REGISTRY)}") from None
    method = kind(micro_batches=setup.micro_batches, **options) if options else kind.configured(setup, sl, vms)
    devices = devices or Devices.of(sl, vms, setup.precision)
    hosts = len(vms)
    step = Step(cfg, net or network_for(sl), devices, hosts, sl.gpus_per_vm,
                rtt=max((sl.rtt_between(a, b) for a in vms for b in vms if a != b), default=0.0) / 1e3,
                seq=setup.seq_len or cfg.n_positions, batch=setup.batch_per_gpu * hosts * sl.gpus_per_vm,
                m=setup.micro_batches, value=BYTES[setup.precision],
                remat=method.remat, schedule=setup.pipeline_schedule)
    cost = method.cost(step)
    wire = [wire_row(c, price(c, step.net, step.rtt), cost.compute_s, step.net) for c in cost.wire]
    terms = {"compute": cost.compute_s,
             "collectives": sum(w["waited_s"] for w in wire if w["kind"] not in POINT_TO_POINT),
             "pipeline_bubble": cost.bubble_s,
             "pipeline_transfers": sum(w["waited_s"] for w in wire if w["kind"] in POINT_TO_POINT)}
    memory, notes = cost.memory_bytes, cost.notes
    step_s = sum(terms.values())
    steps_per_epoch = dataset_tokens / (step.batch * step.seq) if dataset_tokens else 0
    return Prediction(technique, tuple(vms), step.gpus, terms, step_s, step.total_flops / step_s / step.gpus / 1e12,
                      memory, min(devices.memory), step_s * steps_per_epoch * epochs if steps_per_epoch else None,
                      notes, wire)


def waited(c: Collective, seconds: float, compute_s: float, net: Network) -> float:
    """What of a collective's seconds per step the step waits for: all of them, or, for one that
    runs alongside a step's compute on a runtime that overlaps them, what each of its runs takes
    beyond that step's compute."""
    if not (c.overlaps and net.overlaps_compute):
        return seconds
    each = seconds * c.every / c.times
    return c.times * max(0.0, each - compute_s) / c.every


def wire_row(c: Collective, seconds: float, compute_s: float, net: Network) -> dict:
    """One collective of a step as predict reports it: what it carries, where, how often, how long,
    and how much of that the step waits for."""
    return {"kind": c.kind, "what": c.what, "bytes_per_rank": sum(c.nbytes), "buckets": len(c.nbytes),
            "vms": c.over[0], "gpus_per_vm": c.over[1], "crosses_vms": c.crosses_vms, "times": c.times,
            "per_microbatch": c.per_microbatch, "every_steps": c.every, "overlaps_compute": c.overlaps,
            "seconds": seconds, "waited_s": waited(c, seconds, compute_s, net)}


def placements(sl: slices.Slice) -> list[tuple[str, ...]]:
    """All VMs together, then each VM alone (a slice of one VM: just that)."""
    alone = [(vm.name,) for vm in sl.vms]
    return ([tuple(vm.name for vm in sl.vms)] if len(alone) > 1 else []) + alone


def predict_slice(sl: slices.Slice, cfg: GPTConfig, setup: Setup = Setup(), net: Network | None = None,
                  devices_for=None, epochs: int = 20,
                  dataset_tokens: float = 0.0) -> tuple[list[Prediction], list[dict]]:
    """Every technique on every placement; and those that cannot run there, with the reason."""
    out, cannot = [], []
    for vms in placements(sl):
        devices = devices_for(vms) if devices_for else None
        for t in Technique:
            try:
                out.append(predict(t, sl, vms, cfg, setup, net, devices, epochs, dataset_tokens))
            except BadInput as e:
                cannot.append({"technique": str(t), "vms": list(vms), "reason": str(e)})
    return out, cannot
