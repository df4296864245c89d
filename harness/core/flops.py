"""Parameter counts and per-step FLOPs, in closed form.

Two FLOP rules are reported side by side, each figure saying which rule it uses:
- "alpa": Alpa's `compute_gpt_tflops`, which the paper used, so TFLOP/s compare with its figures:
      f * B * S * H^2 * L * (1 + S / (6 H)) + 6 * B * S * H * V
  f = 24 forward only, 72 with backward, 96 with backward and activation recomputation.
- "6N+12LHS": the usual training rule behind MFU: per token 6 N for the weight matmuls plus
  12 L H S for attention scores and their use, N counting the weights that take part in matmuls.
"""
from harness.core.config import GPTConfig


def block_params(cfg: GPTConfig) -> int:
    h = cfg.n_embd
    layer_norms = 2 * 2 * h
    attention = (h * 3 * h + 3 * h) + (h * h + h)
    mlp = (h * 4 * h + 4 * h) + (4 * h * h + h)
    return layer_norms + attention + mlp  # = 12 h^2 + 13 h


def block_tensor_sizes(cfg: GPTConfig) -> list[int]:
    """Elements of each of a block's 12 tensors, in the model's order."""
    h = cfg.n_embd
    return [h, h, h * 3 * h, 3 * h, h * h, h, h, h, h * 4 * h, 4 * h, 4 * h * h, h]


def tensor_sizes(cfg: GPTConfig, scanned: bool = False) -> list[int]:
    """Elements of each parameter tensor: the embeddings, each block's 12 tensors, the final
    LayerNorm. Unscanned, one layer after another, as Alpa's GPT-2 in the paper holds them; scanned,
    each block tensor stacked over the layers, as this suite's model holds them."""
    h = cfg.n_embd
    block = block_tensor_sizes(cfg)
    blocks = [cfg.n_layer * n for n in block] if scanned else block * cfg.n_layer
    head = [] if cfg.tie_embeddings else [cfg.vocab_size * h]
    return [cfg.vocab_size * h, cfg.n_positions * h] + blocks + [h, h] + head


def param_count(cfg: GPTConfig) -> int:
    h = cfg.n_embd
    embeddings = cfg.vocab_size * h + cfg.n_positions * h
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * h
    return embeddings + cfg.n_layer * block_params(cfg) + 2 * h + head


def matmul_params(cfg: GPTConfig) -> int:
    """N of the 6N rule: every weight used in a matmul once per token.

    Embedding lookups are gathers, not matmuls, so position and input-embedding tables are left
    out; the output projection (the tied wte, or lm_head) is a matmul and is counted once.
    """
    h = cfg.n_embd
    return param_count(cfg) - cfg.n_positions * h - (0 if cfg.tie_embeddings else cfg.vocab_size * h)


def head_flops(cfg: GPTConfig, batch: float, seq_len: int, recompute: bool = False) -> float:
    """The output projection's share, forward and backward (Alpa's 6 B S H V); recomputing it
    in the backward pass adds its forward (2 of the 6) once more."""
    return 6 * batch * seq_len * cfg.n_embd * cfg.vocab_size * (4 / 3 if recompute else 1)


def alpa_step_flops(cfg: GPTConfig, batch: int, seq_len: int, backward: bool = True,
                    recompute: bool = False) -> float:
    factor = 24 + (48 if backward else 0) + (24 if recompute else 0)
    b, s, h, layers = batch, seq_len, cfg.n_embd, cfg.n_layer
    return factor * b * s * h**2 * layers * (1 + s / (6 * h)) + head_flops(cfg, batch, seq_len)


def rule_step_flops(cfg: GPTConfig, batch: int, seq_len: int) -> float:
    """Training FLOPs of one step by 6N + 12 L H S per token."""
    per_token = 6 * matmul_params(cfg) + 12 * cfg.n_layer * cfg.n_embd * seq_len
    return float(per_token * batch * seq_len)


def tflops(step_flops: float, step_seconds: float, n_devices: int) -> float:
    """Achieved TFLOP/s per device, Alpa's way: total / step time / number of GPUs / 1e12."""
    return step_flops / step_seconds / n_devices / 1e12
