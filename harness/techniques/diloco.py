"""DiLoCo: each VM trains on its own for H steps, then the VMs average what they learnt (Douillard
et al. 2023, arXiv 2311.08105). Beyond the paper: not one of its four techniques, and never in
its claims.

Inside a VM it is Data on the fast axis: the VM's devices split the VM's share of every batch and
all-reduce their gradients among themselves, and the VM takes its own AdamW step (the inner
optimizer, with its own moments and its own gradient clipping). Every H steps the VMs sync: the
pseudo-gradient, the outer parameters minus the VM's, is averaged over every device by one
all-reduce, the one collective that crosses VMs, and an outer SGD step with Nesterov momentum
(DiLoCo's: learning rate 0.7, momentum 0.9) moves the outer parameters, from which every VM goes
on. The loss a step reports is the VM's own: a mean over all VMs would cross the link every step.

Streaming (Douillard et al. 2025, arXiv 2501.18512), with fragments > 1: the parameters are cut
into fragments of consecutive layers (the first also holding the embeddings and the final norm),
and each fragment syncs on its own every H steps, the fragments H / fragments steps apart, so that
a sync carries about 1/fragments of the parameters: the same bytes per H steps, a fraction of the
peak. With delay = tau > 0 a sync overlaps the inner steps (the streaming paper's tau): the VM notes
its pseudo-gradient after the step the sync is due, goes on training, and the sync lands tau steps
later. A step is one compiled program whose collectives finish within it, so the step a sync lands
in is a program of its own (a branch), holding the sync's all-reduce and the step's forward and
backward, neither of which waits for the other: a runtime that runs independent work together
(XLA's asynchronous collectives on GPUs) may overlap them. Whether it does is the runtime's;
docs/techniques.md says what the CPU runtime does. When it lands, the VM's fragment becomes
mix x its own + (1 - mix) x the new outer parameters (the paper's merge; mix = 0 takes the
outer ones).

Layout: the parameters a VM trains carry a leading axis of one row per VM, split over the VMs;
the outer parameters and their momentum are replicated beside the inner AdamW state.
"""
import math

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from harness.core import model, optim
from harness.core.config import GPTConfig, TrainConfig
from harness.errors import BadInput
from harness.techniques import buckets
from harness.techniques.common import ALL, DEVICES, HOSTS, ClusterShape, Plan, accumulate, check_divisible, make_mesh
from harness.techniques.contract import (
    ALL_REDUCE,
    Collective,
    Cost,
    ParallelMethod,
    Step,
    activations,
    gradient_buckets,
    register,
)

NAME = "DiLoCo"


@register
class DiLoCo(ParallelMethod):
    name = NAME
    combines = True
    local_updates = True

    def __init__(self, micro_batches: int = 1, combine: bool = False, sync_every: int = 500,
                 outer_lr: float = 0.7, outer_momentum: float = 0.9, nesterov: bool = True, fragments: int = 1,
                 delay: int = 0, mix: float = 0.5):
        """sync_every: H, the inner steps between syncs (the paper's 500); outer_lr, outer_momentum,
        nesterov: the outer SGD step (the paper's 0.7, 0.9, Nesterov). combine: the pseudo-gradient
        in 30 MiB buckets, as Data's gradients. fragments: streaming DiLoCo's, synced in turn (1:
        all parameters at once). delay: the inner steps a sync overlaps before it lands (0: none, the
        VMs wait for it); mix: the weight of the VM's own parameters when a delayed sync lands."""
        if sync_every < 1:
            raise BadInput(f"DiLoCo: sync_every must be at least 1, got {sync_every}")
        if not 1 <= fragments <= sync_every:
            raise BadInput(f"DiLoCo: fragments must be from 1 to sync_every ({sync_every}), got {fragments}")
        # One sync in flight at a time: it lands before the next one is due.
        if not 0 <= delay < sync_every // fragments:
            raise BadInput(f"DiLoCo: delay must be from 0 to sync_every / fragments - 1 "
                           f"({sync_every // fragments - 1}), got {delay}")
        if not 0 <= mix <= 1:
            raise BadInput(f"DiLoCo: mix must be in [0, 1], got {mix}")
        if not (math.isfinite(outer_lr) and outer_lr > 0):  # written so that NaN fails it too
            raise BadInput(f"DiLoCo: outer_lr must be a positive number, got {outer_lr}")
        if not 0 <= outer_momentum < 1:
            raise BadInput(f"DiLoCo: outer_momentum must be in [0, 1), got {outer_momentum}")
        self.micro_batches, self.combine, self.sync_every = micro_batches, combine, sync_every
        self.outer_lr, self.outer_momentum, self.nesterov = outer_lr, outer_momentum, nesterov
        self.fragments, self.delay, self.mix = fragments, delay, mix

    def validate(self, model_cfg: GPTConfig, shape: ClusterShape, batch: int) -> None:
        check_divisible("batch", batch, shape.n_devices * self.micro_batches, "devices x microbatches")
        self.fits(model_cfg)

    def fits(self, model_cfg: GPTConfig) -> None:
        """Refuses a model with fewer layers than fragments, before anything is built."""
        if self.fragments > model_cfg.n_layer:
            raise BadInput(f"DiLoCo: {self.fragments} fragments of {model_cfg.name}'s {model_cfg.n_layer} layers: "
                           "a fragment needs a layer at least")

    def bounds(self, n_layer: int) -> list[int]:
        """Fragment f holds layers bounds[f] to bounds[f + 1] - 1."""
        return [round(f * n_layer / self.fragments) for f in range(self.fragments + 1)]

    def sync_phase(self, f: int) -> int:
        """Fragment f syncs after the inner steps whose count is this modulo H: the fragments
        H / fragments apart, the last with the whole model's sync (count divisible by H)."""
        return (f + 1) * self.sync_every // self.fragments % self.sync_every

    def model_moves(self, steps: int) -> bool:
        """The outer model moves only with the steps a sync lands after."""
        due = steps - self.delay
        return due > 0 and any(self.sync_phase(f) == due % self.sync_every for f in range(self.fragments))

    def build(self, model_cfg: GPTConfig, shape: ClusterShape, cfg: TrainConfig, total_steps: int,
              devices=None) -> Plan:
        self.validate(model_cfg, shape, cfg.batch_size)
        mesh = make_mesh(shape, devices)
        hosts, d, n = shape.hosts, shape.devices_per_host, shape.n_devices
        graphdef, abstract = model.abstract_init(model_cfg)
        inner = optim.make(cfg, total_steps, abstract)
        lr, mu, every, tau, alpha = self.outer_lr, self.outer_momentum, self.sync_every, self.delay, self.mix

        def outer_step(delta, outer, momentum):
            """The VMs' average pseudo-gradient and the outer Nesterov step: the new outer parameters
            and momentum."""
            # Each VM's change, the same on its devices, summed over every device as Data sums its
            # gradients: one all-reduce over all of them, the only traffic between VMs.
            delta = jax.lax.pcast(delta, DEVICES, to="varying")
            summed = buckets.psum(delta, ALL) if self.combine else jax.tree.map(lambda x: jax.lax.psum(x, ALL), delta)
            pseudo = jax.tree.map(lambda x: x / n, summed)
            momentum = jax.tree.map(lambda v, g: mu * v + g, momentum, pseudo)
            direction = jax.tree.map(lambda g, v: g + mu * v, pseudo, momentum) if self.nesterov else momentum
            return jax.tree.map(lambda o, u: o - lr * u, outer, direction), momentum

        def as_vms(outer):  # the replicated outer parameters as each VM's own
            return jax.lax.pcast(outer, HOSTS, to="varying")

        bounds = self.bounds(model_cfg.n_layer)

        def part(tree, f):
            """Fragment f of a parameter tree: its layers of every block, and in the first fragment
            everything outside the blocks."""
            return {k: jax.tree.map(lambda x: x[bounds[f]:bounds[f + 1]], v) if k == "blocks" else v
                    for k, v in tree.items() if k == "blocks" or f == 0}

        def put(tree, piece, f):
            out = dict(tree)
            for k, v in piece.items():
                out[k] = jax.tree.map(lambda x, y: jax.lax.dynamic_update_slice_in_dim(x, y, bounds[f], 0),
                                      tree[k], v) if k == "blocks" else v
            return out

        def sync_now(f):
            """Fragment f synced at once: every VM takes the new outer parameters."""
            def run(mine, outer, momentum):
                delta = jax.tree.map(jnp.subtract, part(outer, f), part(mine, f))
                new, moved = outer_step(delta, part(outer, f), part(momentum, f))
                return put(mine, as_vms(new), f), put(outer, new, f), put(momentum, moved, f)
            return run

        phases = jnp.array([self.sync_phase(f) for f in range(self.fragments)])

        def fragment_due(count):
            """0: no fragment's sync is due after inner step `count`; f + 1: fragment f's."""
            return jnp.sum(jnp.where(phases == count % every, jnp.arange(1, self.fragments + 1), 0))

        def inner_step(mine, inner_state, inputs, targets):
            """One of the H steps: Data among the VM's devices, then the VM's own AdamW step."""
            local = jax.lax.pcast(mine, DEVICES, to="varying")
            grad_fn = jax.value_and_grad(lambda p, x, y: model.loss_fn(graphdef, p, x, y))
            loss, grads = accumulate(grad_fn, local, inputs, targets, self.micro_batches)
            grads = jax.tree.map(lambda g: jax.lax.psum(g, DEVICES) / d, grads)  # inside the VM only
            loss = jax.lax.psum(loss, DEVICES) / d
            updates, inner_state = inner.update(grads, inner_state, mine)
            return optax.apply_updates(mine, updates), inner_state, loss

        def landing_with(f):
            """A step with fragment f's delayed sync landing (f None: none): one program, in which the
            sync's all-reduce reads only the state the step starts from, not its batch, so that
            nothing orders it after the step's forward and backward."""
            def run(mine, state, inputs, targets):
                outer, momentum = state["outer"], state["momentum"]
                if f is not None:  # from the pseudo-gradient each VM noted when the sync was due
                    new, moved = outer_step(part(state["noted"], f), part(outer, f), part(momentum, f))
                    outer, momentum = put(outer, new, f), put(momentum, moved, f)
                mine, inner_state, loss = inner_step(mine, state["inner"], inputs, targets)
                if f is not None:  # the streaming paper's merge of what the VM learnt meanwhile
                    mixed = jax.tree.map(lambda m, o: alpha * m + (1 - alpha) * o, part(mine, f), as_vms(new))
                    mine = put(mine, mixed, f)
                return mine, inner_state, outer, momentum, loss
            return run

        def device_step(params, state, inputs, targets):
            mine = jax.tree.map(lambda x: x[0], params)  # this VM's model
            count = state["count"] + 1
            extra = {}
            if tau:  # the sync due tau steps ago lands with this step
                landing = jnp.where(count > tau, fragment_due(count - tau), 0)
                mine, inner_state, outer, momentum, loss = jax.lax.switch(
                    landing, [landing_with(None)] + [landing_with(f) for f in range(self.fragments)],
                    mine, state, inputs, targets)
                extra["noted"] = jax.lax.cond(fragment_due(count) > 0, lambda: jax.tree.map(jnp.subtract, outer, mine),
                                              lambda: state["noted"])
            else:
                mine, inner_state, loss = inner_step(mine, state["inner"], inputs, targets)
                mine, outer, momentum = jax.lax.switch(
                    fragment_due(count), [lambda *trees: trees] + [sync_now(f) for f in range(self.fragments)],
                    mine, state["outer"], state["momentum"])
            state = {"inner": inner_state, "outer": outer, "momentum": momentum, "count": count, **extra}
            return jax.tree.map(lambda x: x[None], mine), state, loss.reshape(1)

        def layout(params):  # a row per VM, each the same model to start
            return jax.tree.map(lambda x: jnp.broadcast_to(x, (hosts, *x.shape)), params)

        def opt_init(rows):
            first = jax.tree.map(lambda x: x[0], rows)
            state = {"inner": jax.vmap(inner.init)(rows), "outer": first,
                     "momentum": jax.tree.map(jnp.zeros_like, first), "count": jnp.zeros((), jnp.int32)}
            if tau:  # the pseudo-gradient of the sync in flight, a row per VM
                state["noted"] = jax.tree.map(jnp.zeros_like, rows)
            return state

        per_vm = jax.tree.map(lambda _: P(HOSTS), abstract)
        state_shapes = jax.eval_shape(opt_init, jax.eval_shape(layout, abstract))
        opt_specs = {"inner": jax.tree.map(lambda _: P(HOSTS), state_shapes["inner"]),
                     "outer": jax.tree.map(lambda _: P(), abstract), "momentum": jax.tree.map(lambda _: P(), abstract),
                     "count": P()}
        per_vm_state = ("inner", "noted")
        if tau:
            opt_specs["noted"] = per_vm

        def vm_rows(state, take):
            return {k: jax.tree.map(take, v) if k in per_vm_state else v for k, v in state.items()}

        def vm_step(params, state, inputs, targets):
            # The inner AdamW state (and the noted pseudo-gradient) is a row per VM too: each device
            # sees its VM's row.
            params, state, loss = device_step(params, vm_rows(state, lambda x: x[0]), inputs, targets)
            return params, vm_rows(state, lambda x: x[None]), loss

        step = jax.shard_map(vm_step, mesh=mesh, in_specs=(per_vm, opt_specs, P(ALL), P(ALL)),
                             out_specs=(per_vm, opt_specs, P(ALL)))
        return Plan(
            technique=self.name, mesh=mesh, micro_batches=self.micro_batches,
            layout=layout, param_specs=per_vm, canonical=lambda params, state: state["outer"],
            opt_init=opt_init, opt_specs=opt_specs,
            batch_layout=lambda x: x, batch_spec=P(ALL),
            step=jax.jit(step, donate_argnums=(0, 1)),
            details={"parameters": f"one copy per VM ({hosts}), replicated on its {d} devices; the outer "
                                   "parameters and their momentum replicated everywhere",
                     "inner steps": "AdamW on each VM's share of the batch, gradients all-reduced inside the VM",
                     "sync": f"every {every} steps: the pseudo-gradient all-reduced over all {n} devices (crosses "
                             f"VMs), then outer SGD, lr {lr}, momentum {mu}" + (", Nesterov" if self.nesterov else "")
                             + (", in buckets of up to 30 MiB" if self.combine else "")
                             + (f"; streaming: {self.fragments} fragments of layers {bounds}, each synced every "
                                f"{every} steps, {every // self.fragments} steps apart" if self.fragments > 1 else "")
                             + (f"; each sync lands {tau} inner steps after it is due, overlapping them, the VM's "
                                f"parameters then {alpha} x its own + {1 - alpha:g} x the outer ones" if tau else "")},
        )

    def cost(self, s: Step) -> Cost:
        """A step of Data inside each VM; every H steps the pseudo-gradient, as large as the
        gradients, all-reduced over every GPU as Data all-reduces them. Priced per inner step."""
        inside = Collective(ALL_REDUCE, gradient_buckets(s.cfg, s.net, buckets.ALL_REDUCE_COMBINE_BYTES), (1, s.d),
                            what="the gradients, inside each VM")
        whole = gradient_buckets(s.cfg, s.net, buckets.ALL_REDUCE_COMBINE_BYTES)
        # Streaming: each fragment (about 1/fragments of the parameters) once every H steps.
        # Delayed, each sync runs in the program of the step it lands in, alongside that step's compute.
        sync = Collective(ALL_REDUCE, tuple(b / self.fragments for b in whole), (s.hosts, s.d), times=self.fragments,
                          every=self.sync_every, overlaps=self.delay > 0, what="the pseudo-gradient"
                          + (f", a fragment of {self.fragments} at a time" if self.fragments > 1 else ""))
        # parameters, gradients, Adam's two moments, the outer parameters and momentum (and, delayed,
        # the noted pseudo-gradient), float32
        return Cost(s.total_flops / s.gpus / s.slowest, [inside, sync],
                    (28 if self.delay else 24) * s.params + activations(s.cfg, s.batch / s.gpus / s.m, s.seq, s.value, 1),
                    notes=[f"sync every {self.sync_every} steps"
                           + (f", {self.fragments} fragments in turn" if self.fragments > 1 else "")
                           + (f", each landing {self.delay} steps late, overlapping a step's compute"
                              if self.delay else "")])
