"""gpt2m on one GPU at the speed of the hardware: the harness's trainer and a plain jitted step of
the same model written out here, side by side in one session (pytest-benchmark JSON).

    pytest -m gpu tests_gpu/test_speed_gpu.py --benchmark-json speed.json

extra_info holds each one's median step time and MFU (over the peak of the arithmetic that ran,
hardware.py) and the harness's tax, its step time over the plain step's, less 1. The aim is MFU of
40% or more in bfloat16 with a tax of 5% at most; the benchmark reports, it does not time-assert.
HARNESS_GPU_BENCH_BATCH sets the sequences per step (default 16, of 1024 tokens; half that in
float32, four times that with rematerialisation).
"""
import dataclasses
import os
import statistics
import time

import jax
import numpy as np
import optax
import pytest

from harness.core import data, flops, model, train
from harness.core.config import TrainConfig, model_config
from harness.runs import environment

BATCH = int(os.environ.get("HARNESS_GPU_BENCH_BATCH", "16"))
SEQ = 1024
WARMUP, TIMED = 3, 10


def plain_step_times(cfg, train_cfg, packed) -> tuple[list[float], list[float]]:
    """The same model, loss and AdamW, one jitted step, none of the harness's trainer around it."""
    graphdef, params = model.init(cfg, train_cfg.seed)
    optimizer = optax.adamw(train_cfg.learning_rate, b1=train_cfg.adam_b1, b2=train_cfg.adam_b2)
    opt_state = optimizer.init(params)

    @jax.jit
    def step(params, opt_state, inputs, targets):
        loss, grads = jax.value_and_grad(lambda p: model.loss_fn(graphdef, p, inputs, targets, None))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses, times = [], []
    for i in range(WARMUP + TIMED):
        inputs, targets = (jax.numpy.asarray(a) for a in packed.batch(i, train_cfg.batch_size, train_cfg.seed))
        start = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, inputs, targets)
        losses.append(float(loss))  # waits for the step
        times.append(time.perf_counter() - start)
    return losses, times[WARMUP:]


# Sizes from XLA's GPU compiler for an H100 (harness/analysis/gpu_compiler.py, no GPU needed), with the
# attention scores written out: float32, which cuDNN's fused attention does not take, needs
# 113 GiB at 16 sequences and 58 GiB at 8, so it runs half the batch; bfloat16 with remat needs
# 32 GiB at 64 sequences even without cuDNN's kernel, which keeps no scores at all.
@pytest.mark.parametrize("precision, batch, remat", [
    ("bfloat16", BATCH, False), ("float32", BATCH // 2, False),
    # A batch four times larger, each block recomputed in the backward pass: the activations of
    # one block kept instead of all; the recomputation is not counted in MFU.
    ("bfloat16", 4 * BATCH, True)])
def test_gpt2m_on_one_gpu_harness_against_a_plain_step(benchmark, precision, batch, remat):
    cfg = dataclasses.replace(model_config("gpt2m"), dtype=precision, remat=remat)
    train_cfg = TrainConfig(steps=WARMUP + TIMED, batch_size=batch, seq_len=SEQ)
    packed = data.prepare(cfg.vocab_size, SEQ, batch)
    peak, arithmetic = environment.peak(precision)
    step_flops = flops.rule_step_flops(cfg, batch, SEQ)

    plain_losses, plain_times = plain_step_times(cfg, train_cfg, packed)
    run = benchmark.pedantic(lambda: train.train(cfg, train_cfg, packed), rounds=1, iterations=1)
    harness_s, plain_s = statistics.median(run.step_times_s[WARMUP:]), statistics.median(plain_times)
    benchmark.extra_info.update(
        model="gpt2m", precision=precision, batch=batch, remat=remat, seq_len=SEQ, peak_tflops=peak, peak_arithmetic=arithmetic,
        harness_step_s=harness_s, plain_step_s=plain_s, harness_tax=harness_s / plain_s - 1,
        harness_mfu=step_flops / harness_s / 1e12 / peak if peak else None,
        plain_mfu=step_flops / plain_s / 1e12 / peak if peak else None)
    # The same model from the same initial parameters: the first step's loss is the same number.
    np.testing.assert_allclose(run.losses[0], plain_losses[0], rtol=1e-2)
