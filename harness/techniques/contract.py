"""The one description of a technique that the rest of the suite reads.

A technique is one class in its own file, a ParallelMethod registered here (register), and it
answers for itself:
- build(...) -> Plan: its parameter layout and compiled step (trials, the memory analysis);
- cost(step) -> Cost: its compute, its pipeline's bubble, its memory per GPU, and its wire:
  every collective of one step, with the ranks it spans (which VMs it crosses), how many per
  step, whether they sit inside the microbatch loop, and their bytes;
- configured(setup, slice, VMs): itself as the paper-scale analyses (memory, predict) run it;
- mesh(shape): the mesh it compiles for on a group of VMs;
- stage_programs(...): its memory programs, where it compiles one per stage instead of one step.
`predict` (costmodel.py) prices the wire and never asks which technique it prices; similarity
scaling and the cost model's check read predict; a test compares each wire with the compiled HLO.

The paper's claims run the paper's four (config.Technique), not whatever is registered: a
technique added here is trialled, predicted and reported, and changes no verdict about the paper.
Each of the four is played by its own class unless a run casts another registered one in its role
(`cast`; RunConfig.shard: Alpa's Shard in Shard's), and everything that looks a technique up by
name (`lookup`) then gets the player.
"""
import contextlib
from dataclasses import dataclass, field

from harness.analysis.netmodel import Network
from harness.core import flops
from harness.core.config import GPTConfig, Setup, Technique
from harness.errors import BadInput
from harness.techniques import buckets

# Kinds of what a step puts on the wire. Ring collectives, as NCCL runs them:
ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER = "all-reduce", "reduce-scatter", "all-gather"
# Point to point: a tensor from one stage to the next; a scalar passed around the ring of stages.
SEND, RING_PASS = "send", "ring-pass"
POINT_TO_POINT = (SEND, RING_PASS)
PHASES = {ALL_REDUCE: 2, REDUCE_SCATTER: 1, ALL_GATHER: 1}  # a ring all-reduce is both halves
SCALAR = 4  # bytes of one float32 (a loss, a norm)


@dataclass(frozen=True)
class Collective:
    kind: str
    nbytes: tuple[float, ...]  # per rank; several: buckets sent back to back, one ring each
    over: tuple[int, int]  # its ranks: (VMs, GPUs per VM)
    times: int = 1  # in one step
    per_microbatch: bool = False  # inside the microbatch loop (times counts all of them)
    what: str = ""
    every: int = 1  # in one step of this many (a sync every H steps: a step bears 1/H of it)
    overlaps: bool = False  # runs alongside a step's compute (DiLoCo's delayed sync): waited for only beyond it

    @property
    def crosses_vms(self) -> bool:
        return self.over[0] > 1


@dataclass
class Cost:
    compute_s: float
    wire: list[Collective]
    memory_bytes: float  # per GPU, on the fullest
    bubble_s: float = 0.0  # a pipeline's idle ticks
    notes: list = field(default_factory=list)


@dataclass(frozen=True)
class Step:
    """What every technique's cost is computed from: one step of `cfg` on the VMs used."""
    cfg: GPTConfig
    net: Network
    devices: object  # costmodel.Devices: FLOP/s and memory of each GPU used
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


def gradient_buckets(cfg: GPTConfig, net: Network, threshold: int) -> tuple[float, ...]:
    """Bytes of each collective that carries a step's float32 gradients: Alpa's tensors in buckets
    as GPUs combine them (buckets.py), or, on a per-tensor runtime, each tensor of this suite's
    scanned model alone."""
    if net.per_tensor:
        return tuple(4 * n for n in flops.tensor_sizes(cfg, scanned=True))
    sizes = [4 * n for n in flops.tensor_sizes(cfg)]
    return tuple(sum(sizes[i] for i in group) for group in buckets.plan(sizes, threshold))


def activations(cfg: GPTConfig, micro_batch: float, seq: int, value: int, tensor: int = 1,
                layers: float | None = None) -> float:
    """Bytes one device keeps for the backward pass of one microbatch: per layer s b (5 h + 12 h / t)
    + 2.5 a s^2 b / t values (Korthikanti et al. 2022, without dropout masks, split by tensor
    parallelism t; the same rule shard_parallel plans with), plus the logits and their gradient."""
    layers = cfg.n_layer if layers is None else layers
    h, a = cfg.n_embd, cfg.n_head
    per_layer = seq * micro_batch * (5 * h + 12 * h / tensor) + 2.5 * a * seq**2 * micro_batch / tensor
    return (layers * per_layer + 2 * micro_batch * seq * cfg.vocab_size) * value


class ParallelMethod:
    """What every technique answers the same way unless it says otherwise (Alpa's name for them).
    A subclass gives name, validate, build and cost, and overrides the rest where it differs."""
    name: str
    micro_batches: int = 1
    remat: bool = False  # recomputes activations in the backward pass: the cost model's compute
    combines: bool = False  # takes combine=True: its gradients in 30 MiB buckets, as GPUs send them
    local_updates: bool = False  # steps of its own between syncs: its losses are not the single-device trainer's

    @classmethod
    def configured(cls, setup: Setup, sl, vms) -> "ParallelMethod":
        """The technique as the paper-scale analyses run it for `setup` on the VMs `vms` of slice `sl`."""
        return cls(micro_batches=setup.micro_batches)

    @staticmethod
    def mesh(shape):
        """The mesh (a ClusterShape) it compiles for on the VMs and GPUs of `shape`."""
        return shape

    def stage_programs(self, model_cfg: GPTConfig, shape, cfg) -> tuple[str, list] | None:
        """The programs the memory analysis compiles, one per mesh row, with their description;
        None: the one step build() compiles, over the whole mesh."""
        return None

    def model_moves(self, steps: int) -> bool:
        """Whether the model its Plan's canonical state holds can have changed with step number
        `steps` (counted from 1). Every step moves it, unless the technique's model moves only at
        syncs (DiLoCo's outer model): a measurement in between would measure the same model."""
        return True

    def memory_key(self) -> str:
        """Everything of its configuration that its compiled programs depend on."""
        return repr(sorted(vars(self).items()))


REGISTRY: dict = {}


def register(cls):
    """A technique class (name, validate, build, cost) into the registry, by its name."""
    for needed in ("name", "validate", "build", "cost"):
        if not hasattr(cls, needed):
            raise TypeError(f"technique {cls.__name__} has no {needed}: a technique answers for all of "
                            "name, validate, build and cost")
    REGISTRY[str(cls.name)] = cls
    # The paper's four in its order (config.Technique), whatever order they were imported in; any
    # other technique after them, in the order it registered.
    paper = list(Technique)
    ordered = sorted(REGISTRY.items(), key=lambda kv: paper.index(kv[0]) if kv[0] in paper else len(paper))
    REGISTRY.clear()
    REGISTRY.update(ordered)
    return cls


# The paper's technique -> the registered one that plays it in this process (`cast`).
CAST: dict[str, str] = {}


def player(name: str) -> str:
    """The registered technique that runs under `name` here: its cast player, or itself."""
    return CAST.get(name, name)


def lookup(name: str):
    """The class that runs under `name` (KeyError where nothing registered does)."""
    return REGISTRY[player(name)]


@contextlib.contextmanager
def cast(roles: dict[str, str]):
    """Within it, each technique named in `roles` is played by the registered technique given: a
    run's trials, predictions and memory analyses under the paper's name run the player's code."""
    for role, actor in roles.items():
        if actor not in REGISTRY:
            raise BadInput(f"{role} played by {actor!r}: no such technique; expected one of {', '.join(REGISTRY)}")
    before = dict(CAST)
    CAST.update({role: actor for role, actor in roles.items() if role != actor})
    try:
        yield
    finally:
        CAST.clear()
        CAST.update(before)
