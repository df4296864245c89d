"""A training job as plain data, so that it can be sent to worker processes (and Ray actors).

execute(job) is the same function whether it runs in this process (all devices local) or in
every process of a multi-process run (one process per VM, joined by jax.distributed); that is
what makes "same numbers in one process and in several" a test of the techniques, not of glue.
"""
import contextlib
import dataclasses
from dataclasses import dataclass, field

import jax

from harness.core import data, model, train
from harness.core.config import GPTConfig, TrainConfig
from harness.techniques import ClusterShape, technique
from harness.techniques.shard_alpa import AlpaPlan
from harness.techniques.shard_parallel import IntraOpPlan


@dataclass
class Job:
    technique: str
    model: dict  # GPTConfig fields
    hosts: int
    devices_per_host: int
    train: dict = field(default_factory=dict)  # TrainConfig fields
    options: dict = field(default_factory=dict)  # technique options, e.g. micro_batches
    corpus: str | None = None
    corpus_config: str | None = None
    full_fp32: bool = False  # compile with full float32 matmuls (no TF32), as config.PRECISIONS says
    held_out: float | None = None  # this fraction of the corpus kept apart for held-out losses, never trained on

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        return cls(**d)


def technique_options(job: Job) -> dict:
    options = dict(job.options)
    p = options.get("plan")
    if isinstance(p, dict):  # a Shard plan sent as data: this suite's planner's, or Alpa's (Shard-alpa)
        options["plan"] = AlpaPlan(**p) if "blocks" in p else IntraOpPlan(tuple(p["data"]), tuple(p["tensor"]),
                                                                           p["shard_optimizer"])
    return options


def method(job: Job):
    """The job's technique with its options, as its step is built."""
    return technique(job.technique, **technique_options(job))


def start(job: Job, budget_steps: int | None = None) -> tuple[train.Stepper, str]:
    """Validate, load the data, build the plan and compile its step: a Stepper ready to advance.

    budget_steps sets the optimizer schedule's length when the job runs open-ended (a sweep)."""
    model_cfg, cfg = GPTConfig(**job.model), TrainConfig(**job.train)
    seq_len = cfg.resolved_seq_len(model_cfg)
    shape = ClusterShape(job.hosts, job.devices_per_host)
    tech = method(job)
    tech.validate(model_cfg, shape, cfg.batch_size)  # before loading or tokenizing anything
    corpus = data.load_corpus(job.corpus, job.corpus_config)
    packed = data.prepare(model_cfg.vocab_size, seq_len, cfg.batch_size, corpus)
    held = None
    if job.held_out is not None:
        packed, held = data.held_out(packed, job.held_out, cfg.batch_size)
    total = budget_steps or train.total_steps(cfg, packed)  # steps or epochs
    plan = tech.build(model_cfg, shape, cfg, total)
    # The precision is fixed when the step is compiled: the compiled step keeps it.
    with jax.default_matmul_precision("highest") if job.full_fp32 else contextlib.nullcontext():
        stepper = train.plan_stepper(plan, model_cfg, cfg, packed, train.TrainRun(total))
    stepper.held_out = (model.abstract_init(model_cfg)[0], held, cfg.batch_size) if held is not None else None
    return stepper, plan.describe()


def held_out_loss(stepper: train.Stepper) -> float:
    """The stepper's model's loss on the held-out blocks of its job (Job.held_out)."""
    if not getattr(stepper, "held_out", None):
        raise ValueError("this step was built without a held-out split (Job.held_out)")
    return stepper.held_out_loss(*stepper.held_out)


def execute(job: Job) -> dict:
    stepper, description = start(job)
    run = stepper.advance(stepper.run.total_steps)
    return {"process_index": jax.process_index(), "process_count": jax.process_count(),
            "losses": run.losses, "step_times_s": run.step_times_s, "compile_s": run.compile_s,
            "description": description}
