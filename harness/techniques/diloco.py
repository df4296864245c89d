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
peak. Their overlap with the next inner steps is not done: a step is one compiled program, and its
collectives finish within it.

Layout: the parameters a VM trains carry a leading axis of one row per VM, split over the VMs;
the outer parameters and their momentum are replicated beside the inner AdamW state.
"""
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
                 outer_lr: float = 0.7, outer_momentum: float = 0.9, nesterov: bool = True, fragments: int = 1):
        """sync_every: H, the inner steps between syncs (the paper's 500); outer_lr, outer_momentum,
        nesterov: the outer SGD step (the paper's 0.7, 0.9, Nesterov). combine: the pseudo-gradient
        in 30 MiB buckets, as Data's gradients. fragments: streaming DiLoCo's, synced in turn (1:
        all parameters at once)."""
        if sync_every < 1:
            raise BadInput(f"DiLoCo: sync_every must be at least 1, got {sync_every}")
        if not 1 <= fragments <= sync_every:
            raise BadInput(f"DiLoCo: fragments must be from 1 to sync_every ({sync_every}), got {fragments}")
        if outer_lr <= 0:
            raise BadInput(f"DiLoCo: outer_lr must be positive, got {outer_lr}")
        if not 0 <= outer_momentum < 1:
            raise BadInput(f"DiLoCo: outer_momentum must be in [0, 1), got {outer_momentum}")
        self.micro_batches, self.combine, self.sync_every = micro_batches, combine, sync_every
        self.outer_lr, self.outer_momentum, self.nesterov = outer_lr, outer_momentum, nesterov
        self.fragments = fragments

    def validate(self, model_cfg: GPTConfig, shape: ClusterShape, batch: int) -> None:
        check_divisible("batch", batch, shape.n_devices * self.micro_batches, "devices x microbatches")
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

    def build(self, model_cfg: GPTConfig, shape: ClusterShape, cfg: TrainConfig, total_steps: int,
              devices=None) -> Plan:
        self.validate(model_cfg, shape, cfg.batch_size)
        mesh = make_mesh(shape, devices)
        hosts, d, n = shape.hosts, shape.devices_per_host, shape.n_devices
        graphdef, abstract = model.abstract_init(model_cfg)
        inner = optim.make(cfg, total_steps, abstract)
        lr, mu, every = self.outer_lr, self.outer_momentum, self.sync_every

        def outer_step(mine, outer, momentum):
            """The sync: the VMs' average pseudo-gradient, the outer Nesterov step, every VM reset."""
            # Each VM's change, the same on its devices, summed over every device as Data sums its
            # gradients: one all-reduce over all of them, the only traffic between VMs.
            delta = jax.lax.pcast(jax.tree.map(jnp.subtract, outer, mine), DEVICES, to="varying")
            summed = buckets.psum(delta, ALL) if self.combine else jax.tree.map(lambda x: jax.lax.psum(x, ALL), delta)
            pseudo = jax.tree.map(lambda x: x / n, summed)
            momentum = jax.tree.map(lambda v, g: mu * v + g, momentum, pseudo)
            direction = jax.tree.map(lambda g, v: g + mu * v, pseudo, momentum) if self.nesterov else momentum
            outer = jax.tree.map(lambda o, u: o - lr * u, outer, direction)
            return jax.lax.pcast(outer, HOSTS, to="varying"), outer, momentum

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

        def fragment_sync(f):
            def run(mine, outer, momentum):
                synced = outer_step(part(mine, f), part(outer, f), part(momentum, f))
                return tuple(put(tree, piece, f) for tree, piece in zip((mine, outer, momentum), synced))
            return run

        branches = [lambda *a: a] + [fragment_sync(f) for f in range(self.fragments)]
        phases = jnp.array([self.sync_phase(f) for f in range(self.fragments)])

        def device_step(params, state, inputs, targets):
            mine = jax.tree.map(lambda x: x[0], params)  # this VM's model
            local = jax.lax.pcast(mine, DEVICES, to="varying")
            grad_fn = jax.value_and_grad(lambda p, x, y: model.loss_fn(graphdef, p, x, y))
            loss, grads = accumulate(grad_fn, local, inputs, targets, self.micro_batches)
            grads = jax.tree.map(lambda g: jax.lax.psum(g, DEVICES) / d, grads)  # inside the VM only
            loss = jax.lax.psum(loss, DEVICES) / d
            updates, inner_state = inner.update(grads, state["inner"], mine)
            mine = optax.apply_updates(mine, updates)
            count = state["count"] + 1
            # 0: no sync after this step; f + 1: fragment f's (with one fragment, every H steps)
            which = jnp.sum(jnp.where(phases == count % every, jnp.arange(1, self.fragments + 1), 0))
            mine, outer, momentum = jax.lax.switch(which, branches, mine, state["outer"], state["momentum"])
            state = {"inner": inner_state, "outer": outer, "momentum": momentum, "count": count}
            return jax.tree.map(lambda x: x[None], mine), state, loss.reshape(1)

        def layout(params):  # a row per VM, each the same model to start
            return jax.tree.map(lambda x: jnp.broadcast_to(x, (hosts, *x.shape)), params)

        def opt_init(rows):
            first = jax.tree.map(lambda x: x[0], rows)
            return {"inner": jax.vmap(inner.init)(rows), "outer": first,
                    "momentum": jax.tree.map(jnp.zeros_like, first), "count": jnp.zeros((), jnp.int32)}

        per_vm = jax.tree.map(lambda _: P(HOSTS), abstract)
        state_shapes = jax.eval_shape(opt_init, jax.eval_shape(layout, abstract))
        opt_specs = {"inner": jax.tree.map(lambda _: P(HOSTS), state_shapes["inner"]),
                     "outer": jax.tree.map(lambda _: P(), abstract), "momentum": jax.tree.map(lambda _: P(), abstract),
                     "count": P()}

        def vm_step(params, state, inputs, targets):
            # The inner AdamW state is a row per VM too: each device sees its VM's row.
            state = {**state, "inner": jax.tree.map(lambda x: x[0], state["inner"])}
            params, state, loss = device_step(params, state, inputs, targets)
            return params, {**state, "inner": jax.tree.map(lambda x: x[None], state["inner"])}, loss

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
                                f"{every} steps, {every // self.fragments} steps apart" if self.fragments > 1 else "")},
        )

    def cost(self, s: Step) -> Cost:
        """A step of Data inside each VM; every H steps the pseudo-gradient, as large as the
        gradients, all-reduced over every GPU as Data all-reduces them. Priced per inner step."""
        inside = Collective(ALL_REDUCE, gradient_buckets(s.cfg, s.net, buckets.ALL_REDUCE_COMBINE_BYTES), (1, s.d),
                            what="the gradients, inside each VM")
        whole = gradient_buckets(s.cfg, s.net, buckets.ALL_REDUCE_COMBINE_BYTES)
        # Streaming: each fragment (about 1/fragments of the parameters) once every H steps.
        sync = Collective(ALL_REDUCE, tuple(b / self.fragments for b in whole), (s.hosts, s.d), times=self.fragments,
                          every=self.sync_every, what="the pseudo-gradient"
                          + (f", a fragment of {self.fragments} at a time" if self.fragments > 1 else ""))
        # parameters, gradients, Adam's two moments, the outer parameters and momentum, float32
        return Cost(s.total_flops / s.gpus / s.slowest, [inside, sync],
                    24 * s.params + activations(s.cfg, s.batch / s.gpus / s.m, s.seq, s.value, 1),
                    notes=[f"sync every {self.sync_every} steps"
                           + (f", {self.fragments} fragments in turn" if self.fragments > 1 else "")])
