import dataclasses
import math

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from harness.core import flops, model
from harness.core.config import MODELS, GPTConfig, model_config
from harness.errors import BadInput


def tree_size(params) -> int:
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params))


@pytest.mark.parametrize("name", ["gpt2m", "gpt2l", "gpt2L"])
@pytest.mark.parametrize("tied", [True, False])
def test_paper_scale_parameter_count_matches_closed_form_and_tree(name, tied):
    cfg = GPTConfig(**{**model_config(name).__dict__, "tie_embeddings": tied})
    _, params = model.abstract_init(cfg)  # shapes only: nothing of paper scale is allocated
    assert all(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree.leaves(params))
    assert tree_size(params) == flops.param_count(cfg)


def test_gpt2m_has_the_published_size():
    # Hugging Face's gpt2-medium: 354,823,168 parameters with tied embeddings.
    assert flops.param_count(model_config("gpt2m")) == 354_823_168


def test_paper_models_have_the_papers_dimensions():
    shapes = {n: (MODELS[n].n_embd, MODELS[n].n_head, MODELS[n].n_layer, MODELS[n].n_positions, MODELS[n].vocab_size)
              for n in ("gpt2m", "gpt2l", "gpt2L")}
    assert shapes == {"gpt2m": (1024, 16, 24, 1024, 50257), "gpt2l": (1280, 20, 26, 1024, 50257),
                      "gpt2L": (1280, 20, 30, 1024, 50257)}


@pytest.mark.parametrize("name", ["scale-tiny", "scale-small"])
def test_scale_model_real_tree_matches_closed_form(name):
    _, params = model.init(model_config(name))
    assert tree_size(params) == flops.param_count(model_config(name))


def test_blocks_are_stacked_on_a_leading_layer_axis():
    cfg = model_config("scale-tiny")
    _, params = model.abstract_init(cfg)
    for leaf in jax.tree.leaves(params["blocks"]):
        assert leaf.shape[0] == cfg.n_layer


def test_attention_is_causal():
    cfg = model_config("scale-tiny")
    graphdef, params = model.init(cfg, seed=1)
    tokens = jax.random.randint(jax.random.key(0), (2, 32), 0, cfg.vocab_size)
    changed = tokens.at[:, 20:].set((tokens[:, 20:] + 7) % cfg.vocab_size)
    a, b = model.apply(graphdef, params, tokens), model.apply(graphdef, params, changed)
    assert jnp.allclose(a[:, :20], b[:, :20], atol=1e-6)  # the past does not see the future
    assert not jnp.allclose(a[:, 20:], b[:, 20:], atol=1e-3)


def test_attention_is_softmax_of_scaled_scores_over_the_past():
    """The model's attention (written out for XLA here, cuDNN's fused kernel on a GPU in 16 bits)
    is what jax.nn.dot_product_attention computes: softmax(q k^T / sqrt(d)) v over the causal past."""
    cfg = model_config("scale-tiny")
    q, k, v = jax.random.normal(jax.random.key(0), (3, 2, 16, cfg.n_head, cfg.head_dim))
    reference = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla")
    assert jnp.allclose(model.attention(q, k, v, cfg), reference, atol=1e-5)


def test_tied_model_has_no_separate_output_matrix():
    _, tied = model.init(model_config("scale-tiny"))
    _, untied = model.init(GPTConfig(**{**model_config("scale-tiny").__dict__, "tie_embeddings": False}))
    assert "lm_head" not in tied and untied["lm_head"]["kernel"].shape == (64, 1024)


def test_compiled_program_does_not_grow_with_depth():
    """Layers are scanned: the lowered program of 8 layers is the size of that of 2 layers."""
    def program_size(n_layer):
        cfg = GPTConfig(**{**model_config("scale-tiny").__dict__, "n_layer": n_layer})
        graphdef, params = model.abstract_init(cfg)
        tokens = jax.ShapeDtypeStruct((2, 16), jnp.int32)
        return len(jax.jit(lambda p, t: model.apply(graphdef, p, t)).lower(params, tokens).as_text())

    assert program_size(8) == pytest.approx(program_size(2), rel=0.02)


@pytest.mark.slow
@pytest.mark.untimed
def test_remat_recomputes_blocks_for_the_same_gradients_in_less_memory():
    """cfg.remat recomputes each block in the backward pass: the gradients are the same numbers,
    and the compiled step keeps fewer bytes of activations."""
    cfg = GPTConfig(**{**model_config("scale-tiny").__dict__, "n_layer": 8})
    remat = dataclasses.replace(cfg, remat=True)
    graphdef, params = model.init(cfg, seed=0)
    tokens = jax.random.randint(jax.random.key(1), (8, 64), 0, cfg.vocab_size)

    def grads(c):
        g = model.init(c, seed=0)[0]
        return jax.jit(jax.grad(lambda p: model.loss_fn(g, p, tokens[:, :-1], tokens[:, 1:])))

    for a, b in zip(jax.tree.leaves(grads(cfg)(params)), jax.tree.leaves(grads(remat)(params))):
        assert jnp.allclose(a, b, atol=1e-6)
    temp = {c.remat: grads(c).lower(params).compile().memory_analysis().temp_size_in_bytes for c in (cfg, remat)}
    assert temp[True] < 0.8 * temp[False], temp


@pytest.mark.slow
@pytest.mark.untimed
def test_remat_that_saves_the_matmuls_gives_the_same_gradients_and_keeps_more_than_remat():
    """remat_saves="dots" keeps the weight matmuls' outputs: the same gradients, with a compiled
    step between full recomputation and none in the bytes it keeps."""
    cfg = GPTConfig(**{**model_config("scale-tiny").__dict__, "n_layer": 8})
    graphdef, params = model.init(cfg, seed=0)
    tokens = jax.random.randint(jax.random.key(1), (8, 64), 0, cfg.vocab_size)
    variants = {"none": cfg, "nothing": dataclasses.replace(cfg, remat=True),
                "dots": dataclasses.replace(cfg, remat=True, remat_saves="dots")}

    def grads(c):
        g = model.init(c, seed=0)[0]
        return jax.jit(jax.grad(lambda p: model.loss_fn(g, p, tokens[:, :-1], tokens[:, 1:])))

    for a, b in zip(jax.tree.leaves(grads(cfg)(params)), jax.tree.leaves(grads(variants["dots"])(params))):
        assert jnp.allclose(a, b, atol=1e-6)
    temp = {k: grads(c).lower(params).compile().memory_analysis().temp_size_in_bytes for k, c in variants.items()}
    assert temp["nothing"] < temp["dots"] < temp["none"], temp


@pytest.mark.parametrize("tied", [True, False])
def test_a_padded_vocabulary_computes_the_same_loss_and_leaves_the_padding_untouched(tied):
    """vocab_multiple pads the embedding (and an untied head) with rows no token uses and columns
    no loss sees: the padded model with the unpadded one's weights computes the same losses, and
    the padding's gradients are zero, so training never moves it."""
    cfg = GPTConfig(**{**model_config("scale-tiny").__dict__, "vocab_size": 1000, "tie_embeddings": tied})
    padded = dataclasses.replace(cfg, vocab_multiple=64)
    assert padded.padded_vocab == 1024 and cfg.padded_vocab == 1000
    graphdef, params = model.init(cfg, seed=0)
    padded_graphdef, padded_params = model.init(padded, seed=0)
    assert padded_params["wte"]["embedding"].shape == (1024, cfg.n_embd)

    def widen(path, small, big):  # the unpadded weights, the padding's rows and columns kept as they were
        return big.at[tuple(slice(0, n) for n in small.shape)].set(small) if small.shape != big.shape else small

    same = jax.tree_util.tree_map_with_path(widen, params, padded_params)
    tokens = jax.random.randint(jax.random.key(1), (4, 32), 0, cfg.vocab_size)
    logits = model.apply(padded_graphdef, same, tokens)
    assert logits.shape[-1] == cfg.vocab_size
    loss = model.loss_fn(graphdef, params, tokens[:, :-1], tokens[:, 1:])
    padded_loss, grads = jax.value_and_grad(
        lambda p: model.loss_fn(padded_graphdef, p, tokens[:, :-1], tokens[:, 1:]))(same)
    assert padded_loss == pytest.approx(float(loss), rel=1e-6)
    assert not jnp.any(grads["wte"]["embedding"][cfg.vocab_size:])
    assert jnp.any(grads["wte"]["embedding"][:cfg.vocab_size])
    if not tied:
        assert not jnp.any(grads["lm_head"]["kernel"][:, cfg.vocab_size:])


def test_the_loss_over_slices_of_the_sequence_is_the_same_loss_in_less_memory():
    """loss_chunks computes the head and the loss one slice of the sequence at a time, recomputing
    each in the backward pass: the same loss and gradients, and the step keeps the logits of one
    slice instead of all of them (a vocabulary large against the width, as GPT-2's is)."""
    cfg = GPTConfig(**{**model_config("scale-tiny").__dict__, "vocab_size": 8192})
    chunked = dataclasses.replace(cfg, loss_chunks=4)
    graphdef, params = model.init(cfg, seed=0)
    tokens = jax.random.randint(jax.random.key(1), (8, 65), 0, cfg.vocab_size)

    def loss_and_grads(c):
        g = model.init(c, seed=0)[0]
        return jax.jit(jax.value_and_grad(lambda p: model.loss_fn(g, p, tokens[:, :-1], tokens[:, 1:])))

    (whole, grads), (sliced, sliced_grads) = loss_and_grads(cfg)(params), loss_and_grads(chunked)(params)
    assert sliced == pytest.approx(float(whole), rel=1e-6)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(sliced_grads)):
        assert jnp.allclose(a, b, atol=1e-6)
    temp = {c.loss_chunks: loss_and_grads(c).lower(params).compile().memory_analysis().temp_size_in_bytes
            for c in (cfg, chunked)}
    assert temp[4] < 0.6 * temp[1], temp
    with pytest.raises(ValueError, match="loss_chunks 3 does not divide the sequence of 64 tokens"):
        loss_and_grads(dataclasses.replace(cfg, loss_chunks=3))(params)


def test_the_blocks_written_out_compute_what_the_loop_over_them_computes():
    """scan_unroll changes the program, not the function: the loop over the layers one block at a
    time, two at a time (a remainder left over) and every block written out give the same loss and
    gradients."""
    cfg = dataclasses.replace(model_config("scale-tiny"), n_layer=3)
    graphdef, params = model.init(cfg, seed=0)
    tokens = jax.random.randint(jax.random.key(1), (4, 33), 0, cfg.vocab_size)

    def loss_and_grads(unroll):
        g = model.init(dataclasses.replace(cfg, scan_unroll=unroll), seed=0)[0]
        return jax.jit(jax.value_and_grad(lambda p: model.loss_fn(g, p, tokens[:, :-1], tokens[:, 1:])))(params)

    looped, looped_grads = loss_and_grads(1)
    for unroll in (2, 3, 8):
        loss, grads = loss_and_grads(unroll)
        assert loss == pytest.approx(float(looped), rel=1e-6)
        for a, b in zip(jax.tree.leaves(looped_grads), jax.tree.leaves(grads)):
            assert jnp.allclose(a, b, atol=1e-6)


def test_a_padded_layer_of_a_pipeline_stage_is_skipped_not_computed():
    """A stage padded to the longest stage skips its padded layers: with NaN for their parameters its
    output and its gradients are those of its real layers alone, which a padded layer computed and
    dropped cannot give (its backward multiplies NaN by a zero cotangent). Which layers are padded is
    known only when the step runs, as on a stage of an SPMD pipeline."""
    cfg = dataclasses.replace(model_config("scale-tiny"), n_layer=4)
    graphdef, params = model.init(cfg, seed=0)
    real = dataclasses.replace(cfg, n_layer=2)
    real_graphdef, _ = model.abstract_init(real)
    x = jax.random.normal(jax.random.key(1), (2, 8, cfg.n_embd))
    padded = {**params, "blocks": jax.tree.map(lambda a: a.at[2:].set(jnp.nan), params["blocks"])}

    def out(graphdef, p, x, **kw):
        return jnp.sum(jnp.square(nnx.merge(graphdef, p).run_blocks(x, **kw)))

    stage = jax.jit(jax.value_and_grad(lambda p, x, on: out(graphdef, p, x, active=on, always=2), argnums=(0, 1)))
    value, (grads, dx) = stage(padded, x, jnp.array([True, True, False, False]))
    first_two = {**params, "blocks": jax.tree.map(lambda a: a[:2], params["blocks"])}
    want, (want_grads, want_dx) = jax.value_and_grad(lambda p, x: out(real_graphdef, p, x), argnums=(0, 1))(first_two, x)
    assert value == pytest.approx(float(want), rel=1e-6)
    assert jnp.allclose(dx, want_dx, atol=1e-6)
    for a, b in zip(jax.tree.leaves(jax.tree.map(lambda g: g[:2], grads["blocks"])), jax.tree.leaves(want_grads["blocks"]), strict=True):
        assert jnp.allclose(a, b, atol=1e-6)
    # The same program with every layer real is the whole model's blocks.
    value, _ = stage(params, x, jnp.array([True, True, True, True]))
    assert value == pytest.approx(float(out(graphdef, params, x)), rel=1e-6)


@pytest.mark.parametrize("fields, message", [
    ({"n_embd": 100, "n_head": 3}, "n_embd 100 is not divisible by n_head 3"),
    ({"n_layer": 0}, "n_layer must be positive"),
    ({"dtype": "float64"}, "dtype must be"),
    ({"attention": "flash"}, "attention must be one of auto, xla, cudnn, got 'flash'"),
    ({"remat_saves": "everything"}, "remat_saves must be one of nothing, dots, got 'everything'"),
    ({"vocab_multiple": 0}, "vocab_multiple must be positive"),
    ({"loss_chunks": 0}, "loss_chunks must be positive"),
    ({"scan_unroll": 0}, "scan_unroll must be positive"),
])
def test_bad_model_config_is_rejected_with_the_field_named(fields, message):
    base = {"name": "bad", "n_layer": 2, "n_head": 4, "n_embd": 64}
    with pytest.raises(BadInput, match=message):
        GPTConfig(**{**base, **fields})


def test_unknown_model_name_lists_the_known_ones():
    with pytest.raises(BadInput, match="unknown model 'gpt5'; expected one of gpt2m, gpt2l, gpt2L"):
        model_config("gpt5")
