import jax
import pytest

from harness.core import data, train
from harness.suite.privileges import require_emulation
from tests_cpu.techniques_setup import MODEL, TRAIN, UNTIED


@pytest.fixture(scope="session")
def fixture_corpus():
    return data.load_corpus()


@pytest.fixture(scope="session")
def packed(fixture_corpus):
    """The corpus packed for the conformance setup (techniques_setup)."""
    return data.prepare(MODEL.vocab_size, TRAIN.seq_len, TRAIN.batch_size, fixture_corpus)


@pytest.fixture(scope="session")
def reference(packed):
    """The single-device trainer's losses that every technique must match, tied and untied."""
    return {cfg.name + str(cfg.tie_embeddings): train.train(cfg, TRAIN, packed).losses for cfg in (MODEL, UNTIED)}


@pytest.fixture(scope="session")
def reference_params(packed):
    """The single-device trainer's parameters after TRAIN's steps, by tie_embeddings."""
    return {cfg.tie_embeddings: jax.device_get(train.train(cfg, TRAIN, packed).params) for cfg in (MODEL, UNTIED)}


@pytest.fixture(scope="module")
def emulation():
    """For tests that bring up emulated slices: skips (fails in CI) without the privileges."""
    require_emulation()
