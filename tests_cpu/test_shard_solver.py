"""Shard's plan as Alpa's solver picks it (harness.techniques.shard_alpa.solve): communication
only, at Alpa's constants, on one flat axis of every GPU, one microbatch against one gradient sync."""
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core.config import GPTConfig, Setup, model_config
from harness.errors import BadInput
from harness.techniques.shard_alpa import DATA, TENSOR, VOCAB, AlpaPlan, all_reduce_cost, solve


def plan(cfg, gpus, micro_batch, seq):
    chosen, _ = solve(cfg, gpus, micro_batch, seq)
    return chosen.blocks, chosen.vocab


def test_alpas_prices_of_a_collective():
    """LogicalDeviceMesh.all_reduce_cost of a flattened (2, 2) mesh: alpha 1, beta 0.1 a byte."""
    assert all_reduce_cost(1000, 4) == pytest.approx(1 + 0.1 * 2 * 3 / 4 * 1000 + 0.01)


def test_gpt2m_at_the_papers_setup_splits_the_vocabulary_and_keeps_the_blocks_split_by_the_batch():
    setup, gpt2m = Setup(), model_config("gpt2m")
    micro_batch = setup.batch_per_gpu * 4 / setup.micro_batches
    assert plan(gpt2m, 4, micro_batch, gpt2m.n_positions) == (DATA, VOCAB)


def test_a_small_microbatch_against_wide_blocks_splits_the_blocks_by_heads():
    """scale-small at the trials' batch: 512 tokens a microbatch against a width of 256, where four
    all-reduces of the activations weigh less than the block's gradient."""
    small = model_config("scale-small")
    assert plan(small, 4, 4, 128) == (TENSOR, VOCAB)


def test_a_vocabulary_smaller_than_the_microbatch_is_split_by_the_batch():
    tiny_vocab = dataclasses.replace(model_config("scale-small"), vocab_size=256)
    assert plan(tiny_vocab, 4, 64, 128) == (DATA, DATA)


@given(width=st.sampled_from([64, 128, 256, 512, 1024]), layers=st.integers(1, 24),
       tokens=st.integers(1, 64), more=st.integers(2, 8))
def test_more_tokens_a_microbatch_never_moves_the_blocks_to_tensor_splits(width, layers, tokens, more):
    cfg = GPTConfig("probe", n_layer=layers, n_head=4, n_embd=width, vocab_size=4096, n_positions=128)
    blocks = lambda micro: plan(cfg, 4, micro, 128)[0]
    assert not (blocks(tokens) == DATA and blocks(tokens * more) == TENSOR)


def test_a_plan_outside_the_solvers_choices_is_named():
    with pytest.raises(BadInput, match="Shard plan blocks='tensor', vocab='data': expected one of"):
        AlpaPlan(TENSOR, DATA)


def test_blocks_are_split_by_heads_only_where_the_gpus_divide_them():
    """scale-small's 4 heads on 3 GPUs: the microbatch that gets the heads split on 4 gets the batch split."""
    small = model_config("scale-small")
    assert plan(small, 4, 4, 128)[0] == TENSOR
    chosen, objective = solve(small, 3, 3, 128)
    assert chosen.blocks == DATA and all(p.blocks == DATA for p in objective)
