"""Pipeshard's stages: where the layers are cut (stage_sizes, for the timed technique too) and, for
the memory analysis, one program per stage on its own submesh, as Alpa runs them.

Alpa's PipeshardParallel is MPMD: it compiles a program per pipeline stage for that stage's
submesh, so a stage's GPUs hold that stage's layers, their gradients and Adam moments, and the
activations of the microbatches in flight; nothing of the other stages. The timed technique
(pipeshard.py) is one SPMD program in which every device is sized for the deepest stage and
keeps the schedule's per-tick buffers: right for timing the transfers, wrong for memory.

The program of stage s of n, on its submesh (each microbatch split over the submesh's devices and
gradients all-reduced over them, as in the timed technique):
  in:  the stage's parameters and optimizer state; the m microbatches it receives (tokens on the
       first stage, activations elsewhere); the gradients of its outputs that come back (the
       targets on the last stage);
  run: forward and backward of every microbatch with `in_flight` microbatches' activations alive
       at once, gradients accumulated in one buffer; then the optimizer step;
  out: the updated parameters and optimizer state, and the gradients of its inputs to send back.
In-flight microbatches follow the schedule: Alpa's default, 1F1B
(PipeshardParallel(pipeline_schedule="1f1b")), has stage s hold at most min(m, n - s); GPipe
runs every forward before any backward and holds all m. With rematerialisation a stage keeps only
each microbatch's input and recomputes one microbatch's activations at a time in the backward.
"""
import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from harness.core import flops, model, optim
from harness.core.config import GPTConfig, TrainConfig
from harness.errors import BadInput
from harness.techniques.common import DEVICES, ClusterShape, check_divisible, make_mesh

SCHEDULES = ("1f1b", "gpipe")  # Alpa's choices; 1F1B is its default


def balance(n_layers: int, n_stages: int, layer_cost: float, last_extra: float) -> list[int]:
    """Blocks per stage (contiguous, at least one each) minimising the costliest stage."""
    @functools.cache
    def best(layers: int, stages: int) -> tuple[float, tuple[int, ...]]:
        # The last `stages` stages hold the last `layers` blocks; the very last also runs the head.
        if stages == 1:
            return layers * layer_cost + last_extra, (layers,)
        options = []
        for here in range(1, layers - stages + 2):
            rest_cost, rest = best(layers - here, stages - 1)
            options.append((max(here * layer_cost, rest_cost), (here, *rest)))
        return min(options)

    return list(best(n_layers, n_stages)[1])


def stage_sizes(model_cfg: GPTConfig, n_stages: int, batch: int, seq_len: int) -> list[int]:
    """Blocks per stage: the cut Pipeshard makes, balancing Alpa's FLOPs (the head's on the last)."""
    head = flops.head_flops(model_cfg, batch, seq_len)
    layer = (flops.alpa_step_flops(model_cfg, batch, seq_len) - head) / model_cfg.n_layer
    return balance(model_cfg.n_layer, n_stages, layer, head)


def in_flight(schedule: str, stage: int, n_stages: int, m: int) -> int:
    """Microbatches whose activations stage `stage` keeps at its peak, rounded up to a divisor of
    m so that the program runs whole groups of them."""
    if schedule not in SCHEDULES:
        raise BadInput(f"pipeline schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")
    k = m if schedule == "gpipe" else min(m, n_stages - stage)
    return next(g for g in range(k, m + 1) if m % g == 0)


def own_parameters(params: dict, cfg: GPTConfig, sizes: list[int], s: int) -> dict:
    """Stage s's share of the model's parameter tree: its blocks, the embeddings on the first
    stage, the final LayerNorm and the output head on the last (with tied embeddings both the
    first and the last stage keep the embedding matrix, as Alpa does for a variable two stages use)."""
    start, last = sum(sizes[:s]), len(sizes) - 1
    own = {"blocks": jax.tree.map(lambda x: x[start:start + sizes[s]], params["blocks"])}
    if s == 0:
        own["wte"], own["wpe"] = params["wte"], params["wpe"]
    if s == last:
        own["ln_f"] = params["ln_f"]
        if cfg.tie_embeddings:
            own["wte"] = params["wte"]
        else:
            own["lm_head"] = params["lm_head"]
    return own


class StageProgram:
    """The compiled-for-memory program of one stage (see the module's docstring)."""

    def __init__(self, model_cfg: GPTConfig, sizes: list[int], stage: int, micro_batches: int,
                 schedule: str = "1f1b", remat: bool = False):
        self.model_cfg, self.sizes, self.stage, self.m, self.remat = model_cfg, sizes, stage, micro_batches, remat
        self.first, self.last = stage == 0, stage == len(sizes) - 1
        # Rematerialised, the microbatches in flight keep only their inputs (arguments here) and
        # the backward recomputes one microbatch at a time.
        self.group = 1 if remat else in_flight(schedule, stage, len(sizes), micro_batches)
        self.graphdef, _ = model.abstract_init(model_cfg)

    def _net(self, own: dict):
        """The stage's parameters as a model to call. Parts the stage does not hold are empty
        placeholders: the stage never touches them, so they cost nothing."""
        h = self.model_cfg.n_embd
        empty = lambda *shape: jnp.zeros(shape, jnp.float32)
        full = {"blocks": own["blocks"],
                "wte": own.get("wte", {"embedding": empty(0, h)}),
                "wpe": own.get("wpe", {"embedding": empty(0, h)}),
                "ln_f": own.get("ln_f", {"scale": empty(h), "bias": empty(h)})}
        if not self.model_cfg.tie_embeddings:
            full["lm_head"] = own.get("lm_head", {"kernel": empty(h, 0)})
        return nnx.merge(self.graphdef, full)

    def _forward(self, own, x):
        net = self._net(own)
        return net.run_blocks(net.embed(x) if self.first else x)

    def build(self, shape: ClusterShape, cfg: TrainConfig, total_steps: int, batch: int, seq: int, devices=None):
        """(jitted step, abstract arguments) of this stage on a submesh of `shape` (one VM's row)."""
        check_divisible("microbatch", batch // self.m, shape.devices_per_host, "devices per stage")
        mesh = make_mesh(ClusterShape(1, shape.devices_per_host), devices)
        _, canonical = model.abstract_init(self.model_cfg)
        own = jax.eval_shape(lambda p: own_parameters(p, self.model_cfg, self.sizes, self.stage), canonical)
        optimizer = optim.make(cfg, total_steps, own)  # the norm over all stages is one scalar each way
        dtype = jnp.dtype(self.model_cfg.dtype)
        h, groups = self.model_cfg.n_embd, self.m // self.group
        # [groups, k microbatches' rows, ...]: a group's microbatches are in flight together.
        tokens = jax.ShapeDtypeStruct((groups, batch // groups, seq), jnp.int32)
        acts = jax.ShapeDtypeStruct((groups, batch // groups, seq, h), dtype)
        inputs = tokens if self.first else acts
        coming_back = tokens if self.last else acts  # targets, or the gradients of this stage's outputs

        def contribution(p, x, back):
            if self.last:
                net = self._net(p)
                return model.token_losses(net.head(self._forward(p, x)), back).sum()
            return jnp.sum(self._forward(p, x).astype(jnp.float32) * back.astype(jnp.float32))

        if self.remat:
            contribution = jax.checkpoint(contribution)

        def device_step(p, opt_state, xs, backs):
            p_local = jax.lax.pcast(p, DEVICES, to="varying")

            def one_group(acc, group):
                x, back = group
                if self.first:  # token ids have no gradient to send back
                    g_p = jax.grad(contribution)(p_local, x, back)
                    g_x = jnp.zeros((), dtype)
                else:
                    g_p, g_x = jax.grad(contribution, argnums=(0, 1))(p_local, x, back)
                return jax.tree.map(jnp.add, acc, g_p), g_x.astype(dtype)

            zeros = jax.tree.map(jnp.zeros_like, p_local)
            grads, to_send = jax.lax.scan(one_group, zeros, (xs, backs))
            grads = jax.tree.map(lambda g: jax.lax.psum(g, DEVICES), grads)  # data parallel inside the stage
            updates, opt_state = optimizer.update(grads, opt_state, p)
            return optax.apply_updates(p, updates), opt_state, to_send

        opt_abstract = jax.eval_shape(optimizer.init, own)
        rows = P(None, DEVICES)
        step = jax.shard_map(device_step, mesh=mesh, in_specs=(P(), P(), rows, rows),
                             out_specs=(P(), P(), P() if self.first else rows))

        def struct(tree, spec):
            return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, spec)),
                                tree)

        args = (struct(own, P()), struct(opt_abstract, P()), struct(inputs, rows), struct(coming_back, rows))
        return jax.jit(step, donate_argnums=(0, 1)), args

    def describe(self) -> str:
        what = ["embeddings"] * self.first + [f"{self.sizes[self.stage]} blocks"] + ["head"] * self.last
        kept = "inputs kept, recomputed one microbatch at a time" if self.remat else \
            f"activations of {self.group} of {self.m} microbatches kept"
        return f"stage {self.stage}: {' + '.join(what)}, {kept}"


def stage_programs(model_cfg: GPTConfig, shape: ClusterShape, batch: int, seq: int, micro_batches: int,
                   schedule: str = "1f1b", remat: bool = False) -> list[StageProgram]:
    """One program per stage of Pipeshard on `shape` (stages = shape.hosts, each on one row), cut
    where the timed technique cuts."""
    if shape.hosts > model_cfg.n_layer:
        raise BadInput(f"Pipeshard: {shape.hosts} stages but model {model_cfg.name} has only "
                       f"{model_cfg.n_layer} layers")
    check_divisible("batch", batch, micro_batches, "microbatches")
    sizes = stage_sizes(model_cfg, shape.hosts, batch, seq)
    return [StageProgram(model_cfg, sizes, s, micro_batches, schedule, remat) for s in range(shape.hosts)]


__all__ = ["SCHEDULES", "StageProgram", "balance", "in_flight", "own_parameters", "stage_programs", "stage_sizes"]
