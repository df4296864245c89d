"""Shard-alpa: intra-operator parallelism as alpa.ShardParallel planned and ran it for the paper.

Alpa's ShardParallel flattens the cluster's (VMs, GPUs) mesh into one axis of all N GPUs, and its
auto-sharding solver (an ILP over every operator's sharding) prices communication only, with the
alpha-beta constants below: the host boundary and the link's latency are invisible to it, and it
sees one microbatch of activation traffic against one whole gradient sync. It may not replicate
a matmul (allow_recompute_heavy_op is off), so every matmul is split over all N GPUs: by the batch
(its weight's gradient then needs an all-reduce) or by the weight (its activations then need
collectives in every microbatch).

For a GPT the ILP's choice comes down to two decisions, which `solve` prices as the ILP does:
- the blocks: split by the batch (gradient sync of 12 h^2 values a block) or Megatron-style by
  heads and hidden units (four all-reduces of the microbatch's activations a block). Mixing the
  two inside a block adds resharding (an all-gather and a reduce-scatter of the activations at each
  change) and is never cheaper than the better of the two at Alpa's constants;
- the vocabulary-sized matrices (the tied embedding and head): split by the batch (a gradient
  sync of V h values) or by the vocabulary (the activations gathered for the head, the lookup's
  rows reduce-scattered, and three all-reduces of one value per token for the cross-entropy).
  With tensor-split blocks the activations are already on every GPU, so only the vocabulary split
  is offered there: a batch-split head would have to be cheaper than a few per-token values,
  which takes a vocabulary smaller than the width.

The step runs as Alpa's did: each microbatch's activation collectives inside the microbatch loop,
the gradients of everything split by the batch summed once per step after the last microbatch
(Alpa's gradient-accumulation rewrite), one all-reduce per tensor as the grouped NCCL call sends
them (or in buckets, `combine`), and the optimizer on each GPU's shard, the global norm summed
across them. It is written per device (shard_map over the flattened axis), so every collective
in its program is one named here.

The paper's claims run this suite's own planner as Shard by default (shard_parallel.py: a uniform
mesh too, but with each gradient summed inside every microbatch); this is the Shard that Alpa ran,
which a run casts in Shard's place with --shard Shard-alpa (contract.cast; docs/techniques.md says
why it is not the default).
"""
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import PartitionSpec as P

from harness.core import flops, model, optim
from harness.core.config import GPTConfig, TrainConfig
from harness.errors import BadInput
from harness.techniques import buckets
from harness.techniques.common import (
    ALL,
    ClusterShape,
    Plan,
    accumulate,
    check_divisible,
    dict_path,
    make_mesh,
    shardings,
)
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
    register,
)

# Alpa's cost constants (alpa/device_mesh.py get_logical_mesh: mesh_alpha (1, 1), mesh_beta
# (1, 0.1); LogicalDeviceMesh.flatten keeps the largest alpha and the smallest beta, so every pair
# of GPUs costs what two GPUs of one host do) and its collectives' prices
# (alpa/shard_parallel/auto_sharding.py, LogicalDeviceMesh.all_reduce_cost and siblings).
ALPHA, BETA = 1.0, 0.1


def all_reduce_cost(nbytes: float, n: int) -> float:
    return ALPHA + BETA * 2 * (n - 1) / n * nbytes + 0.01


def all_gather_cost(nbytes: float, n: int) -> float:
    return ALPHA + BETA * (n - 1) / n * nbytes + 0.1


def reduce_scatter_cost(nbytes: float, n: int) -> float:
    return ALPHA + BETA * (n - 1) / n * nbytes + 0.001


NAME = "Shard-alpa"
DATA, TENSOR, VOCAB = "data", "tensor", "vocab"
PLANS = ((DATA, DATA), (DATA, VOCAB), (TENSOR, VOCAB))  # (blocks, vocabulary matrices)


@dataclass(frozen=True)
class AlpaPlan:
    blocks: str  # DATA: split by the batch; TENSOR: by heads and hidden units
    vocab: str  # DATA: split by the batch; VOCAB: by the vocabulary

    def __post_init__(self):
        if (self.blocks, self.vocab) not in PLANS:
            raise BadInput(f"Shard plan blocks={self.blocks!r}, vocab={self.vocab!r}: expected one of "
                           + ", ".join(f"{b}/{v}" for b, v in PLANS))

    def __str__(self) -> str:
        blocks = "blocks split by the batch" if self.blocks == DATA else "blocks split by heads and hidden units"
        vocab = "embedding and head split by the batch" if self.vocab == DATA else \
            "embedding and head split by the vocabulary"
        return f"{blocks}, {vocab}, over all GPUs as one axis"


def vocab_matrices(cfg: GPTConfig) -> int:
    return cfg.vocab_size * cfg.n_embd * (1 if cfg.tie_embeddings else 2)


def synced_sizes(cfg: GPTConfig, plan: AlpaPlan, scanned: bool = True) -> list[int]:
    """Elements of each tensor whose gradient is summed across the GPUs once per step: whatever is
    split by the batch. Scanned, each block tensor stacked over the layers, as this suite's model
    holds them; unscanned, layer by layer, as Alpa's GPT-2 held them (and its buckets combine)."""
    if plan.blocks == TENSOR:
        return []  # everything not split is computed from activations every GPU holds whole
    h, layers = cfg.n_embd, cfg.n_layer
    blocks = [layers * n for n in flops.block_tensor_sizes(cfg)] if scanned else flops.block_tensor_sizes(cfg) * layers
    vocab = [cfg.vocab_size * h] * (1 if cfg.tie_embeddings else 2) if plan.vocab == DATA else []
    return vocab[:1] + [cfg.n_positions * h] + blocks + [h, h] + vocab[1:]


def split_elements(cfg: GPTConfig, plan: AlpaPlan) -> int:
    """Parameters held in parts, one per GPU."""
    h = cfg.n_embd
    tensor = cfg.n_layer * (12 * h * h + 3 * h + 4 * h) if plan.blocks == TENSOR else 0
    return tensor + (vocab_matrices(cfg) if plan.vocab == VOCAB else 0)


def solve(cfg: GPTConfig, n: int, micro_batch: float, seq: int, value: int = 4) -> tuple[AlpaPlan, dict]:
    """The plan Alpa's solver picks on a flat mesh of n GPUs, with every plan's objective: one
    microbatch of `micro_batch` sequences, communication only, at Alpa's constants. Ties go to
    the batch split, the first in Alpa's strategy order. Blocks split by heads are a plan only
    where the GPUs divide the heads, as Alpa generates only the shardings that divide a dimension."""
    h, layers = cfg.n_embd, cfg.n_layer
    act = micro_batch * seq * h * value
    tokens = micro_batch * seq * SCALAR
    objective = {}
    for blocks, vocab in PLANS:
        if blocks == TENSOR and cfg.n_head % n:
            continue
        plan = AlpaPlan(blocks, vocab)
        cost = sum(all_reduce_cost(4 * s, n) for s in synced_sizes(cfg, plan, scanned=False))
        if blocks == TENSOR:
            cost += 4 * layers * all_reduce_cost(act, n)
        if vocab == VOCAB and blocks == DATA:
            cost += 2 * all_gather_cost(tokens, n)  # the microbatch's token ids and targets
            cost += 2 * (all_gather_cost(act, n) + reduce_scatter_cost(act, n))  # lookup rows, head input
            cost += 3 * all_reduce_cost(tokens, n)  # cross-entropy: max, sum of exponentials, target logit
        elif vocab == VOCAB:
            cost += 2 * all_gather_cost(tokens, n) + 2 * all_reduce_cost(act, n) + 3 * all_reduce_cost(tokens, n)
        objective[plan] = cost
    return min(objective, key=objective.get), objective


# Where each block tensor is split when the blocks are split by heads and hidden units (a leading
# layer axis first): q, k and v by heads, the attention's output projection by its input heads,
# the MLP's first layer by its outputs and its second by its inputs.
TENSOR_SPLIT = {("attn", "qkv", "kernel"): 3, ("attn", "qkv", "bias"): 2, ("attn", "proj", "kernel"): 1,
                ("mlp", "fc", "kernel"): 2, ("mlp", "fc", "bias"): 1, ("mlp", "proj", "kernel"): 1}


def split_dim(path: tuple[str, ...], plan: AlpaPlan) -> int | None:
    """The dimension of a parameter split over the GPUs, None where every GPU holds all of it."""
    if plan.vocab == VOCAB and path[-2:] == ("wte", "embedding"):
        return 0
    if plan.vocab == VOCAB and path[-2:] == ("lm_head", "kernel"):
        return 1
    if plan.blocks == TENSOR and path[0] == "blocks":
        return TENSOR_SPLIT.get(path[-3:])
    return None


def spec_of(path: tuple[str, ...], ndim: int, plan: AlpaPlan) -> P:
    dim = split_dim(path, plan)
    return P() if dim is None else P(*[ALL if i == dim else None for i in range(ndim)])


def padded_vocab(cfg: GPTConfig, n: int) -> int:
    return -(-cfg.padded_vocab // n) * n  # the model's own padding first (cfg.vocab_multiple)


def vocab_part(n_rows: int, vocab: int):
    """This GPU's first row of the vocabulary, and which of its rows are words (not padding)."""
    first = jax.lax.axis_index(ALL) * n_rows
    return first, first + jnp.arange(n_rows) < vocab


def lookup(table, ids, vocab: int):
    """The rows of this GPU's part of the table for the ids given, zeros for other GPUs' words."""
    first, _ = vocab_part(table.shape[0], vocab)
    local = ids - first
    mine = (local >= 0) & (local < table.shape[0])
    return jnp.where(mine[..., None], jnp.take(table, jnp.clip(local, 0, table.shape[0] - 1), axis=0), 0)


def cross_entropy(logits, targets, vocab: int):
    """Mean cross-entropy over logits split by the vocabulary, with three all-reduces of one value a
    token: the largest logit, the sum of exponentials, the target's logit."""
    first, words = vocab_part(logits.shape[-1], vocab)
    logits = jnp.where(words, logits, jnp.finfo(jnp.float32).min)
    top = jax.lax.pmax(jax.lax.stop_gradient(logits.max(-1)), ALL)
    total = jax.lax.psum(jnp.exp(logits - top[..., None]).sum(-1), ALL)
    local = targets - first
    mine = (local >= 0) & (local < logits.shape[-1])
    picked = jnp.take_along_axis(logits, jnp.clip(local, 0, logits.shape[-1] - 1)[..., None], -1)[..., 0]
    return (jnp.log(total) + top - jax.lax.psum(jnp.where(mine, picked, 0.0), ALL)).mean()


def tensor_blocks(blocks, x, cfg: GPTConfig):
    """The blocks split by heads and hidden units (Megatron's): each GPU computes its heads and
    hidden units, and the two output projections' partial sums are all-reduced; autodiff of the
    same all-reduces the gradient at each split's input in the backward pass."""
    dtype = jnp.dtype(cfg.dtype)
    norm = nnx.graphdef(nnx.eval_shape(lambda: model.layer_norm(cfg, nnx.Rngs(0))))
    w = lambda p: p.astype(dtype)

    def block(x, p):
        a, f = p["attn"], p["mlp"]
        h = nnx.merge(norm, p["ln_1"])(x)
        qkv = jnp.einsum("bse,ethd->bsthd", h, w(a["qkv"]["kernel"])) + w(a["qkv"]["bias"])
        heads = model.attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], cfg)
        x = x + jax.lax.psum(jnp.einsum("bshd,hde->bse", heads, w(a["proj"]["kernel"])), ALL) + w(a["proj"]["bias"])
        h = jax.nn.gelu(nnx.merge(norm, p["ln_2"])(x) @ w(f["fc"]["kernel"]) + w(f["fc"]["bias"]), approximate=True)
        return x + jax.lax.psum(h @ w(f["proj"]["kernel"]), ALL) + w(f["proj"]["bias"]), None

    return jax.lax.scan(jax.checkpoint(block, policy=model.REMAT_POLICIES[cfg.remat_saves]) if cfg.remat else block,
                        x, blocks)[0]


def sum_synced(grads, synced, combine: bool):
    """Each GPU's part of the gradients of what is split by the batch, summed over all GPUs: tensor
    by tensor, or in 30 MiB buckets (combine)."""
    leaves, treedef = jax.tree.flatten(grads)
    marks = jax.tree.leaves(synced)
    parts = [g for g, s in zip(leaves, marks) if s]
    summed = iter(buckets.psum(parts, ALL) if combine else [jax.lax.psum(g, ALL) for g in parts])
    return jax.tree.unflatten(treedef, [next(summed) if s else g for g, s in zip(leaves, marks)])


@register
class AlpaShardParallel(ParallelMethod):
    name = NAME
    combines = True

    def __init__(self, micro_batches: int = 1, combine: bool = False, plan: AlpaPlan | None = None):
        """combine: the once-per-step gradient sync in 30 MiB buckets (as Data's); plan: a given
        plan instead of the solver's."""
        self.micro_batches, self.combine, self.plan = micro_batches, combine, plan

    def validate(self, model_cfg: GPTConfig, shape: ClusterShape, batch: int, seq: int | None = None) -> None:
        n = shape.n_devices
        check_divisible("batch", batch, n * self.micro_batches, "devices x microbatches")
        plan = self.plan_for(model_cfg, n, batch, seq or model_cfg.n_positions)
        if plan.blocks == TENSOR and model_cfg.n_head % n:
            raise BadInput(f"Shard plan {plan}: {n} GPUs do not divide n_head {model_cfg.n_head}")

    def plan_for(self, model_cfg: GPTConfig, n: int, batch: int, seq: int) -> AlpaPlan:
        value = jnp.dtype(model_cfg.dtype).itemsize
        return self.plan or solve(model_cfg, n, batch / self.micro_batches, seq, value)[0]

    def build(self, model_cfg: GPTConfig, shape: ClusterShape, cfg: TrainConfig, total_steps: int,
              devices=None) -> Plan:
        seq = cfg.resolved_seq_len(model_cfg)
        self.validate(model_cfg, shape, cfg.batch_size, seq)
        mesh, n, m = make_mesh(shape, devices), shape.n_devices, self.micro_batches
        plan = self.plan_for(model_cfg, n, cfg.batch_size, seq)
        vocab = model_cfg.vocab_size
        padded = padded_vocab(model_cfg, n) if plan.vocab == VOCAB else vocab
        graphdef, canonical = model.abstract_init(model_cfg)
        dtype = jnp.dtype(model_cfg.dtype)

        def layout(params):
            """The vocabulary matrices padded with zero rows to a multiple of the GPUs."""
            def pad(path, x):
                dim = split_dim(dict_path(path), plan)
                if plan.vocab != VOCAB or dict_path(path)[0] not in ("wte", "lm_head") or x.shape[dim] == padded:
                    return x
                widths = [(0, padded - x.shape[dim]) if i == dim else (0, 0) for i in range(x.ndim)]
                return jnp.pad(x, widths)
            return jax.tree_util.tree_map_with_path(pad, params)

        def unpadded(params, _):
            """layout's inverse: the vocabulary matrices without the rows it added."""
            def cut(path, x):
                dim = split_dim(dict_path(path), plan)
                if plan.vocab != VOCAB or dict_path(path)[0] not in ("wte", "lm_head"):
                    return x
                return jax.lax.slice_in_dim(x, 0, model_cfg.padded_vocab, axis=dim)
            return jax.tree_util.tree_map_with_path(cut, params)

        abstract = jax.eval_shape(layout, canonical)
        specs = jax.tree_util.tree_map_with_path(lambda p, x: spec_of(dict_path(p), x.ndim, plan), abstract)
        optimizer = optim.make(cfg, total_steps, abstract)
        opt_specs = jax.tree_util.tree_map_with_path(
            lambda p, x: spec_of(dict_path(p), x.ndim, plan) if dict_path(p) else P(),
            jax.eval_shape(optimizer.init, abstract))
        synced = jax.tree_util.tree_map_with_path(
            lambda p, _: plan.blocks == DATA and split_dim(dict_path(p), plan) is None, abstract)
        tables = lambda params: (params["wte"]["embedding"], params["wte"]["embedding"] if model_cfg.tie_embeddings
                                 else params["lm_head"]["kernel"].T)  # the lookup's, the head's

        def microbatch_loss(params, ids, targets):
            """One microbatch, this GPU's rows of it: the loss and what autodiff needs."""
            gpt = nnx.merge(graphdef, params)  # ln_f, positions and the data-split blocks, as the model runs them
            wte, head = tables(params)
            positions = params["wpe"]["embedding"][: ids.shape[-1]]
            if plan.vocab == DATA:  # as Data: this GPU's rows through the whole model
                x = (jnp.take(wte, ids, axis=0).astype(dtype) + positions).astype(dtype)
                logits = jnp.einsum("bse,ve->bsv", gpt.ln_f(gpt.run_blocks(x)), head.astype(dtype)).astype(jnp.float32)
                return model.token_losses(logits, targets).sum() / (ids.size * n)  # of the whole microbatch's tokens
            every_id = jax.lax.all_gather(ids, ALL, tiled=True)
            every_target = jax.lax.all_gather(targets, ALL, tiled=True)
            found = lookup(wte, every_id, vocab).astype(dtype)  # this GPU's words' rows, for every token
            if plan.blocks == DATA:
                x = jax.lax.psum_scatter(found, ALL, scatter_dimension=0, tiled=True)  # this GPU's rows, summed
                x = gpt.ln_f(gpt.run_blocks((x + positions).astype(dtype)))
                x = jax.lax.all_gather(x, ALL, tiled=True)  # every token for the head
            else:
                x = (jax.lax.psum(found, ALL) + positions).astype(dtype)
                x = gpt.ln_f(tensor_blocks(params["blocks"], x, model_cfg))
            logits = jnp.einsum("bse,ve->bsv", x, head.astype(dtype)).astype(jnp.float32)
            return cross_entropy(logits, every_target, vocab)

        def device_step(params, inputs, targets):
            # What is split by the batch is kept per GPU ("varying"), so that its gradient is this
            # GPU's part, summed below once per step, not by autodiff inside every microbatch.
            local = jax.tree.map(lambda x, s: jax.lax.pcast(x, ALL, to="varying") if s else x, params, synced)
            loss, grads = accumulate(jax.value_and_grad(microbatch_loss), local, inputs, targets, m)
            return jax.lax.psum(loss, ALL) if plan.vocab == DATA else loss, sum_synced(grads, synced, self.combine)

        gradients = jax.shard_map(device_step, mesh=mesh, in_specs=(specs, P(ALL), P(ALL)), out_specs=(P(), specs))

        def step(params, opt_state, inputs, targets):
            # The optimizer runs on each GPU's shard of what is split; its global norm sums over them.
            loss, grads = gradients(params, inputs, targets)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        ps, os_, bs = shardings(mesh, specs), shardings(mesh, opt_specs), shardings(mesh, P(ALL))
        return Plan(
            technique=self.name, mesh=mesh, micro_batches=m,
            layout=layout, param_specs=specs, opt_init=optimizer.init, opt_specs=opt_specs, canonical=unpadded,
            batch_layout=lambda x: x, batch_spec=P(ALL),
            step=jax.jit(step, in_shardings=(ps, os_, bs, bs), out_shardings=(ps, os_, shardings(mesh, P())),
                         donate_argnums=(0, 1)),
            details={"plan": f"{plan} ({'given' if self.plan else 'chosen as Alpa solves it'})",
                     "gradient sync": "once per step, after the last microbatch"
                                      + (", in buckets of up to 30 MiB" if self.combine else ", tensor by tensor")},
        )

    @staticmethod
    def cost(s: Step) -> Cost:
        """Alpa's plan for this step (`solve`): the activations' collectives in every microbatch,
        the batch-split gradients summed once per step, all over every GPU of every VM used."""
        cfg, m, n = s.cfg, s.m, s.gpus
        plan, _ = solve(cfg, n, s.batch / m, s.seq, s.value)
        everywhere, micro = (s.hosts, s.d), s.batch / m
        act, tokens = micro * s.seq * cfg.n_embd * s.value, micro * s.seq * SCALAR
        sizes = [4 * x for x in synced_sizes(cfg, plan, scanned=s.net.per_tensor)]
        if not s.net.per_tensor:
            sizes = [sum(sizes[i] for i in group) for group in buckets.plan(sizes, buckets.ALL_REDUCE_COMBINE_BYTES)]
        wire = [Collective(ALL_REDUCE, tuple(sizes), everywhere, what="the batch-split gradients")] if sizes else []

        def each_microbatch(kind, nbytes, times, what):
            wire.append(Collective(kind, (nbytes,), everywhere, times=times * m, per_microbatch=True, what=what))

        if plan.blocks == TENSOR:
            each_microbatch(ALL_REDUCE, act, 4 * cfg.n_layer, "the blocks' activations and their gradients")
        if plan.vocab == VOCAB:
            each_microbatch(ALL_GATHER, tokens, 2, "the token ids and targets")
            each_microbatch(ALL_REDUCE, tokens, 3, "the cross-entropy's largest logit, sum of exponentials and target")
            if plan.blocks == DATA:
                each_microbatch(REDUCE_SCATTER, act, 2, "the looked-up rows; the head's input gradient")
                each_microbatch(ALL_GATHER, act, 2, "the head's input; the looked-up rows' gradient")
            else:
                each_microbatch(ALL_REDUCE, act, 2, "the looked-up rows; the head's input gradient")
        scalars = ["the loss"] if plan.vocab == DATA else []  # split by the vocabulary, every GPU has it
        split = split_elements(cfg, plan)
        scalars += ["the gradients' norm, summed over the GPUs' parts"] if split else []
        if scalars:
            wire.append(Collective(ALL_REDUCE, (SCALAR,), everywhere, times=len(scalars), what=" and ".join(scalars)))
        memory = 16 * (flops.param_count(cfg) - split + split / n) \
            + activations(cfg, micro / (n if plan.blocks == DATA else 1), s.seq, s.value,
                          n if plan.blocks == TENSOR else 1)
        return Cost(s.total_flops / n / s.slowest, wire, memory, notes=[f"plan (Alpa's, on a flat mesh): {plan}"])
