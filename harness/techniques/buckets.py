"""Gradients combined into buckets before they cross the network, as on GPUs.

XLA's GPU compiler combines independent all-reduces, reduce-scatters and all-gathers into one
collective while the combined operands stay under a threshold, and NCCL runs the combined op as
one grouped call: one ring, one set of round trips, for many tensors. The thresholds are XLA's
GPU defaults (xla/debug_options_flags.cc: xla_gpu_all_reduce_combine_threshold_bytes = 30 MiB,
xla_gpu_reduce_scatter_combine_threshold_bytes and xla_gpu_all_gather_combine_threshold_bytes =
30 MiB + 7). DeepSpeed's ZeRO buckets the same way (reduce_bucket_size).

XLA's CPU runtime does not: it runs a combined collective operand by operand, each a gloo ring
paying its own round trips (xla/service/cpu/runtime/all_reduce_thunk.cc). Data and ZeRO2 built
with combine=True concatenate each bucket into one flat buffer themselves, which gives the CPU the
GPUs' round trips (tests_cpu/test_bench_tcp.py measures both over the emulated link, side by
side, with scale-small's gradient tensors). The claims' CPU trials combine on similarity-scaled links, the paper's regime, and
not on its literal RTTs, where the CPU runtime's own per-tensor collectives are kept
(harness.suite.backends).
"""
import jax
import jax.numpy as jnp

ALL_REDUCE_COMBINE_BYTES = 30 * 2**20
REDUCE_SCATTER_COMBINE_BYTES = ALL_GATHER_COMBINE_BYTES = 30 * 2**20 + 7


def plan(sizes: list[int], threshold: int) -> list[list[int]]:
    """Consecutive groups of indices whose sizes (bytes) sum to at most `threshold`, greedily in
    program order as XLA's combiners group; a tensor larger than the threshold travels alone."""
    groups, current, total = [], [], 0
    for i, size in enumerate(sizes):
        if current and total + size > threshold:
            groups.append(current)
            current, total = [], 0
        current.append(i)
        total += size
    return groups + [current] if current else groups


def _nbytes(x) -> int:
    return x.size * x.dtype.itemsize


def psum(tree, axis, threshold: int = ALL_REDUCE_COMBINE_BYTES):
    """jax.lax.psum of every leaf, one all-reduce per bucket of concatenated leaves."""
    leaves, treedef = jax.tree.flatten(tree)
    out = [None] * len(leaves)
    for group in plan([_nbytes(x) for x in leaves], threshold):
        flat = jax.lax.psum(jnp.concatenate([leaves[i].reshape(-1) for i in group]), axis)
        for i, part in zip(group, _split(flat, [leaves[i].size for i in group])):
            out[i] = part.reshape(leaves[i].shape)
    return jax.tree.unflatten(treedef, out)


def psum_scatter_rows(rows: list, axis, threshold: int = REDUCE_SCATTER_COMBINE_BYTES) -> list:
    """For arrays [n, k_i] (row j is device j's chunk), each device's summed row of each, one
    reduce-scatter per bucket: a bucket's arrays side by side, [n, sum k_i], scattered by rows."""
    out = [None] * len(rows)
    for group in plan([_nbytes(x) for x in rows], threshold):
        mine = jax.lax.psum_scatter(jnp.concatenate([rows[i] for i in group], axis=1), axis,
                                    scatter_dimension=0, tiled=True)
        for i, part in zip(group, _split(mine[0], [rows[i].shape[1] for i in group])):
            out[i] = part
    return out


def all_gather_rows(chunks: list, axis, n: int, threshold: int = ALL_GATHER_COMBINE_BYTES) -> list:
    """The inverse: each device's chunks [k_i] gathered into [n, k_i], one all-gather per bucket."""
    out = [None] * len(chunks)
    for group in plan([n * _nbytes(x) for x in chunks], threshold):
        side_by_side = jnp.concatenate([chunks[i] for i in group])[None]
        every = jax.lax.all_gather(side_by_side, axis, tiled=True, to="invarying")
        for i, part in zip(group, _split(every, [chunks[i].shape[0] for i in group], axis=1)):
            out[i] = part
    return out


def _split(x, sizes: list[int], axis: int = 0) -> list:
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [jax.lax.slice_in_dim(x, s, s + k, axis=axis) for s, k in zip(starts, sizes)]
