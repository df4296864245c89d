"""Model, training and trial configurations as dataclasses, and the techniques' names; the model
itself lives in model.py, the techniques in techniques/.

The paper's models are GPT-2 shapes with 1024 positions (docs/paper.md, "Models"). The scale models
share the architecture exactly and differ only in size, so that everything measured on a CPU
runs the same code as a paper-scale run.
"""
import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from harness import inputs
from harness.errors import BadInput
from harness.runs.noise import MIN_TIMED_STEPS


class Technique(StrEnum):
    """The paper's four techniques, in the order its tables list them."""
    DATA = "Data"
    ZERO2 = "ZeRO2"
    SHARD = "Shard"
    PIPESHARD = "Pipeshard"


ATTENTION = ("auto", "xla", "cudnn")
# What a rematerialised block keeps for the backward pass: nothing but its input ("nothing"), or
# also the outputs of its weight matmuls ("dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable),
# so that the backward recomputes only the cheap elementwise work and attention's products.
REMAT_SAVES = ("nothing", "dots")
# A run's arithmetic: float32 is XLA's default, float32 matmuls as TF32 on GPUs that have it
# (Ampere, Hopper); float32-full asks for full float32 matmuls (jax_default_matmul_precision
# highest), as the paper's T4 and RTX 6000 ran, having no TF32; bfloat16 and float16 compute in 16
# bits, parameters and optimizer state staying float32.
PRECISIONS = ("float32", "float32-full", "bfloat16", "float16")


@dataclass(frozen=True)
class GPTConfig:
    name: str
    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int = 50257
    n_positions: int = 1024
    tie_embeddings: bool = True  # GPT-2 and the paper's likely setup share input/output embeddings
    dropout: float = 0.0  # the Alpa/HF example trains GPT-2 without dropout
    dtype: str = "float32"  # compute dtype; parameters and optimizer state stay float32
    # auto: cuDNN's fused attention where it applies (a GPU computing in 16 bits), which never
    # keeps the [seq, seq] scores; the scores written out for XLA otherwise. Or xla, cudnn.
    attention: str = "auto"
    # Recompute each block's forward in the backward pass, keeping only its input: about a third
    # more arithmetic for the activations of one block instead of all of them, the usual price of
    # a large batch on one GPU. Off by default; the paper's trials ran without it.
    remat: bool = False
    remat_saves: str = "nothing"  # one of REMAT_SAVES, where remat is on
    # The embedding and head get vocab_size rounded up to this multiple (GPT-2's 50257 to 50304
    # at 64), so that the head's matmul tiles evenly on GPUs; the padding's logits are dropped
    # before the loss, so the model computes the same function. 1: no padding, as the paper ran.
    vocab_multiple: int = 1
    # The head and the loss over this many slices of the sequence in turn, each recomputed in the
    # backward pass: the float32 logits of one slice exist at a time, not of the whole batch
    # (gpt2m at 16 sequences: 3.3 GB of them). 1: the whole sequence at once.
    loss_chunks: int = 1
    # Blocks per iteration of the loop over the layers: 1 keeps one block's program, run n_layer
    # times; n_layer writes every block out, which spares a GPU the loop's slicing of the stacked
    # parameters and saved activations at the price of a longer compile. The same function either way.
    scan_unroll: int = 1

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "vocab_multiple", "loss_chunks",
                     "scan_unroll"):
            if getattr(self, name) < 1:
                raise BadInput(f"model {self.name}: {name} must be positive, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise BadInput(f"model {self.name}: n_embd {self.n_embd} is not divisible by n_head {self.n_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise BadInput(f"model {self.name}: dropout must be in [0, 1), got {self.dropout}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise BadInput(f"model {self.name}: dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        if self.attention not in ATTENTION:
            raise BadInput(f"model {self.name}: attention must be one of {', '.join(ATTENTION)}, got {self.attention!r}")
        if self.remat_saves not in REMAT_SAVES:
            raise BadInput(f"model {self.name}: remat_saves must be one of {', '.join(REMAT_SAVES)}, "
                           f"got {self.remat_saves!r}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def padded_vocab(self) -> int:
        """Rows of the embedding (and columns of the head): vocab_size up to a multiple of vocab_multiple."""
        return -(-self.vocab_size // self.vocab_multiple) * self.vocab_multiple


MODELS = {
    # The paper's models (docs/paper.md, "Models").
    "gpt2m": GPTConfig("gpt2m", n_layer=24, n_head=16, n_embd=1024),
    "gpt2l": GPTConfig("gpt2l", n_layer=26, n_head=20, n_embd=1280),
    "gpt2L": GPTConfig("gpt2L", n_layer=30, n_head=20, n_embd=1280),
    # CPU scale models: same architecture, small enough for a 2-core machine.
    # scale-tiny is for unit tests that must compile and train in seconds.
    "scale-tiny": GPTConfig("scale-tiny", n_layer=2, n_head=4, n_embd=64, vocab_size=1024, n_positions=64),
    # scale-small is the default for `harness train` and the trials of the claims.
    "scale-small": GPTConfig("scale-small", n_layer=4, n_head=4, n_embd=256, vocab_size=4096, n_positions=128),
    # scale-similar is geometrically similar to gpt2m as the paper ran it (docs/design.md, "A
    # geometrically similar scale model"): gpt2m's 24 layers, and at its trial batch (TRIAL_BATCH:
    # gpt2m's 4 microbatches) its gradients weigh as many microbatches of activations at a stage
    # boundary as gpt2m's do at the stated setup, and its embedding about the same share of its
    # parameters; the width sets its compute per gradient byte, which the link's rate then matches.
    "scale-similar": GPTConfig("scale-similar", n_layer=24, n_head=4, n_embd=128, vocab_size=4096, n_positions=128),
}
# The trials' sequences per GPU and microbatches per step, per model: a scale model's geometry is
# its shape and its batch together. Models not named here train TRIAL_BATCH_DEFAULT.
TRIAL_BATCH = {"scale-similar": (4, 4)}
TRIAL_BATCH_DEFAULT = (2, 2)


def model_config(name: str) -> GPTConfig:
    try:
        return MODELS[name]
    except KeyError:
        raise BadInput(f"unknown model {name!r}; expected one of {', '.join(MODELS)}") from None


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings; defaults follow Alpa's run_clm_flax example (docs/paper.md, "Likely setup")."""

    batch_size: int = 8  # sequences per step (global batch)
    seq_len: int | None = None  # tokens per sequence; None means the model's n_positions
    steps: int | None = None  # stop after this many steps ...
    epochs: float | None = None  # ... or after this many passes over the packed corpus
    seed: int = 0
    learning_rate: float = 5e-3
    warmup_steps: int | None = None  # None: 10% of the run (the paper gives no schedule length)
    adam_b1: float = 0.9
    adam_b2: float = 0.98
    adam_eps: float = 1e-8
    weight_decay: float = 0.01
    grad_clip_norm: float = 1.0

    def __post_init__(self):
        if self.batch_size < 1:
            raise BadInput(f"batch_size must be positive, got {self.batch_size}")
        if self.seq_len is not None and self.seq_len < 2:
            raise BadInput(f"seq_len must be at least 2, got {self.seq_len}")
        if self.steps is not None and self.steps < 1:
            raise BadInput(f"steps must be positive, got {self.steps}")
        if self.epochs is not None:
            inputs.positive("epochs", self.epochs)
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise BadInput(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.seed < 0:  # numpy's generators take no negative seed
            raise BadInput(f"seed must be >= 0, got {self.seed}")
        inputs.positive("learning_rate", self.learning_rate)

    def resolved_seq_len(self, model: GPTConfig) -> int:
        seq_len = self.seq_len or model.n_positions
        if seq_len > model.n_positions:
            raise BadInput(f"seq_len {seq_len} is beyond model {model.name}'s {model.n_positions} positions")
        return seq_len


@dataclass(frozen=True)
class Setup:
    """What a paper-scale run assumes besides the slice and the model; the paper states none of it.
    The memory analysis (memory.py) and the cost model (costmodel.py) both read it. The defaults
    are the memory claims' setup: 4 sequences per GPU, the largest power of two at which gpt2m with
    Data fits the T4s of UTAH-GPN and TACC-TACC as the paper ran it (8, Alpa's example, does not:
    `python -m harness memory --batch-per-gpu 8` gives by how much); 4 microbatches and float32, Alpa's example defaults; Pipeshard as Alpa's
    PipeshardParallel runs by default: the 1F1B schedule, no rematerialisation; Shard planned as
    Alpa's ShardParallel plans. `python -m harness memory --infer` shows which setups reproduce
    the paper's observed runs (infer.py)."""
    batch_per_gpu: int = 4
    micro_batches: int = 4
    precision: str = "float32"
    remat: bool = False  # Pipeshard recomputes stage activations in the backward pass
    alpa_shard: bool = True  # Shard plans as Alpa's: uniform mesh, no memory budget
    pipeline_schedule: str = "1f1b"  # Pipeshard's, for memory: Alpa's default; or "gpipe"
    seq_len: int | None = None  # default: the model's n_positions

    def __str__(self) -> str:
        return (f"{self.batch_per_gpu} sequences per GPU, {self.micro_batches} microbatches, {self.precision}"
                + f", Pipeshard's {self.pipeline_schedule} schedule"
                + (" with rematerialisation" if self.remat else "")
                + (", Shard planned as Alpa's (uniform mesh, no memory budget)" if self.alpa_shard else ""))


@dataclass(frozen=True)
class Budget:
    """What every trial trains: the scale model by default (docs/design.md, section 4)."""
    model: str = "scale-small"
    batch_per_gpu: int | None = None  # None: the model's TRIAL_BATCH
    micro_batches: int | None = None
    warmup_steps: int = 1
    repeats: int = 5  # timed steps: at least noise.MIN_TIMED_STEPS, for a robust spread
    # Data and ZeRO2 send their gradients in 30 MiB buckets, one collective each, as XLA's GPU
    # combiners and NCCL do (techniques/buckets.py); False: one collective per tensor, as XLA's CPU
    # runtime runs even a combined one.
    combine: bool = False
    precision: str = "float32"  # one of PRECISIONS

    def __post_init__(self):
        model_config(self.model)  # names the bad model before anything starts
        for name, default in zip(("batch_per_gpu", "micro_batches"), TRIAL_BATCH.get(self.model, TRIAL_BATCH_DEFAULT)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        if self.precision not in PRECISIONS:
            raise BadInput(f"trial budget: precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        for name in ("batch_per_gpu", "micro_batches", "repeats"):
            if getattr(self, name) < 1:
                raise BadInput(f"trial budget: {name} must be positive, got {getattr(self, name)}")
        if self.repeats < MIN_TIMED_STEPS:
            raise BadInput(f"trial budget: repeats must be at least {MIN_TIMED_STEPS} for timed comparisons (a robust "
                           f"spread of the step times), got {self.repeats}")

    @property
    def model_cfg(self) -> "GPTConfig":
        """The model the trials train, computing in the budget's precision."""
        return dataclasses.replace(model_config(self.model), dtype=compute_dtype(self.precision))


def compute_dtype(precision: str) -> str:
    return precision.removesuffix("-full")
