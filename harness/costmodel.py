"""Predict each technique on a slice before spending GPU hours: step time, 20 epochs, TFLOP/s, memory.

A step is the sum of separate terms, each shown in the output:
- compute: Alpa's FLOPs of the step (flops.py) at each GPU's peak times COMPUTE_EFFICIENCY, at
  the pace of the slowest GPU that takes part (data-parallel ranks wait for each other; a pipeline
  goes at the pace of its slowest stage);
- collectives: ring all-reduce, reduce-scatter and all-gather, priced over the links they cross.
  Data all-reduces the gradients and ZeRO2 reduce-scatters them and all-gathers the parameters,
  in buckets of 30 MiB sent back to back (XLA's GPU combiners; techniques/buckets.py); Shard, planned as
  Alpa plans it (the mesh seen as uniform, shard_parallel.choose), all-reduces activations four
  times per layer and microbatch on its tensor axis and gradients per layer and microbatch on its
  data axis (GSPMD puts them inside the layer and microbatch loops); Pipeshard all-reduces its
  stage gradients inside each VM and the tied embedding's gradient across VMs;
- pipeline: Pipeshard's bubble ((stages - 1) stage-times of idle in the GPipe schedule) and its
  point-to-point transfers (activations forward, gradients back, the loss and gradient norm around
  the ring of stages) that the schedule cannot hide.

A transfer between VMs rides one TCP connection: its rate is capped by the link and by
window / RTT, and after an idle gap Linux restarts the connection from its initial window (slow
start after idle), so a transfer of n bytes takes the RTTs that slow start needs to move them.
Each ring step also waits one one-way latency for its predecessor.

Calibration constants, each named below with its source, are the only numbers not derived from
the model, the slice and the data sheets: COMPUTE_EFFICIENCY here, and netmodel's TCP and PCIe
figures. For the emulated CPU slices (validation),
`cpu_calibration` derives the core's rate and the link's effective window from two named trials.
"""
from dataclasses import dataclass, field

from harness import flops, slices
from harness.config import GPTConfig, Setup, Technique
from harness.errors import BadInput
from harness.netmodel import DEFAULT_LINK_GBPS, Links, Network
from harness.techniques import mesh_shape
from harness.techniques import buckets
from harness.techniques.common import ClusterShape

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

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.memory_limit_bytes

    def to_dict(self) -> dict:
        return {"technique": self.technique, "vms": list(self.vms), "gpus": self.gpus,
                "terms_s": {k: round(v, 6) for k, v in self.terms.items()}, "step_s": self.step_s,
                "tflops_per_gpu": self.tflops_per_gpu, "memory_gb": self.memory_bytes / 1e9,
                "memory_limit_gb": self.memory_limit_bytes / 1e9, "fits": self.fits,
                "epochs_s": self.epochs_s, "notes": self.notes}


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
    return Network(link_bytes_per_s=(sl.bandwidth_gbps or DEFAULT_LINK_GBPS) * 1e9 / 8)


@dataclass(frozen=True)
class Step:
    """What every technique's terms are computed from: one step of `cfg` on the VMs used."""
    cfg: GPTConfig
    net: Network
    devices: Devices
    hosts: int
    d: int  # GPUs per VM
    rtt: float  # seconds, the largest between two of the VMs used
    seq: int
    batch: int  # global, sequences
    m: int  # microbatches
    value: int  # bytes per activation value
    remat: bool  # Pipeshard recomputes its stages
    schedule: str = "1f1b"  # Pipeshard's, which sets the microbatches a stage keeps

    @property
    def gpus(self) -> int:
        return self.hosts * self.d

    @property
    def total_flops(self) -> float:
        return flops.alpa_step_flops(self.cfg, self.batch, self.seq, recompute=self.remat)

    @property
    def slowest(self) -> float:
        return min(self.devices.flops)

    @property
    def params(self) -> int:
        return flops.param_count(self.cfg)

    @property
    def grad_bytes(self) -> float:
        return 4 * self.params  # gradients and the master weights stay float32


def _no_terms() -> dict:
    return {"compute": 0.0, "collectives": 0.0, "pipeline_bubble": 0.0, "pipeline_transfers": 0.0}


def gradient_buckets(cfg: GPTConfig, net: Network, threshold: int) -> list[float]:
    """Bytes of each collective that carries a step's float32 gradients: Alpa's tensors in buckets
    as GPUs combine them (techniques/buckets.py), or, on a per-tensor runtime, each tensor of this
    suite's scanned model alone."""
    if net.per_tensor:
        return [4 * n for n in flops.tensor_sizes(cfg, scanned=True)]
    sizes = [4 * n for n in flops.tensor_sizes(cfg)]
    return [sum(sizes[i] for i in group) for group in buckets.plan(sizes, threshold)]


def _data(s: Step) -> tuple[dict, float, list]:
    """An all-reduce per bucket of gradients, back to back; every GPU holds everything."""
    grads = gradient_buckets(s.cfg, s.net, buckets.ALL_REDUCE_COMBINE_BYTES)
    terms = {**_no_terms(), "compute": s.total_flops / s.gpus / s.slowest,
             "collectives": s.net.buckets_s(grads, s.hosts, s.d, s.rtt, phases=2)}
    state = 16 * s.params  # parameters, gradients, Adam's two moments, float32
    return terms, state + activations(s.cfg, s.batch / s.gpus / s.m, s.seq, s.value, 1), [f"{len(grads)} buckets"]


def _zero2(s: Step) -> tuple[dict, float, list]:
    """A reduce-scatter and an all-gather per bucket of gradients; gradients and moments split."""
    grads = gradient_buckets(s.cfg, s.net, buckets.REDUCE_SCATTER_COMBINE_BYTES)
    terms = {**_no_terms(), "compute": s.total_flops / s.gpus / s.slowest,
             "collectives": 2 * s.net.buckets_s(grads, s.hosts, s.d, s.rtt, phases=1)}
    # the whole model; its gradient and moments split (+ the full gradients before the scatter,
    # which on one GPU are the split ones)
    state = 4 * s.params + 12 * s.params / s.gpus + (4 * s.params if s.gpus > 1 else 0)
    return terms, state + activations(s.cfg, s.batch / s.gpus / s.m, s.seq, s.value, 1), [f"{len(grads)} buckets"]


def _shard(s: Step) -> tuple[dict, float, list]:
    """Planned as Alpa plans it (the mesh seen as uniform): activations all-reduced four times per
    layer and microbatch on the tensor axis, each parameter's gradient per layer and microbatch on
    the data axis (GSPMD puts them inside the loops)."""
    from harness.techniques import shard_parallel

    cfg, net, rtt, m = s.cfg, s.net, s.rtt, s.m
    plan, _, _ = shard_parallel.choose(ClusterShape(s.hosts, s.d), cfg, s.batch, s.seq, m, Links(), 1e12)
    t, data = plan.tensor_size, plan.data_size
    head = flops.head_flops(cfg, s.batch, s.seq)
    compute = ((s.total_flops - head) / (data * t) + head / data) / s.slowest
    block = flops.block_params(cfg)
    other = s.params - cfg.n_layer * block
    act_local = s.batch / data / m * s.seq * cfg.n_embd * s.value
    tensor_comm = 4 * cfg.n_layer * m * net.ring_s(act_local, plan.tensor[0], plan.tensor[1],
                                                   rtt if plan.tensor[0] > 1 else 0, 2)
    # 12 tensors per block, and the embeddings' and final LayerNorm's 4, per microbatch.
    on_data = lambda nbytes: net.ring_s(nbytes, plan.data[0], plan.data[1], rtt if plan.data[0] > 1 else 0, 2)
    data_comm = m * (cfg.n_layer * 12 * on_data(4 * block / t / 12) + 4 * on_data(4 * other / 4))
    local = cfg.n_layer * block / t + other
    memory = (8 * local + 8 * local / (data if plan.shard_optimizer else 1)
              + activations(cfg, s.batch / data / m, s.seq, s.value, t))
    terms = {**_no_terms(), "compute": compute, "collectives": tensor_comm + data_comm}
    return terms, memory, [f"plan (Alpa's, mesh seen as uniform): {plan}"]


def _pipeshard(s: Step) -> tuple[dict, float, list]:
    """GPipe over the stages the technique cuts: the slowest stage sets the pace, the bubble idles
    (stages - 1) stage-times, every tick moves activations forward and gradients back; inside a
    stage its GPUs all-reduce their gradients, and the tied embedding's crosses the VMs."""
    from harness.techniques.pipeshard import stage_sizes
    from harness.techniques.pipeshard_stages import in_flight

    cfg, net, m, d = s.cfg, s.net, s.m, s.d
    mesh = mesh_shape(Technique.PIPESHARD, s.hosts, d)
    stages, per_stage = mesh.hosts, mesh.devices_per_host
    head = flops.head_flops(cfg, s.batch, s.seq, recompute=s.remat)
    layer = (s.total_flops - head) / cfg.n_layer
    blocks = stage_sizes(cfg, stages, s.batch, s.seq)  # the cut the technique makes
    rates = [f * per_stage for f in s.devices.flops] if s.hosts > 1 else [s.devices.flops[0]] * d
    work = [n * layer + (head if i == stages - 1 else 0) for i, n in enumerate(blocks)]
    stage_time = max(w / m / r for w, r in zip(work, rates))  # one microbatch, forward and backward
    hop = s.rtt if s.hosts > 1 else 0.0
    act = s.batch / m * s.seq * cfg.n_embd * s.value  # one microbatch's activations at a layer boundary
    p2p = (net.per_collective_s + net.send_s(act / per_stage, hop) if hop
           else act / per_stage / net.ici_bytes_per_s + net.ici_latency_s)
    # the loss and the gradient norm, around the stages (one stage keeps them)
    ring = stages * (hop / 2 if hop else net.ici_latency_s) if stages > 1 else 0.0
    # Stages move in lockstep: every tick ends with a transfer forward, and its transpose in the
    # backward pass with one back, so each tick pays one transfer each way.
    transfers = (2 * (m + stages - 1) * p2p if stages > 1 else 0.0) + 2 * ring
    # The first stage keeps the embedding and the last the output head (tied: each a copy of one
    # matrix, whose gradients the two stages sum).
    vocab = cfg.vocab_size * cfg.n_embd
    ends = vocab if cfg.tie_embeddings else 2 * vocab
    stage_params = s.params if stages == 1 else (s.params - ends) / stages + vocab
    if stages == 1 or not cfg.tie_embeddings:
        tied = 0.0
    elif hop:
        tied = net.ring_s(4 * vocab, 2, 1, hop, 2)
    else:
        tied = net.ring_s(4 * vocab, 1, 2, 0, 2)
    collectives = net.ring_s(4 * stage_params, 1, per_stage, 0, 2) + tied
    micro = s.batch / m / per_stage  # sequences of one microbatch on one GPU of a stage
    held = in_flight(s.schedule, 0, stages, m)  # the first stage holds the most
    if s.remat:  # keeps each microbatch's stage input; recomputes one microbatch's activations at a time
        kept = held * micro * s.seq * cfg.n_embd * s.value + activations(cfg, micro, s.seq, s.value, 1, max(blocks))
    else:
        kept = held * activations(cfg, micro, s.seq, s.value, 1, max(blocks))
    terms = {"compute": m * stage_time, "collectives": collectives,
             "pipeline_bubble": (stages - 1) * stage_time,  # GPipe: m + stages - 1 ticks
             "pipeline_transfers": transfers}
    return terms, 16 * stage_params + kept, [f"blocks per stage {blocks}"]


TERMS = {Technique.DATA: _data, Technique.ZERO2: _zero2, Technique.SHARD: _shard, Technique.PIPESHARD: _pipeshard}


def predict(technique: str, sl: slices.Slice, vms: tuple[str, ...], cfg: GPTConfig, setup: Setup = Setup(),
            net: Network | None = None, devices: Devices | None = None, epochs: int = 20,
            dataset_tokens: float = 0.0) -> Prediction:
    """dataset_tokens: tokens in one epoch of the dataset, for the time of `epochs` (0: the step alone)."""
    if technique not in TERMS:
        raise ValueError(f"unknown technique {technique!r}; expected one of {', '.join(TERMS)}")
    devices = devices or Devices.of(sl, vms, setup.precision)
    hosts = len(vms)
    stages = mesh_shape(technique, hosts, sl.gpus_per_vm).hosts if technique == Technique.PIPESHARD else 1
    if stages > cfg.n_layer:
        raise BadInput(f"Pipeshard cannot run {cfg.name} on {hosts} VMs: one stage per VM, and it has "
                       f"{cfg.n_layer} layers")
    step = Step(cfg, net or network_for(sl), devices, hosts, sl.gpus_per_vm,
                rtt=max((sl.rtt_between(a, b) for a in vms for b in vms if a != b), default=0.0) / 1e3,
                seq=setup.seq_len or cfg.n_positions, batch=setup.batch_per_gpu * hosts * sl.gpus_per_vm,
                m=setup.micro_batches, value=BYTES[setup.precision],
                remat=technique == Technique.PIPESHARD and setup.remat, schedule=setup.pipeline_schedule)
    terms, memory, notes = TERMS[technique](step)
    step_s = sum(terms.values())
    steps_per_epoch = dataset_tokens / (step.batch * step.seq) if dataset_tokens else 0
    return Prediction(technique, tuple(vms), step.gpus, terms, step_s, step.total_flops / step_s / step.gpus / 1e12,
                      memory, min(devices.memory), step_s * steps_per_epoch * epochs if steps_per_epoch else None,
                      notes)


def activations(cfg: GPTConfig, micro_batch: float, seq: int, value: int, tensor: int = 1,
                layers: float | None = None) -> float:
    """Bytes one device keeps for the backward pass of one microbatch: per layer s b (5 h + 12 h / t)
    + 2.5 a s^2 b / t values (Korthikanti et al. 2022, without dropout masks, split by tensor
    parallelism t; the same rule shard_parallel plans with), plus the logits and their gradient."""
    layers = cfg.n_layer if layers is None else layers
    h, a = cfg.n_embd, cfg.n_head
    per_layer = seq * micro_batch * (5 * h + 12 * h / tensor) + 2.5 * a * seq**2 * micro_batch / tensor
    return (layers * per_layer + 2 * micro_batch * seq * cfg.vocab_size) * value


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
