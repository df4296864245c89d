"""The training loop: the single-device reference trainer, and the same loop over a technique's Plan.

A step is one compiled function (loss, gradients, optimizer update). The single-device trainer
is the numerical reference every technique is checked against; a technique changes the step and
the placement of state, while the loop, the timing and the record stay the same. Compilation
is done ahead of the loop so that its time is reported on its own and no step time includes it.
"""
import functools
import time
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import optax

from harness.core import model, optim
from harness.core.config import GPTConfig, TrainConfig
from harness.core.data import PackedCorpus
from harness.errors import BadInput
from harness.runs import records
from harness.techniques.common import local_scalar


@dataclass
class TrainRun:
    total_steps: int
    losses: list[float] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)
    compile_s: float | None = None
    params: dict | None = None  # final parameters, for tests and later stages
    excluded_steps: int = records.WARMUP_STEPS_EXCLUDED  # 0 when warm-up steps were run and dropped before

    @property
    def median_step_s(self) -> float | None:
        return records.median_step_s(self.step_times_s, self.excluded_steps)


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
    Ctrl-C loses nothing. park() moves the state to host memory until the next advance(): at paper
    scale one technique's state is a large part of a GPU (gpt2m's Data keeps 4 GB between steps),
    and with every technique's state kept on it, a 16 GB GPU ran out of memory at the second
    technique, which alone fits.
    """

    def __init__(self, run: TrainRun, step_fn, params, opt_state, args, plan=None, initial=None):
        """plan: the technique's Plan where the step is one (its model_params), else None.
        initial: () -> (params, opt_state) as they were before the first step, for restart()."""
        self.plan, self.initial = plan, initial
        start = time.perf_counter()
        self.step_fn = step_fn.lower(params, opt_state, *args(0)).compile()
        run.compile_s = time.perf_counter() - start
        self.run, self.params, self.opt_state, self.args = run, params, opt_state, args
        self.next_step = 0
        self.parked = None

    def park(self) -> None:
        if self.parked is None:
            self.parked = jax.tree.map(HostCopy.of, (self.params, self.opt_state))
            self.params = self.opt_state = self.run.params = None  # the last references to the device buffers

    def restart(self) -> None:
        """Back to the untrained model, optimizer state and schedule, the data from its first
        batch, with the compiled step kept: a second run from scratch without a second compile
        (repeats of a time to target, harness.experiments.time_to_loss)."""
        if self.initial is None:
            raise ValueError("this step was built without its initial state")
        self.parked = self.params = self.opt_state = self.run.params = None  # freed before the new state
        self.params, self.opt_state = self.initial()
        self.run.losses.clear()
        self.run.step_times_s.clear()
        self.next_step = 0

    def unpark(self) -> None:
        if self.parked is not None:
            state = jax.tree.map(lambda x: x.restore() if isinstance(x, HostCopy) else x, self.parked,
                                 is_leaf=lambda x: isinstance(x, HostCopy))
            self.params, self.opt_state = jax.block_until_ready(state)  # not inside the next step's time
            self.parked = None

    def advance(self, n: int, on_step=None) -> TrainRun:
        self.unpark()
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

    def held_out_loss(self, graphdef, held: PackedCorpus, batch_size: int) -> float:
        """Mean next-token loss of the model trained so far on every block of `held`, batch_size
        blocks at a time (data.held_out gives whole batches); every process of a run calls this
        in step. A technique's model is its Plan's model_params."""
        self.unpark()
        params = self.plan.model_params(self.params, self.opt_state) if self.plan else self.params
        # Whole on every device the model is on; from a callback, which every process answers
        # from its own copy of the corpus.
        where = jax.tree.leaves(params)[0].sharding
        if isinstance(where, jax.sharding.NamedSharding):
            where = jax.sharding.NamedSharding(where.mesh, jax.sharding.PartitionSpec())
        batches = held.blocks.reshape(-1, batch_size, held.blocks.shape[1])
        placed = jax.make_array_from_callback(batches.shape, where, lambda index: batches[index])
        # One program over the whole split, not a dispatch and two transfers per batch: a sweep
        # measures the held-out loss every few steps. Its losses are kept whole on every device,
        # so this process's first shard holds every batch's.
        losses = np.asarray(_batch_losses(graphdef, where, params, placed).addressable_shards[0].data)
        if losses.shape != (len(batches),):
            raise ValueError(f"held-out loss: this process holds {losses.shape} of {len(batches)} batches' losses")
        return float(np.mean(losses, dtype=np.float64))

    def bytes_per_device(self) -> int | None:
        return needed_bytes(self.step_fn)


@dataclass
class HostCopy:
    """An array's shards that this process holds, in host memory, with the sharding to restore them
    to: in a multi-process run no process can read the whole array."""
    shape: tuple
    sharding: object
    shards: list  # (device, numpy array)

    @classmethod
    def of(cls, x):
        if not isinstance(x, jax.Array) or x.is_deleted():  # donated to a step that then failed: lost
            return x
        # A copy: on CPU devices np.asarray would be a view that keeps the device buffer alive.
        return cls(x.shape, x.sharding, [(s.device, np.array(s.data, copy=True)) for s in x.addressable_shards])

    def restore(self) -> jax.Array:
        return jax.make_array_from_single_device_arrays(
            self.shape, self.sharding, [jax.device_put(data, device) for device, data in self.shards])


@functools.partial(jax.jit, static_argnums=(0, 1))
def _batch_losses(graphdef, whole, params, batches):
    """Each batch's mean loss, the batches stacked on the first axis; on every device of `whole`."""
    losses = jax.lax.map(lambda rows: model.loss_fn(graphdef, params, rows[:, :-1], rows[:, 1:]), batches)
    return jax.lax.with_sharding_constraint(losses, whole)


def needed_bytes(compiled) -> int | None:
    """Per-device bytes of a compiled step: arguments + unaliased outputs + temporaries (XLA's analysis)."""
    m = compiled.memory_analysis()
    if m is None:
        return None
    return int(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes)


def plan_stepper(plan, model_cfg: GPTConfig, cfg: TrainConfig, data: PackedCorpus, run: TrainRun) -> Stepper:
    """A technique's Plan, initialised from the reference model and compiled (every process calls this)."""
    def initial():
        return plan.init_state(model.init(model_cfg, cfg.seed)[1])  # the same initial model as the reference

    params, opt_state = initial()
    return Stepper(run, plan.step, params, opt_state,
                   lambda step: plan.place_batch(*data.batch(step, cfg.batch_size, cfg.seed)), plan, initial)
