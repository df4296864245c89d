"""The training loop: the single-device reference trainer, and the same loop over a technique's Plan.

A step is one compiled function (loss, gradients, optimizer update). The single-device trainer
is the numerical reference every technique is checked against; a technique changes the step and
the placement of state, while the loop, the timing and the record stay the same. Compilation
is done ahead of the loop so that its time is reported on its own and no step time includes it.
"""
import statistics
import time
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import optax

from harness import environment, flops, hardware, model, optim, records
from harness.config import GPTConfig, TrainConfig
from harness.data import PackedCorpus
from harness.errors import BadInput
from harness.techniques.common import local_scalar

WARMUP_STEPS_EXCLUDED = 1  # the first executed step still pays for buffer allocation


@dataclass
class TrainRun:
    total_steps: int
    losses: list[float] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)
    compile_s: float | None = None
    params: dict | None = None  # final parameters, for tests and later stages
    excluded_steps: int = WARMUP_STEPS_EXCLUDED  # 0 when warm-up steps were run and dropped before

    @property
    def median_step_s(self) -> float | None:
        timed = self.step_times_s[self.excluded_steps:] or self.step_times_s
        return statistics.median(timed) if timed else None


def total_steps(cfg: TrainConfig, data: PackedCorpus) -> int:
    if cfg.steps is not None:
        return cfg.steps
    if cfg.epochs is not None:
        return max(1, round(cfg.epochs * data.steps_per_epoch(cfg.batch_size)))
    raise BadInput("give a training budget: steps or epochs")


def make_step(graphdef, optimizer: optax.GradientTransformation, dropout: bool):
    def step(params, opt_state, inputs, targets, key):
        loss, grads = jax.value_and_grad(
            lambda p: model.loss_fn(graphdef, p, inputs, targets, key if dropout else None))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step, donate_argnums=(0, 1))


def train(model_cfg: GPTConfig, cfg: TrainConfig, data: PackedCorpus, run: TrainRun | None = None,
          on_step=None) -> TrainRun:
    """Train from seed cfg.seed; on_step(step, loss, seconds) is called after every step.

    Pass a TrainRun to have it filled as training goes: if a step fails or the user presses
    Ctrl-C, it still holds every step completed so far, for the record.

    Same seed, same data and same machine give the same losses bit for bit: initialisation,
    batch order and dropout keys are functions of the seed and the step only.
    """
    if data.seq_len > model_cfg.n_positions:
        raise BadInput(f"seq_len {data.seq_len} is beyond model {model_cfg.name}'s {model_cfg.n_positions} positions")
    run = run or TrainRun(total_steps(cfg, data))
    graphdef, params = model.init(model_cfg, cfg.seed)
    optimizer = optim.make(cfg, run.total_steps, params)
    opt_state = optimizer.init(params)
    base_key = jax.random.key(cfg.seed)

    step_fn = make_step(graphdef, optimizer, dropout=model_cfg.dropout > 0)

    def args(step):
        inputs, targets = data.batch(step, cfg.batch_size, cfg.seed)
        return jnp.asarray(inputs), jnp.asarray(targets), jax.random.fold_in(base_key, step)

    return Stepper(run, step_fn, params, opt_state, args).advance(run.total_steps, on_step)


def train_plan(plan, model_cfg: GPTConfig, cfg: TrainConfig, data: PackedCorpus, run: TrainRun | None = None,
               on_step=None) -> TrainRun:
    """Train with a technique's Plan; every process of a multi-process run calls this in step."""
    run = run or TrainRun(total_steps(cfg, data))
    return plan_stepper(plan, model_cfg, cfg, data, run).advance(run.total_steps, on_step)


class Stepper:
    """A compiled step with its training state, advanced a few steps at a time.

    A latency sweep keeps one Stepper per technique and calls advance() at every RTT: one
    compilation serves the whole sweep. Every completed step is in `run` at once, so a failure or
    Ctrl-C loses nothing.
    """

    def __init__(self, run: TrainRun, step_fn, params, opt_state, args):
        start = time.perf_counter()
        self.step_fn = step_fn.lower(params, opt_state, *args(0)).compile()
        run.compile_s = time.perf_counter() - start
        self.run, self.params, self.opt_state, self.args = run, params, opt_state, args
        self.next_step = 0

    def advance(self, n: int, on_step=None) -> TrainRun:
        for _ in range(n):
            step = self.next_step
            step_args = self.args(step)
            start = time.perf_counter()
            self.params, self.opt_state, loss = self.step_fn(self.params, self.opt_state, *step_args)
            loss = local_scalar(loss)  # waits for the step, like block_until_ready
            seconds = time.perf_counter() - start
            self.run.losses.append(loss)
            self.run.step_times_s.append(seconds)
            self.next_step += 1
            if on_step:
                on_step(step, loss, seconds)
        self.run.params = self.params
        return self.run

    def bytes_per_device(self) -> int | None:
        return needed_bytes(self.step_fn)


def needed_bytes(compiled) -> int | None:
    """Per-device bytes of a compiled step: arguments + unaliased outputs + temporaries (XLA's analysis)."""
    m = compiled.memory_analysis()
    if m is None:
        return None
    return int(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes)


def plan_stepper(plan, model_cfg: GPTConfig, cfg: TrainConfig, data: PackedCorpus, run: TrainRun) -> Stepper:
    """A technique's Plan, initialised from the reference model and compiled (every process calls this)."""
    _, canonical = model.init(model_cfg, cfg.seed)  # the same initial model as the reference
    params, opt_state = plan.init_state(canonical)
    return Stepper(run, plan.step, params, opt_state,
                   lambda step: plan.place_batch(*data.batch(step, cfg.batch_size, cfg.seed)))


def peak_tflops(dtype: str) -> float | None:
    """The device's peak for MFU, when it is a GPU the suite knows; None on CPU."""
    device = jax.devices()[0]
    accelerator = hardware.identify(device.device_kind) if device.platform == "gpu" else None
    return accelerator.peak_tflops(dtype) if accelerator else None


def to_record(model_cfg: GPTConfig, cfg: TrainConfig, data: PackedCorpus | None, run: TrainRun | None,
              status: str = "ok", reason: str | None = None, peak: float | None = None, technique: str = "Single",
              cluster: dict | None = None, micro_batches: int = 1, memory: dict | None = None,
              plan: str | None = None) -> dict:
    """The trial record of a run (by default the single-device reference); failed runs are recorded too."""
    cluster = cluster or {"slice": None, "vms_used": None, "hosts": 1, "devices_per_host": 1,
                          "network": {"mechanism": None, "rtt_ms": None}}
    n_devices = cluster["hosts"] * cluster["devices_per_host"]
    seq_len = data.seq_len if data else cfg.resolved_seq_len(model_cfg)
    steps = len(run.losses) if run else 0
    median = run.median_step_s if run else None
    alpa = flops.alpa_step_flops(model_cfg, cfg.batch_size, seq_len)
    rule = flops.rule_step_flops(model_cfg, cfg.batch_size, seq_len)
    per_epoch = data.steps_per_epoch(cfg.batch_size) if data else None
    peak = peak if peak is not None else peak_tflops(model_cfg.dtype)
    return records.new_record(
        technique=technique,
        backend="jax",
        cluster=cluster,
        model={"name": model_cfg.name, "n_layer": model_cfg.n_layer, "n_head": model_cfg.n_head,
               "n_embd": model_cfg.n_embd, "vocab_size": model_cfg.vocab_size,
               "n_positions": model_cfg.n_positions, "tie_embeddings": model_cfg.tie_embeddings,
               "params": flops.param_count(model_cfg)},
        data={"corpus": data.corpus.description if data else None,
              "tokenizer": data.tokenizer.description if data else None,
              "tokenizer_vocab": data.tokenizer.vocab_size if data else None,
              "blocks": len(data.blocks) if data else None,
              "steps_per_epoch": per_epoch},
        batch={"global_batch": cfg.batch_size, "seq_len": seq_len, "micro_batches": micro_batches},
        plan=plan,
        precision=model_cfg.dtype,
        steps=steps,
        tokens=steps * cfg.batch_size * seq_len,
        losses=run.losses if run else [],
        timing={"compile_s": run.compile_s if run else None,
                "step_times_s": run.step_times_s if run else [],
                "excluded_warmup_steps": run.excluded_steps if run else WARMUP_STEPS_EXCLUDED,
                "median_step_s": median,
                "epoch_time_s": median * per_epoch if median and per_epoch else None},
        throughput={"tflops_alpa": flops.tflops(alpa, median, n_devices) if median else None,
                    "mfu": flops.tflops(rule, median, n_devices) / peak if median and peak else None,
                    "peak_tflops": peak,
                    "flops_per_step_alpa": alpa,
                    "flops_per_step_rule": rule},
        memory=memory or {"bytes_per_device": None, "source": None},
        status=status,
        reason=reason,
        environment=environment.describe(),
    )
