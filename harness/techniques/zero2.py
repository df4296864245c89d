"""ZeRO2: data parallelism with gradients and optimizer state partitioned, as alpa.Zero2Parallel.

Every device holds the whole model and takes 1/N of the batch, as in Data. Each parameter is
viewed as a flat vector cut into N equal chunks (padded at the end); device i owns chunk i:
1. gradients are synced once per step, after the last microbatch, so that device i holds the
   summed chunk i;
2. device i keeps Adam's moments for chunk i alone (1/N of Data's optimizer state) and updates
   chunk i of the parameters;
3. the updated chunks are all-gathered, so every device again holds the whole model.
How step 1 crosses the network is what Alpa's compiler made of it (ALPA-WIRE.md, "ZeRO2 with
M>1"): with more than one microbatch its gradient-accumulation rewrite keeps the accumulator
replicated, so the sync is a full all-reduce, after which each device keeps its chunk: 1.5 times
Data's bytes with the all-gather, "50% communication overhead" in Alpa's own comment. With one
microbatch it is a reduce-scatter, and the step moves what Data's does, in two collectives. With
combine, the collectives travel in buckets of up to 30 MiB, as XLA's GPU combiners send them
(buckets.py): for a reduce-scatter, a bucket's tensors, each viewed as [N, chunk], side by side,
so that device i still receives chunk i of each.
"""
import math

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from harness.core import model, optim
from harness.core.config import GPTConfig, Technique, TrainConfig
from harness.techniques import buckets
from harness.techniques.common import ALL, ClusterShape, Plan, accumulate, check_divisible, make_mesh
from harness.techniques.contract import (
    ALL_GATHER,
    ALL_REDUCE,
    REDUCE_SCATTER,
    SCALAR,
    Collective,
    Cost,
    ParallelMethod,
    Step,
    activations,
    gradient_buckets,
    register,
)


def chunked(x, n: int):
    """x flattened and zero-padded to a multiple of n elements."""
    flat = x.reshape(-1)
    return jnp.pad(flat, (0, -flat.size % n))


def mine(flat, n: int):
    """This device's chunk (of n) of a flat vector padded by chunked."""
    size = flat.size // n
    return jax.lax.dynamic_slice_in_dim(flat, jax.lax.axis_index(ALL) * size, size)


@register
class Zero2Parallel(ParallelMethod):
    name = Technique.ZERO2
    combines = True

    def __init__(self, micro_batches: int = 1, combine: bool = False):
        """combine: as DataParallel's."""
        self.micro_batches, self.combine = micro_batches, combine

    def validate(self, model_cfg: GPTConfig, shape: ClusterShape, batch: int) -> None:
        check_divisible("batch", batch, shape.n_devices * self.micro_batches, "devices x microbatches")

    def build(self, model_cfg: GPTConfig, shape: ClusterShape, cfg: TrainConfig, total_steps: int,
              devices=None) -> Plan:
        self.validate(model_cfg, shape, cfg.batch_size)
        mesh = make_mesh(shape, devices)
        n = shape.n_devices
        graphdef, abstract = model.abstract_init(model_cfg)

        def all_reduce_then_keep_mine(grads):
            summed = buckets.psum(grads, ALL) if self.combine else jax.tree.map(lambda g: jax.lax.psum(g, ALL), grads)
            return jax.tree.map(lambda g: mine(chunked(g, n), n), summed)

        def reduce_scatter(grads):
            if not self.combine:
                return jax.tree.map(lambda g: jax.lax.psum_scatter(chunked(g, n), ALL, scatter_dimension=0,
                                                                   tiled=True), grads)
            leaves, treedef = jax.tree.flatten(grads)
            return jax.tree.unflatten(treedef, buckets.psum_scatter_rows(
                [chunked(g, n).reshape(n, -1) for g in leaves], ALL))

        def all_gather(chunks):
            if not self.combine:
                return jax.tree.map(lambda c: jax.lax.all_gather(c, ALL, tiled=True, to="invarying"), chunks)
            leaves, treedef = jax.tree.flatten(chunks)
            return jax.tree.unflatten(treedef, [x.reshape(-1) for x in buckets.all_gather_rows(leaves, ALL, n)])

        def global_norm(grad_chunks):
            # Each device holds different chunks: the squared norm is summed over all of them.
            local = sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grad_chunks))
            return jnp.sqrt(jax.lax.psum(local, ALL))

        optimizer = optim.make(cfg, total_steps, abstract, norm_fn=global_norm)
        sizes = jax.tree.map(lambda x: math.prod(x.shape), abstract)

        def device_step(params, opt_chunks, inputs, targets):
            local = jax.lax.pcast(params, ALL, to="varying")
            grad_fn = jax.value_and_grad(lambda p, x, y: model.loss_fn(graphdef, p, x, y))
            loss, grads = accumulate(grad_fn, local, inputs, targets, self.micro_batches)
            loss = jax.lax.psum(loss, ALL) / n
            # 1. this device's chunk of every gradient, summed over all devices, once per step.
            sync = all_reduce_then_keep_mine if self.micro_batches > 1 else reduce_scatter
            grad_chunks = jax.tree.map(lambda c: c / n, sync(grads))
            # 2. update this device's chunk with this device's part of the optimizer state.
            param_chunks = jax.tree.map(lambda p: mine(chunked(p, n), n), params)
            updates, opt_chunks = optimizer.update(grad_chunks, opt_chunks, param_chunks)
            new_chunks = optax.apply_updates(param_chunks, updates)
            # 3. all-gather: every device gets the whole updated model back.
            params = jax.tree.map(lambda full, p, size: full[:size].reshape(p.shape), all_gather(new_chunks),
                                  params, sizes)
            return params, opt_chunks, loss

        def opt_init(params):
            return optimizer.init(jax.tree.map(lambda p: chunked(p, n), params))

        replicated = jax.tree.map(lambda _: P(), abstract)
        # Moments are flat chunk vectors, split over all devices; Adam's step count is a scalar.
        opt_specs = jax.tree.map(lambda x: P(ALL) if x.ndim == 1 else P(), jax.eval_shape(opt_init, abstract))
        step = jax.shard_map(device_step, mesh=mesh, in_specs=(P(), opt_specs, P(ALL), P(ALL)),
                             out_specs=(P(), opt_specs, P()))
        return Plan(
            technique=self.name, mesh=mesh, micro_batches=self.micro_batches,
            layout=lambda params: params, param_specs=replicated,
            opt_init=opt_init, opt_specs=opt_specs,
            batch_layout=lambda x: x, batch_spec=P(ALL),
            step=jax.jit(step, donate_argnums=(0, 1)),
            details={"parameters": "replicated on every device",
                     "optimizer state": f"partitioned: each device keeps 1/{n} of Adam's moments",
                     "batch": f"split over all {n} devices",
                     "gradient sync": ("all-reduce (Alpa's with microbatches)" if self.micro_batches > 1
                                       else "reduce-scatter")
                                      + f", then all-gather of updated parameters, over all {n} devices, once per step"
                                      + (", in buckets of up to 30 MiB" if self.combine else "")},
        )

    @staticmethod
    def cost(s: Step) -> Cost:
        """As build compiles it: the gradients synced once per step (all-reduced with microbatches,
        reduce-scattered with one) and the parameters all-gathered, in buckets back to back; the
        loss and the norm of the split gradients all-reduced as scalars."""
        everywhere = (s.hosts, s.d)
        if s.m > 1:
            sync = Collective(ALL_REDUCE, gradient_buckets(s.cfg, s.net, buckets.ALL_REDUCE_COMBINE_BYTES), everywhere,
                              what="the gradients (Alpa's with microbatches: the accumulator stays whole)")
        else:
            sync = Collective(REDUCE_SCATTER, gradient_buckets(s.cfg, s.net, buckets.REDUCE_SCATTER_COMBINE_BYTES),
                              everywhere, what="the gradients")
        gather = Collective(ALL_GATHER, gradient_buckets(s.cfg, s.net, buckets.ALL_GATHER_COMBINE_BYTES), everywhere,
                            what="the updated parameters")
        wire = [sync, gather, Collective(ALL_REDUCE, (SCALAR,), everywhere, times=2, what="the loss and the norm")]
        # the whole model; its gradient and moments split (+ the full gradients before the scatter,
        # which on one GPU are the split ones)
        state = 4 * s.params + 12 * s.params / s.gpus + (4 * s.params if s.gpus > 1 else 0)
        return Cost(s.total_flops / s.gpus / s.slowest, wire,
                    state + activations(s.cfg, s.batch / s.gpus / s.m, s.seq, s.value, 1),
                    notes=[f"{sync.kind} + all-gather, {len(gather.nbytes)} buckets"])
