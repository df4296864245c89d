"""The optimizer of the paper's most likely setup (Alpa's run_clm_flax): clip at global norm 1,
then AdamW with linear warm-up and linear decay, no weight decay on biases and LayerNorm scales."""
import jax
import jax.numpy as jnp
import optax

from harness.core.config import TrainConfig


def schedule(cfg: TrainConfig, total_steps: int) -> optax.Schedule:
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else total_steps // 10
    warmup = min(warmup, total_steps)
    return optax.join_schedules(
        [optax.linear_schedule(0.0, cfg.learning_rate, max(warmup, 1)),
         optax.linear_schedule(cfg.learning_rate, 0.0, max(total_steps - warmup, 1))],
        boundaries=[warmup],
    )


def decays(path) -> bool:
    """Weight decay applies to matrices and embeddings, as in the Hugging Face Flax examples."""
    return getattr(path[-1], "key", None) not in ("bias", "scale")


def clip_by_global_norm(max_norm: float, norm_fn=optax.tree.norm) -> optax.GradientTransformation:
    """optax's clip_by_global_norm with the norm as a parameter: a technique whose gradients are
    spread over devices (ZeRO2's shards, Pipeshard's stages) passes a norm that sums across them."""
    def clip(grads, params=None):
        norm = norm_fn(grads)
        return jax.tree.map(lambda g: jnp.where(norm < max_norm, g, g / norm * max_norm), grads)

    return optax.stateless(clip)


def make(cfg: TrainConfig, total_steps: int, params, norm_fn=optax.tree.norm) -> optax.GradientTransformation:
    """params: any tree with the model's leaf names (a technique's layout of them will do)."""
    mask = jax.tree_util.tree_map_with_path(lambda path, _: decays(path), params)
    return optax.chain(
        clip_by_global_norm(cfg.grad_clip_norm, norm_fn),
        optax.adamw(schedule(cfg, total_steps), b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps,
                    weight_decay=cfg.weight_decay, mask=mask),
    )
