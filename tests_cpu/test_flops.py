"""FLOP and parameter formulas against values worked out by hand for a toy shape.

Toy model: H = 2, L = 1, V = 3, positions P = 4, one head; batch B = 1, sequence S = 4.
"""
import pytest

from harness.core import flops
from harness.core.config import GPTConfig

TOY = GPTConfig("toy", n_layer=1, n_head=1, n_embd=2, vocab_size=3, n_positions=4)


def test_toy_parameter_count_by_hand():
    # wte 3*2 + wpe 4*2 + block (ln 2*2*2 + qkv 2*6+6 + proj 2*2+2 + fc 2*8+8 + proj 8*2+2) + ln_f 2*2
    assert flops.block_params(TOY) == 8 + 18 + 6 + 24 + 18
    assert flops.param_count(TOY) == 6 + 8 + 74 + 4
    assert flops.matmul_params(TOY) == 92 - 8  # position table is a lookup, not a matmul


def test_alpa_formula_by_hand():
    # f * B*S*H^2*L * (1 + S/(6H)) + 6*B*S*H*V = f * 16 * (4/3) + 144
    assert flops.alpa_step_flops(TOY, batch=1, seq_len=4) == pytest.approx(72 * 16 * 4 / 3 + 144)
    assert flops.alpa_step_flops(TOY, 1, 4, backward=False) == pytest.approx(24 * 16 * 4 / 3 + 144)
    assert flops.alpa_step_flops(TOY, 1, 4, recompute=True) == pytest.approx(96 * 16 * 4 / 3 + 144)


def test_six_n_rule_by_hand():
    # per token 6 * 84 + 12 * L*H*S = 504 + 96; times B*S = 4 tokens
    assert flops.rule_step_flops(TOY, batch=1, seq_len=4) == 2400


def test_tflops_is_per_device():
    assert flops.tflops(8e12, step_seconds=2.0, n_devices=4) == 1.0


def test_gpt2m_step_flops_order_of_magnitude():
    # 8 sequences of 1024 tokens through 355M parameters: about 6 * 355e6 * 8192 = 17.4 TFLOP,
    # plus attention; both rules must land close to each other.
    from harness.core.config import model_config

    m = model_config("gpt2m")
    alpa, rule = flops.alpa_step_flops(m, 8, 1024), flops.rule_step_flops(m, 8, 1024)
    assert 17e12 < rule < 23e12
    assert alpa == pytest.approx(rule, rel=0.1)
