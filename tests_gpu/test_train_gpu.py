"""The single-device trainer on a GPU: it learns, and its record names the GPU and its MFU."""
import numpy as np
import pytest

from harness.core import data, train
from harness.core.config import TrainConfig, model_config
from harness.runs import records


def test_scale_model_learns_on_gpu():
    model_cfg = model_config("scale-small")
    cfg = TrainConfig(steps=200, batch_size=16, seq_len=128)
    packed = data.prepare(model_cfg.vocab_size, 128, 16)
    run = train.train(model_cfg, cfg, packed)
    assert np.mean(run.losses[-20:]) < run.losses[0] - 1.0
    record = records.build(model_cfg, cfg, packed, run)
    assert record["environment"]["platform"] == "gpu"
    if record["throughput"]["peak_tflops"] is None:
        pytest.skip(f"unknown GPU {record['environment']['devices'][0]}: no peak for MFU")
    assert 0 < record["throughput"]["mfu"] < 1
    # float32 matmuls run as TF32 where the GPU has it; MFU is over that peak, and says so
    assert record["throughput"]["peak_arithmetic"] in ("tf32", "float32")


def test_same_seed_same_losses_on_gpu():
    model_cfg = model_config("scale-tiny")
    cfg = TrainConfig(steps=20, batch_size=8, seq_len=64)
    packed = data.prepare(model_cfg.vocab_size, 64, 8)
    a, b = train.train(model_cfg, cfg, packed), train.train(model_cfg, cfg, packed)
    np.testing.assert_allclose(a.losses, b.losses, rtol=1e-5)  # GPU reductions may reorder
