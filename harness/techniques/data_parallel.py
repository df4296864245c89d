"""Data: data parallelism, as alpa.DataParallel.

Every device holds the whole model and optimizer state and takes 1/N of the batch. After the
backward pass the gradients are all-reduced over all N devices, so every device applies the
same update. The all-reduce moves the full gradient (4 bytes per parameter) across the VMs once
per step: this is what a slow network between VMs makes expensive. With combine, the gradients
travel in buckets of up to 30 MiB, one all-reduce each, as XLA's GPU combiner and NCCL send them
(buckets.py).
"""
import jax
import optax
from jax.sharding import PartitionSpec as P

from harness.core import model, optim
from harness.core.config import GPTConfig, Technique, TrainConfig
from harness.techniques import buckets
from harness.techniques.common import ALL, ClusterShape, Plan, accumulate, check_divisible, make_mesh
from harness.techniques.contract import (
    ALL_REDUCE,
    SCALAR,
    Collective,
    Cost,
    ParallelMethod,
    Step,
    activations,
    gradient_buckets,
    register,
)


@register
class DataParallel(ParallelMethod):
    name = Technique.DATA
    combines = True

    def __init__(self, micro_batches: int = 1, combine: bool = False):
        """combine: concatenate each 30 MiB bucket into one buffer before the all-reduce, as GPUs
        send gradients; off, XLA decides (its CPU runtime then sends them tensor by tensor)."""
        self.micro_batches, self.combine = micro_batches, combine

    def validate(self, model_cfg: GPTConfig, shape: ClusterShape, batch: int) -> None:
        check_divisible("batch", batch, shape.n_devices * self.micro_batches, "devices x microbatches")

    def build(self, model_cfg: GPTConfig, shape: ClusterShape, cfg: TrainConfig, total_steps: int,
              devices=None) -> Plan:
        self.validate(model_cfg, shape, cfg.batch_size)
        mesh = make_mesh(shape, devices)
        n = shape.n_devices
        graphdef, abstract = model.abstract_init(model_cfg)
        optimizer = optim.make(cfg, total_steps, abstract)

        def device_step(params, opt_state, inputs, targets):
            # Gradients of this device's slice of the batch, kept per device ("varying") so that
            # the all-reduce below is the one written here, not one inserted by autodiff.
            local = jax.lax.pcast(params, ALL, to="varying")
            grad_fn = jax.value_and_grad(lambda p, x, y: model.loss_fn(graphdef, p, x, y))
            loss, grads = accumulate(grad_fn, local, inputs, targets, self.micro_batches)
            # the all-reduce
            summed = buckets.psum(grads, ALL) if self.combine else jax.tree.map(lambda g: jax.lax.psum(g, ALL), grads)
            grads = jax.tree.map(lambda g: g / n, summed)
            loss = jax.lax.psum(loss, ALL) / n
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        replicated = jax.tree.map(lambda _: P(), abstract)
        opt_specs = jax.tree.map(lambda _: P(), jax.eval_shape(optimizer.init, abstract))
        step = jax.shard_map(device_step, mesh=mesh, in_specs=(P(), P(), P(ALL), P(ALL)), out_specs=(P(), P(), P()))
        return Plan(
            technique=self.name, mesh=mesh, micro_batches=self.micro_batches,
            layout=lambda params: params, param_specs=replicated,
            opt_init=optimizer.init, opt_specs=opt_specs,
            batch_layout=lambda x: x, batch_spec=P(ALL),
            step=jax.jit(step, donate_argnums=(0, 1)),
            details={"parameters": "replicated on every device",
                     "optimizer state": "replicated on every device",
                     "batch": f"split over all {n} devices",
                     "gradient sync": f"all-reduce over all {n} devices (crosses VMs)"
                                      + (", in buckets of up to 30 MiB" if self.combine else "")},
        )

    @staticmethod
    def cost(s: Step) -> Cost:
        """Every GPU holds everything; the gradients are all-reduced once per step, after the last
        microbatch (Alpa's accumulation skips the sync on the others), in buckets back to back."""
        everywhere = (s.hosts, s.d)
        wire = [Collective(ALL_REDUCE, gradient_buckets(s.cfg, s.net, buckets.ALL_REDUCE_COMBINE_BYTES), everywhere,
                           what="the gradients"),
                Collective(ALL_REDUCE, (SCALAR,), everywhere, what="the loss")]
        state = 16 * s.params  # parameters, gradients, Adam's two moments, float32
        return Cost(s.total_flops / s.gpus / s.slowest, wire,
                    state + activations(s.cfg, s.batch / s.gpus / s.m, s.seq, s.value, 1),
                    notes=[f"{len(wire[0].nbytes)} buckets"])
