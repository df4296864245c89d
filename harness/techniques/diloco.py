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
                 outer_lr: float = 0.7, outer_momentum: float = 0.9, nesterov: bool = True):
        """sync_every: H, the inner steps between syncs (the paper's 500); outer_lr, outer_momentum,
        nesterov: the outer SGD step (the paper's 0.7, 0.9, Nesterov). combine: the pseudo-gradient
        in 30 MiB buckets, as Data's gradients."""
        if sync_every < 1:
            raise BadInput(f"DiLoCo: sync_every must be at least 1, got {sync_every}")
        if outer_lr <= 0:
            raise BadInput(f"DiLoCo: outer_lr must be positive, got {outer_lr}")
        if not 0 <= outer_momentum < 1:
            raise BadInput(f"DiLoCo: outer_momentum must be in [0, 1), got {outer_momentum}")
        self.micro_batches, self.combine, self.sync_every = micro_batches, combine, sync_every
        self.outer_lr, self.outer_momentum, self.nesterov = outer_lr, outer_momentum, nesterov

    def validate(self, model_cfg: GPTConfig, shape: ClusterShape, batch: int) -> None:
        check_divisible("batch", batch, shape.n_devices * self.micro_batches, "devices x microbatches")

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
            mine, outer, momentum = jax.lax.cond(count % every == 0, outer_step, lambda *a: a,
                                                 mine, state["outer"], state["momentum"])
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
            layout=layout, param_specs=per_vm,
            opt_init=opt_init, opt_specs=opt_specs,
            batch_layout=lambda x: x, batch_spec=P(ALL),
            step=jax.jit(step, donate_argnums=(0, 1)),
            details={"parameters": f"one copy per VM ({hosts}), replicated on its {d} devices; the outer "
                                   "parameters and their momentum replicated everywhere",
                     "inner steps": "AdamW on each VM's share of the batch, gradients all-reduced inside the VM",
                     "sync": f"every {every} steps: the pseudo-gradient all-reduced over all {n} devices (crosses "
                             f"VMs), then outer SGD, lr {lr}, momentum {mu}" + (", Nesterov" if self.nesterov else "")
                             + (", in buckets of up to 30 MiB" if self.combine else "")},
        )

    def cost(self, s: Step) -> Cost:
        """A step of Data inside each VM; every H steps the pseudo-gradient, as large as the
        gradients, all-reduced over every GPU as Data all-reduces them. Priced per inner step."""
        inside = Collective(ALL_REDUCE, gradient_buckets(s.cfg, s.net, buckets.ALL_REDUCE_COMBINE_BYTES), (1, s.d),
                            what="the gradients, inside each VM")
        sync = Collective(ALL_REDUCE, gradient_buckets(s.cfg, s.net, buckets.ALL_REDUCE_COMBINE_BYTES), (s.hosts, s.d),
                          every=self.sync_every, what="the pseudo-gradient")
        # parameters, gradients, Adam's two moments, the outer parameters and momentum, float32
        return Cost(s.total_flops / s.gpus / s.slowest, [inside, sync],
                    24 * s.params + activations(s.cfg, s.batch / s.gpus / s.m, s.seq, s.value, 1),
                    notes=[f"sync every {self.sync_every} steps"])
