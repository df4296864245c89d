"""GPT-2 in Flax NNX: causal self-attention, pre-LayerNorm, learned positions, GELU MLP, tied embeddings.

The model knows nothing about devices or parallelism: techniques place its parameters with
sharding rules keyed by parameter path, and a pipeline cuts the stacked layers along their
leading axis. The n_layer blocks are created with nnx.vmap, so every block parameter has a
leading layer axis, and run with lax.scan, so compile time does not grow with depth; with
cfg.remat each block is recomputed in the backward pass (jax.checkpoint, keeping what
cfg.remat_saves names). With cfg.vocab_multiple the embedding has padded_vocab rows; the head drops
the padding's logits, so every caller sees vocab_size of them.

Functional use, as the trainer and techniques need it:
    graphdef, params = init(cfg, seed)        # params: nested dict of arrays
    logits = apply(graphdef, params, tokens)  # tokens: int32 [batch, seq]
"""
import math

import jax
import jax.numpy as jnp
from flax import nnx

from harness.core.config import GPTConfig

INIT_STD = 0.02  # GPT-2's initializer_range
REMAT_POLICIES = {"nothing": None, "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


def _normal(std):
    return nnx.initializers.normal(stddev=std)


class Attention(nnx.Module):
    def __init__(self, cfg: GPTConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        dtype = jnp.dtype(cfg.dtype)
        heads = (cfg.n_head, cfg.head_dim)
        # q, k and v keep an explicit head axis (kernel [H, 3, heads, head_dim]) so that a
        # tensor-parallel split by heads is exact; the parameter count is GPT-2's fused c_attn.
        self.qkv = nnx.LinearGeneral(cfg.n_embd, (3, *heads), kernel_init=_normal(INIT_STD), dtype=dtype, rngs=rngs)
        # Residual projections are scaled down with depth, as in GPT-2, so the residual stream's
        # variance does not grow with the number of layers.
        proj_std = INIT_STD / math.sqrt(2 * cfg.n_layer)
        self.proj = nnx.LinearGeneral(heads, cfg.n_embd, axis=(-2, -1), kernel_init=_normal(proj_std),
                                      dtype=dtype, rngs=rngs)

    def __call__(self, x):
        qkv = self.qkv(x)  # [batch, seq, 3, heads, head_dim]
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        return self.proj(attention(q, k, v, self.cfg))


def attention(q, k, v, cfg: GPTConfig):
    """Causal attention over [batch, seq, heads, head_dim]. cudnn: jax.nn.dot_product_attention's
    fused cuDNN kernel, which never keeps the [seq, seq] scores; xla: the scores written out for
    XLA to fuse, float32 from the scores on (jax.nn's XLA path asks CPUs for float16 products with
    float32 sums, which they refuse). auto: cuDNN where it applies, a GPU computing in 16 bits,
    falling back to XLA where cuDNN refuses the shapes or is missing."""
    if cfg.attention == "cudnn" or (cfg.attention == "auto" and jax.default_backend() == "gpu"
                                    and cfg.dtype != "float32"):  # cuDNN's kernel has no float32
        try:
            return jax.nn.dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(cfg.head_dim),
                                                implementation="cudnn")
        except (RuntimeError, ValueError, NotImplementedError):
            if cfg.attention == "cudnn":
                raise
    seq = q.shape[1]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / math.sqrt(cfg.head_dim)
    scores = jnp.where(jnp.tril(jnp.ones((seq, seq), dtype=bool)), scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


class MLP(nnx.Module):
    def __init__(self, cfg: GPTConfig, rngs: nnx.Rngs):
        dtype = jnp.dtype(cfg.dtype)
        self.fc = nnx.Linear(cfg.n_embd, 4 * cfg.n_embd, kernel_init=_normal(INIT_STD), dtype=dtype, rngs=rngs)
        proj_std = INIT_STD / math.sqrt(2 * cfg.n_layer)
        self.proj = nnx.Linear(4 * cfg.n_embd, cfg.n_embd, kernel_init=_normal(proj_std), dtype=dtype, rngs=rngs)

    def __call__(self, x):
        return self.proj(jax.nn.gelu(self.fc(x), approximate=True))  # GPT-2's tanh GELU


def layer_norm(cfg: GPTConfig, rngs: nnx.Rngs) -> nnx.LayerNorm:
    """Its output in the model's arithmetic: left to its float32 parameters, a 16-bit model's
    residual stream would be widened to float32 after every norm (Flax takes the statistics in
    float32 either way)."""
    return nnx.LayerNorm(cfg.n_embd, epsilon=1e-5, dtype=jnp.dtype(cfg.dtype), rngs=rngs)


def _dropout(x, rate, key):
    if rate == 0.0 or key is None:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


class Block(nnx.Module):
    def __init__(self, cfg: GPTConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        self.ln_1 = layer_norm(cfg, rngs)
        self.attn = Attention(cfg, rngs)
        self.ln_2 = layer_norm(cfg, rngs)
        self.mlp = MLP(cfg, rngs)

    def __call__(self, x, dropout_key=None):
        k1, k2 = jax.random.split(dropout_key) if dropout_key is not None else (None, None)
        x = x + _dropout(self.attn(self.ln_1(x)), self.cfg.dropout, k1)
        return x + _dropout(self.mlp(self.ln_2(x)), self.cfg.dropout, k2)


class GPT(nnx.Module):
    def __init__(self, cfg: GPTConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        # dtype: the tied head's matmul (attend) in the model's arithmetic, not its float32 parameters'.
        self.wte = nnx.Embed(cfg.padded_vocab, cfg.n_embd, embedding_init=_normal(INIT_STD),
                             dtype=jnp.dtype(cfg.dtype), rngs=rngs)
        self.wpe = nnx.Embed(cfg.n_positions, cfg.n_embd, embedding_init=_normal(INIT_STD), rngs=rngs)

        @nnx.split_rngs(splits=cfg.n_layer)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def stacked_blocks(rngs):
            return Block(cfg, rngs)

        self.blocks = stacked_blocks(rngs)
        self.ln_f = layer_norm(cfg, rngs)
        if not cfg.tie_embeddings:
            self.lm_head = nnx.Linear(cfg.n_embd, cfg.padded_vocab, use_bias=False,
                                      kernel_init=_normal(INIT_STD), dtype=jnp.dtype(cfg.dtype), rngs=rngs)

    def embed(self, tokens, dropout_key=None):
        positions = jnp.arange(tokens.shape[-1])
        x = (self.wte(tokens) + self.wpe(positions)).astype(jnp.dtype(self.cfg.dtype))
        return _dropout(x, self.cfg.dropout, dropout_key)

    def run_blocks(self, x, dropout_key=None, active=None, always=0):
        """Apply the blocks self.blocks holds, in order.

        A pipeline stage holds a slice of the layers, padded with layers of zeros to the longest
        stage. active (bool per layer, known only when the step runs) marks the real ones; the first
        `always` layers (known when tracing) are real on every stage and run in the scan, and each
        later layer runs under a branch that a padded layer skips. Computed and dropped instead, a
        shorter stage's padding would cost what the longest stage's layers cost, and the stage with
        the output head would run both: a longer stage than any of Alpa's. The branches stay out of
        the scan, since a branch inside it makes XLA keep and zero-fill every layer's intermediates,
        which doubled a stage's step on CPU.
        """
        graphdef, state = nnx.split(self.blocks)
        layers = jax.tree.leaves(state)[0].shape[0]
        keys = jax.random.split(dropout_key, layers) if dropout_key is not None else [None] * layers

        def block(h, block_state, key):
            return nnx.merge(graphdef, block_state)(h, key)

        if self.cfg.remat:
            block = jax.checkpoint(block, policy=REMAT_POLICIES[self.cfg.remat_saves])

        scanned = layers if active is None else always
        if scanned:
            first = jax.tree.map(lambda a: a[:scanned], state)
            x, _ = jax.lax.scan(lambda h, part: (block(h, *part), None), x,
                                (first, keys[:scanned] if dropout_key is not None else None),
                                unroll=min(self.cfg.scan_unroll, scanned))
        for i in range(scanned, layers):  # the layer's parameters as operands: closed over, they cost more memory
            x = jax.lax.cond(active[i], block, lambda h, *_: h, x, jax.tree.map(lambda a: a[i], state), keys[i])
        return x

    def head(self, x):
        x = self.ln_f(x)
        logits = self.wte.attend(x) if self.cfg.tie_embeddings else self.lm_head(x)
        # The padding's rows see no token and its columns no target: dropped here, they get zero
        # gradients and change no loss.
        return logits[..., :self.cfg.vocab_size].astype(jnp.float32)

    def __call__(self, tokens, dropout_key=None):
        k_embed, k_blocks = jax.random.split(dropout_key) if dropout_key is not None else (None, None)
        return self.head(self.run_blocks(self.embed(tokens, k_embed), k_blocks))


def init(cfg: GPTConfig, seed: int = 0):
    """Build the model and return (graphdef, params) with params as a nested dict of arrays."""
    graphdef, state = nnx.split(GPT(cfg, nnx.Rngs(seed)))
    return graphdef, nnx.to_pure_dict(state)


def abstract_init(cfg: GPTConfig):
    """(graphdef, params) with params as ShapeDtypeStructs: paper-scale trees without memory."""
    graphdef, state = nnx.split(nnx.eval_shape(lambda: GPT(cfg, nnx.Rngs(0))))
    return graphdef, jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(state))


def apply(graphdef, params, tokens, dropout_key=None):
    return nnx.merge(graphdef, params)(tokens, dropout_key)


def token_losses(logits, targets):
    """Next-token cross-entropy per position, in float32."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


def loss_fn(graphdef, params, inputs, targets, dropout_key=None):
    """Mean next-token cross-entropy; with cfg.loss_chunks, over slices of the sequence in turn."""
    net = nnx.merge(graphdef, params)
    chunks = net.cfg.loss_chunks
    if chunks == 1:
        return token_losses(net(inputs, dropout_key), targets).mean()
    batch, seq = targets.shape
    if seq % chunks:
        raise ValueError(f"model {net.cfg.name}: loss_chunks {chunks} does not divide the sequence of {seq} tokens")
    k_embed, k_blocks = jax.random.split(dropout_key) if dropout_key is not None else (None, None)
    hidden = net.run_blocks(net.embed(inputs, k_embed), k_blocks)
    slices = hidden.reshape(batch, chunks, seq // chunks, -1).swapaxes(0, 1)
    wanted = targets.reshape(batch, chunks, seq // chunks).swapaxes(0, 1)

    @jax.checkpoint  # the backward pass recomputes a slice's logits instead of keeping them all
    def slice_loss(h, t):
        return token_losses(net.head(h), t).sum()

    # lax.map, a scan without a carry: in a technique's shard_map a carry would have to say on which
    # devices it varies.
    return jax.lax.map(lambda ht: slice_loss(*ht), (slices, wanted)).sum() / targets.size
