"""Pipeshard: pipeline stages across VMs, data parallelism inside each, as alpa.PipeshardParallel.

The layers are cut into one stage per VM (Alpa's submeshes; in the paper's 4-GPU runs, two
stages on two 1x2 meshes). Cut points balance the cost of each stage: the last stage also runs
the output head, so it gets fewer blocks. The batch is split into microbatches that flow through
the stages in the GPipe schedule: all forwards, then (by autodiff of the same ticks) all backwards.

What crosses VMs is only point-to-point: each microbatch's activations go forward to the next
stage and their gradients come back (collective-permute). With tied embeddings the first stage
(input embedding) and the last (output head) share one matrix, so its two gradients are summed
once per step; that all-reduce is the only collective spanning VMs. The loss and the gradient
norm (for clipping) are summed over stages by passing them around the ring of stages.

Inside a VM, each microbatch is split over the VM's devices and stage gradients are all-reduced
over them (intra-operator parallelism on the fast axis only).

Layout: every parameter gets a leading stage axis sharded over the VMs. Blocks are [stage,
layer-in-stage, ...], padded to the longest stage with inactive layers, which a shorter stage
skips (a branch each), so that its tick costs what its own layers cost, as in Alpa's program for
that stage; the embeddings live on the first stage, the head's LayerNorm (and untied head) on the
last, zeros elsewhere.
"""
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import PartitionSpec as P

from harness.core import flops, model, optim
from harness.core.config import GPTConfig, Technique, TrainConfig
from harness.errors import BadInput
from harness.techniques.common import ALL, DEVICES, HOSTS, ClusterShape, Plan, check_divisible, make_mesh, microbatches
from harness.techniques.contract import (
    ALL_REDUCE,
    RING_PASS,
    SCALAR,
    SEND,
    Collective,
    Cost,
    ParallelMethod,
    Step,
    activations,
    register,
)
from harness.techniques.pipeshard_stages import SCHEDULES, in_flight, stage_programs, stage_sizes


@dataclass(frozen=True)
class Tick:
    """What the stages do at one tick of the lockstep schedule, and what crosses after it."""
    forward: tuple  # per stage: the microbatch it runs forward, or None
    backward: tuple  # per stage: the microbatch it takes back, or None
    sends_forward: bool  # some stage but the last ran a forward: its activations go on
    sends_back: bool  # some stage but the first ran a backward: its input's gradient goes back


def one_f_one_b(n: int, m: int) -> list[Tick]:
    """1F1B in lockstep over n stages and m microbatches: at tick t stage s runs microbatch t - s
    forward and microbatch t - 2(n - 1) + s backward. The last stage takes a microbatch back in the
    tick it ran it forward, stage s 2(n - 1 - s) ticks later, so it keeps up to 2(n - 1 - s) + 1
    microbatches' activations (PipeDream-Flush keeps n - s; the memory programs follow Alpa's)."""
    def valid(i):
        return i if 0 <= i < m else None
    ticks = []
    for t in range(m + 2 * n - 2):
        fwd = tuple(valid(t - s) for s in range(n))
        bwd = tuple(valid(t - 2 * (n - 1) + s) for s in range(n))
        ticks.append(Tick(fwd, bwd, any(f is not None for f in fwd[:-1]), any(b is not None for b in bwd[1:])))
    return ticks


def exchanges(schedule: str, n: int, m: int) -> int:
    """Point-to-point exchanges of activations or their gradients between stages in one step, as
    the timed step runs them: on two stages a 1F1B tick's forward and backward transfers are one
    swap; on more, one collective-permute each way."""
    if n < 2:
        return 0
    if schedule == "gpipe":  # every tick but the last ends with one transfer, forward and back
        return 2 * (m + n - 2)
    ticks = one_f_one_b(n, m)
    if n == 2:
        return sum(t.sends_forward or t.sends_back for t in ticks)
    return sum(t.sends_forward + t.sends_back for t in ticks)


def stage_mesh(hosts: int, devices_per_host: int) -> ClusterShape:
    """Pipeshard's stages (hosts of the shape) and the GPUs of each: one stage per VM; on one VM,
    one per GPU (Alpa's 1x1 submeshes)."""
    return ClusterShape(devices_per_host, 1) if hosts == 1 else ClusterShape(hosts, devices_per_host)


def pipeline_cost(s: Step) -> Cost:
    """The pipeline over the stages build cuts: the slowest stage sets the pace, the bubble idles
    (stages - 1) stage-times, every tick moves activations forward and gradients back; inside a
    stage its GPUs all-reduce their gradients, and the tied embedding's crosses the VMs."""
    cfg, m = s.cfg, s.m
    mesh = stage_mesh(s.hosts, s.d)
    stages, per_stage = mesh.hosts, mesh.devices_per_host
    if stages > cfg.n_layer:
        raise BadInput(f"Pipeshard cannot run {cfg.name} on {s.hosts} VMs: one stage per VM, and it has "
                       f"{cfg.n_layer} layers")
    head = flops.head_flops(cfg, s.batch, s.seq, recompute=s.remat)
    layer = (s.total_flops - head) / cfg.n_layer
    blocks = stage_sizes(cfg, stages, s.batch, s.seq)  # the cut build makes
    rates = [f * per_stage for f in s.devices.flops] if s.hosts > 1 else [s.devices.flops[0]] * s.d
    work = [n * layer + (head if i == stages - 1 else 0) for i, n in enumerate(blocks)]
    stage_time = max(w / m / r for w, r in zip(work, rates))  # one microbatch, forward and backward
    # Between stages: across the VMs, or between the GPUs of one VM.
    between = (2, 1) if s.hosts > 1 else (1, 2)
    ring = (stages, 1) if s.hosts > 1 else (1, stages)
    act = s.batch / m * s.seq * cfg.n_embd * s.value  # one microbatch's activations at a layer boundary
    vocab = cfg.vocab_size * cfg.n_embd
    ends = vocab if cfg.tie_embeddings else 2 * vocab
    stage_params = s.params if stages == 1 else (s.params - ends) / stages + vocab
    wire = [Collective(ALL_REDUCE, (4 * stage_params,), (1, per_stage), what="a stage's gradients inside its VM")]
    if stages > 1:
        # Stages move in lockstep: each exchange waits for the slowest stage, then pays the link.
        wire.append(Collective(SEND, (act / per_stage,), between, times=exchanges(s.schedule, stages, m),
                               per_microbatch=True, what="activations forward and their gradients back"))
        # the loss and the gradient norm, around the stages (one stage keeps them)
        wire.append(Collective(RING_PASS, (SCALAR,), ring, times=2, what="the loss and the gradient norm"))
        if cfg.tie_embeddings:  # the first stage's embedding and the last's head are one matrix
            wire.append(Collective(ALL_REDUCE, (4 * vocab,), between, what="the tied embedding's gradient"))
    micro = s.batch / m / per_stage  # sequences of one microbatch on one GPU of a stage
    held = in_flight(s.schedule, 0, stages, m)  # the first stage holds the most
    if s.remat:  # keeps each microbatch's stage input; recomputes one microbatch's activations at a time
        kept = held * micro * s.seq * cfg.n_embd * s.value + activations(cfg, micro, s.seq, s.value, 1, max(blocks))
    else:
        kept = held * activations(cfg, micro, s.seq, s.value, 1, max(blocks))
    return Cost(m * stage_time, wire, 16 * stage_params + kept, bubble_s=(stages - 1) * stage_time,
                notes=[f"blocks per stage {blocks}"])


@register
class PipeshardParallel(ParallelMethod):
    name = Technique.PIPESHARD

    def __init__(self, micro_batches: int = 4, remat: bool = False, schedule: str = "1f1b"):
        """remat: recompute each stage's forward in the backward pass instead of keeping its
        activations (GPipe's rematerialisation; off by default, as in Alpa's example).
        schedule: the order of forwards and backwards (Alpa's default, 1F1B, or GPipe): the order
        the timed step runs, and how many microbatches a stage keeps in the memory programs
        (stage_programs)."""
        if schedule not in SCHEDULES:
            raise BadInput(f"pipeline schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")
        self.micro_batches, self.remat, self.schedule = micro_batches, remat, schedule

    @classmethod
    def configured(cls, setup, sl, vms) -> "PipeshardParallel":
        return cls(micro_batches=setup.micro_batches, remat=setup.remat, schedule=setup.pipeline_schedule)

    @staticmethod
    def mesh(shape: ClusterShape) -> ClusterShape:
        return stage_mesh(shape.hosts, shape.devices_per_host)

    def stage_programs(self, model_cfg: GPTConfig, shape: ClusterShape, cfg: TrainConfig) -> tuple[str, list]:
        """As Alpa compiles it (MPMD): one program per stage, on its VM's GPUs."""
        seq = cfg.resolved_seq_len(model_cfg)
        stages = stage_programs(model_cfg, shape, cfg.batch_size, seq, self.micro_batches, self.schedule, self.remat)
        return (f"Pipeshard as Alpa compiles it, one program per stage on its VM's {shape.devices_per_host} GPU(s), "
                f"{self.schedule} schedule, {self.micro_batches} microbatches:\n"
                + "\n".join(f"  {program.describe()}" for program in stages)), stages

    def validate(self, model_cfg: GPTConfig, shape: ClusterShape, batch: int) -> None:
        if shape.hosts > model_cfg.n_layer:
            raise BadInput(f"Pipeshard: {shape.hosts} stages (one per VM) but model {model_cfg.name} "
                           f"has only {model_cfg.n_layer} layers")
        check_divisible("batch", batch, self.micro_batches, "microbatches")
        check_divisible("microbatch", batch // self.micro_batches, shape.devices_per_host, "devices per VM")

    def build(self, model_cfg: GPTConfig, shape: ClusterShape, cfg: TrainConfig, total_steps: int,
              devices=None) -> Plan:
        self.validate(model_cfg, shape, cfg.batch_size)
        mesh = make_mesh(shape, devices)
        m, seq_len = self.micro_batches, cfg.resolved_seq_len(model_cfg)
        stages = Stages(model_cfg, stage_sizes(model_cfg, shape.hosts, cfg.batch_size, seq_len), m, self.remat)
        _, abstract = model.abstract_init(model_cfg)
        abstract_layout = jax.eval_shape(stages.layout, abstract)
        optimizer = optim.make(cfg, total_steps, abstract_layout, norm_fn=stages.global_norm)
        param_specs = jax.tree.map(lambda _: P(HOSTS), abstract_layout)
        opt_specs = jax.tree.map(lambda x: P(HOSTS) if x.ndim else P(), jax.eval_shape(optimizer.init, abstract_layout))
        batch_spec = P(None, DEVICES)

        tokens = cfg.batch_size * seq_len

        def device_step(params, opt_state, inputs, targets):
            local = jax.lax.pcast(params, DEVICES, to="varying")
            # this device's share of the batch's mean loss
            if self.schedule == "1f1b":
                loss, grads = stages.loss_and_grads_1f1b(local, inputs, targets, 1 / tokens)
            else:
                loss, grads = jax.value_and_grad(lambda p: stages.loss(p, inputs, targets) / tokens)(local)
            grads = jax.tree.map(lambda g: jax.lax.psum(g, DEVICES), grads)  # data parallel inside the VM
            if stages.tied:  # the one collective across VMs: first stage's embedding + last stage's head
                grads["wte"] = jax.lax.psum(grads["wte"], HOSTS)
            loss = stages.ring_sum(jax.lax.psum(loss, DEVICES))
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss.reshape(1)

        step = jax.shard_map(device_step, mesh=mesh, in_specs=(param_specs, opt_specs, batch_spec, batch_spec),
                             out_specs=(param_specs, opt_specs, P(ALL)))
        n_stages, sizes, tied = stages.n, stages.sizes, stages.tied
        return Plan(
            technique=self.name, mesh=mesh, micro_batches=m,
            layout=stages.layout, param_specs=param_specs, canonical=lambda params, _: stages.canonical(params),
            opt_init=optimizer.init, opt_specs=opt_specs,
            batch_layout=lambda x: microbatches(x, m), batch_spec=batch_spec,
            step=jax.jit(step, donate_argnums=(0, 1)),
            details={"stages": f"{n_stages} (one per VM), blocks per stage {sizes} (balanced by cost; "
                               f"the last stage also runs the head)",
                     "schedule": (f"1F1B, {m} microbatches, {len(one_f_one_b(n_stages, m))} ticks"
                                  if self.schedule == "1f1b" else f"GPipe, {m} microbatches, {m + n_stages - 1} ticks")
                                 + (", stages rematerialised in the backward pass" if self.remat else ""),
                     "inside a VM": f"each microbatch split over {shape.devices_per_host} devices, "
                                    "stage gradients all-reduced inside the VM",
                     "between VMs": "activations and their gradients by collective-permute"
                                    + ("; tied embedding gradient summed across first and last stage" if tied else "")},
        )

    cost = staticmethod(pipeline_cost)


def _varying_zeros(shape=(), dtype=jnp.float32):
    # Loop carries and branches must be typed as per-device values, like what flows in them.
    return jax.lax.pcast(jnp.zeros(shape, dtype), ALL, to="varying")


class Stages:
    """The model cut into stages, one per VM, and the schedules over them. Every method but
    layout() runs inside the shard_map, on one device: its stage is axis_index(HOSTS)."""

    def __init__(self, model_cfg: GPTConfig, sizes: list[int], micro_batches: int, remat: bool):
        self.model_cfg, self.sizes, self.m, self.remat = model_cfg, sizes, micro_batches, remat
        self.n = len(sizes)
        self.starts, self.depth = np.cumsum([0, *sizes[:-1]]), max(sizes)
        self.active = np.array([[i < n for i in range(self.depth)] for n in sizes])  # [stage, layer-in-stage]
        self.tied = model_cfg.tie_embeddings
        self.graphdef, _ = model.abstract_init(model_cfg)

    def layout(self, params):
        """The model's parameters with a leading stage axis: blocks [stage, layer-in-stage, ...]
        padded to the deepest stage; embeddings on the first stage, the head on the last, zeros
        elsewhere."""
        def per_stage(x, stages_with_it):
            return jnp.stack([x if s in stages_with_it else jnp.zeros_like(x) for s in range(self.n)])

        def blocks(x):
            pad = lambda part: jnp.pad(part, [(0, self.depth - part.shape[0])] + [(0, 0)] * (part.ndim - 1))
            return jnp.stack([pad(x[start:start + n]) for start, n in zip(self.starts, self.sizes)])

        first, last = {0}, {self.n - 1}
        out = {"blocks": jax.tree.map(blocks, params["blocks"]),
               "wpe": per_stage(params["wpe"]["embedding"], first),
               "ln_f": jax.tree.map(lambda x: per_stage(x, last), params["ln_f"]),
               # Tied: the first and last stage each keep a copy, kept equal by summing their gradients.
               "wte": per_stage(params["wte"]["embedding"], first | last if self.tied else first)}
        if not self.tied:
            out["lm_head"] = per_stage(params["lm_head"]["kernel"], last)
        return out

    def canonical(self, staged):
        """layout's inverse: each stage's own layers in order, the embeddings from the first stage
        (a tied copy on the last is kept equal to it), the final norm and head from the last."""
        blocks = jax.tree.map(lambda x: jnp.concatenate([x[s, :n] for s, n in enumerate(self.sizes)]),
                              staged["blocks"])
        out = {"blocks": blocks, "wpe": {"embedding": staged["wpe"][0]},
               "ln_f": jax.tree.map(lambda x: x[-1], staged["ln_f"]), "wte": {"embedding": staged["wte"][0]}}
        if not self.tied:
            out["lm_head"] = {"kernel": staged["lm_head"][-1]}
        return out

    def stage_model(self, p):
        """This stage's parameters, under the model's own names, as a model to call."""
        own = {"blocks": jax.tree.map(lambda x: x[0], p["blocks"]), "wpe": {"embedding": p["wpe"][0]},
               "ln_f": jax.tree.map(lambda x: x[0], p["ln_f"]), "wte": {"embedding": p["wte"][0]}}
        if not self.tied:
            own["lm_head"] = {"kernel": p["lm_head"][0]}
        return nnx.merge(self.graphdef, own)

    def ring_sum(self, x):
        """Sum over stages by passing values around the ring of VMs: point-to-point only."""
        total = x
        for _ in range(self.n - 1):
            x = jax.lax.ppermute(x, HOSTS, [(i, (i + 1) % self.n) for i in range(self.n)])
            total = total + x
        return total

    def loss(self, p, inputs, targets):
        """This device's summed token losses over the schedule. inputs and targets are
        [microbatches, local batch, seq]; the last stage computes the loss of microbatch t - (n - 1)
        at tick t, while activations [local batch, seq, embd] move one stage forward per tick."""
        stage = jax.lax.axis_index(HOSTS)
        net = self.stage_model(p)
        # Logits are [microbatch, seq, vocab]: recomputed in the backward pass rather than kept,
        # because a branch's intermediates are kept on every stage, taken or not.
        head_loss = jax.checkpoint(lambda y, tgt: model.token_losses(net.head(y), tgt).sum())
        layers_on = jnp.asarray(self.active)[stage]
        run_stage = lambda h: net.run_blocks(h, active=layers_on, always=min(self.sizes))
        if self.remat:  # keep only the stage's input per microbatch
            run_stage = jax.checkpoint(run_stage)
        m, last = self.m, self.n - 1
        # The ticks are unrolled: a loop would stack every tick's intermediates for the backward
        # pass through dynamic slices, which on CPU cost more than the stage's compute.
        act, loss = _varying_zeros((*inputs.shape[1:], self.model_cfg.n_embd), jnp.dtype(self.model_cfg.dtype)), \
            _varying_zeros()
        for t in range(m + self.n - 1):
            # Stage s works on microbatch t - s. Outside that window (the bubble) it computes on what
            # it holds, as a stage in lockstep would wait: that work reaches no loss (it travels on
            # to stages that are idle too), and a branch to skip it would make the program keep and
            # zero-fill the stage's intermediates.
            x = jax.lax.cond(stage == 0, lambda: net.embed(inputs[min(t, m - 1)]), lambda: act)
            y = run_stage(x)
            if t >= last:  # the last stage finishes microbatch t - (n - 1)
                loss += jax.lax.cond(stage == last, lambda: head_loss(y, targets[t - last]), _varying_zeros)
            if self.n > 1 and t < m + self.n - 2:  # activations go one stage on (after the last tick: nowhere)
                act = jax.lax.ppermute(y, HOSTS, [(i, i + 1) for i in range(self.n - 1)])
        return loss

    def loss_and_grads_1f1b(self, p, inputs, targets, scale):
        """(this device's summed token losses x scale, their gradients) in the 1F1B schedule
        (one_f_one_b). The backward is written out: each tick's forward keeps its pullback, and
        the backward of a later tick applies the one its stage ran that microbatch with. Ticks,
        and which forwards and backwards some stage runs, are known when tracing; which stage this
        device is, only at run time, so a tick's backward switches on it."""
        stage = jax.lax.axis_index(HOSTS)
        n, last, m = self.n, self.n - 1, self.m
        layers_on = jnp.asarray(self.active)[stage]

        def run(p, act, tokens, tgt):
            """This stage's forward of one microbatch: (its output, its token losses if last)."""
            net = self.stage_model(p)
            run_stage = lambda h: net.run_blocks(h, active=layers_on, always=min(self.sizes))
            if self.remat:
                run_stage = jax.checkpoint(run_stage)
            y = run_stage(jax.lax.cond(stage == 0, lambda: net.embed(tokens), lambda: act))
            head_loss = jax.checkpoint(lambda y, tgt: model.token_losses(net.head(y), tgt).sum())
            return y, jax.lax.cond(stage == last, lambda: head_loss(y, tgt), _varying_zeros)

        act = grad_in = _varying_zeros((*inputs.shape[1:], self.model_cfg.n_embd), jnp.dtype(self.model_cfg.dtype))
        y, grads, loss = act, jax.tree.map(jnp.zeros_like, p), _varying_zeros()
        scale = _varying_zeros() + scale  # the cotangent of a stage's losses: typed as they are
        pullbacks = {}  # tick -> the pullback of that tick's forward
        for t, tick in enumerate(one_f_one_b(n, m)):
            if any(f is not None for f in tick.forward):
                # Stage s runs microbatch t - s; outside the schedule it computes on what it holds,
                # and nothing of that reaches a loss or a gradient.
                mb = lambda i: min(max(i, 0), m - 1)
                (y, losses), pullbacks[t] = jax.vjp(lambda p, a: run(p, a, inputs[mb(t)], targets[mb(t - last)]),
                                                    p, act)
                if tick.forward[last] is not None:
                    loss = loss + losses
            dx = jnp.zeros_like(act)
            if any(b is not None for b in tick.backward):
                # Stage s takes back what it ran forward 2(n - 1 - s) ticks ago; the last stage's
                # output went only to its loss, the others' to the next stage.
                cotangent = (jnp.where(stage == last, jnp.zeros_like(grad_in), grad_in), scale)

                def take_back(s):
                    if tick.backward[s] is None:
                        return lambda ct: (jax.tree.map(jnp.zeros_like, grads), jnp.zeros_like(act))
                    return pullbacks[t - 2 * (n - 1 - s)]
                g, dx = jax.lax.switch(stage, [take_back(s) for s in range(n)], cotangent)
                grads = jax.tree.map(jnp.add, grads, g)
            act, grad_in = self.exchange(y, dx, tick)
        return loss * scale, grads

    def exchange(self, y, dx, tick: Tick):
        """(activations in, gradients in) for the next tick: the outputs go one stage on, the
        input gradients one stage back. On two stages one swap carries both."""
        if self.n == 2 and (tick.sends_forward or tick.sends_back):
            got = jax.lax.ppermute(jnp.where(jax.lax.axis_index(HOSTS) == 0, y, dx), HOSTS, [(0, 1), (1, 0)])
            return got, got
        on = jax.lax.ppermute(y, HOSTS, [(i, i + 1) for i in range(self.n - 1)]) if tick.sends_forward else y
        back = jax.lax.ppermute(dx, HOSTS, [(i + 1, i) for i in range(self.n - 1)]) if tick.sends_back else dx
        return on, back

    def global_norm(self, grads):
        """The gradient norm for clipping, over every stage's share."""
        stage = jax.lax.axis_index(HOSTS)
        squares = {k: sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(v)) for k, v in grads.items()}
        if self.tied:  # both copies hold the same summed gradient: count it once
            squares["wte"] = jnp.where(stage == 0, squares["wte"], 0.0)
        return jnp.sqrt(self.ring_sum(sum(squares.values())))
