"""The single-device trainer learns on the fixture corpus, deterministically."""
import numpy as np
import pytest

from harness.core import data, train
from harness.core.config import TrainConfig, model_config

pytestmark = [pytest.mark.slow, pytest.mark.untimed]  # trains the scale models for hundreds of steps

MODEL = model_config("scale-tiny")
CONFIG = TrainConfig(steps=300, batch_size=16, seq_len=64, seed=0)


@pytest.fixture(scope="module")
def packed(fixture_corpus):
    return data.prepare(MODEL.vocab_size, 64, 16, fixture_corpus)


@pytest.fixture(scope="module")
def first_run(packed):
    return train.train(MODEL, CONFIG, packed)


def unigram_entropy(blocks: np.ndarray) -> float:
    counts = np.bincount(blocks.ravel()).astype(float)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def test_loss_falls_clearly_within_300_steps(first_run, packed):
    """Threshold: the mean loss of the last 20 of 300 steps is at least 1 nat below the first
    step's (about ln V at initialisation) and 0.3 nat below the corpus's unigram entropy, the
    best a model can do without using context."""
    start, end = first_run.losses[0], float(np.mean(first_run.losses[-20:]))
    assert start == pytest.approx(np.log(MODEL.vocab_size), abs=0.3)
    assert end < start - 1.0
    assert end < unigram_entropy(packed.blocks) - 0.3


SHORT = TrainConfig(steps=30, batch_size=16, seq_len=64, seed=0)


@pytest.fixture(scope="module")
def short_run(packed):
    return train.train(MODEL, SHORT, packed)


def test_same_seed_gives_identical_losses_bit_for_bit(short_run, packed):
    again = train.train(MODEL, SHORT, packed)
    assert again.losses == short_run.losses


def test_other_seed_gives_other_losses(short_run, packed):
    other = train.train(MODEL, TrainConfig(steps=30, batch_size=16, seq_len=64, seed=1), packed)
    assert other.losses != short_run.losses


def test_dropout_is_keyed_by_seed_and_step(packed):
    cfg = model_config("scale-tiny").__class__(**{**MODEL.__dict__, "dropout": 0.1})
    short = TrainConfig(steps=5, batch_size=16, seq_len=64, seed=0)
    a, b = train.train(cfg, short, packed), train.train(cfg, short, packed)
    assert a.losses == b.losses
    assert a.losses != train.train(MODEL, short, packed).losses


def test_budget_in_epochs(packed):
    cfg = TrainConfig(epochs=0.01, batch_size=16, seq_len=64)
    assert train.total_steps(cfg, packed) == round(0.01 * packed.steps_per_epoch(16))


def test_step_times_exclude_compilation(first_run):
    assert first_run.compile_s > 0
    assert len(first_run.step_times_s) == 300
    assert first_run.median_step_s < first_run.compile_s


def test_a_held_out_split_is_never_trained_on_and_its_loss_is_the_models(packed):
    """data.held_out keeps the last blocks apart, whole batches of them; the held-out loss of a
    stepper is the model's mean loss on them, through a technique's Plan as on one device."""
    import jax

    from harness.core import model
    from harness.errors import BadInput
    from harness.techniques import ClusterShape, technique

    cfg = TrainConfig(steps=3, batch_size=8, seq_len=64)
    fit, held = data.held_out(packed, 0.005, 8)  # a few batches of the fixture corpus
    assert len(held.blocks) >= 8 and len(held.blocks) % 8 == 0
    assert np.array_equal(np.concatenate([fit.blocks, held.blocks]), packed.blocks)
    trained = {row.tobytes() for step in range(2 * fit.steps_per_epoch(8)) for row in fit.batch(step, 8, 0)[0]}
    assert not trained & {row[:-1].tobytes() for row in held.blocks}
    for bad in (0.0, 1.0, float("nan")):
        with pytest.raises(BadInput, match="held-out fraction must be between 0 and 1"):
            data.held_out(packed, bad, 8)
    with pytest.raises(BadInput, match="cannot give a held-out 1e-06 of whole batches of 8"):
        data.held_out(packed, 1e-6, 8)

    graphdef, params = model.init(MODEL, cfg.seed)
    loss = jax.jit(lambda p, x, y: model.loss_fn(graphdef, p, x, y))
    expected = np.mean([float(loss(params, rows[:, :-1], rows[:, 1:])) for rows in np.split(held.blocks, len(held.blocks) // 8)])
    plan = technique("Data").build(MODEL, ClusterShape(2, 2), cfg, cfg.steps)
    stepper = train.plan_stepper(plan, MODEL, cfg, fit, train.TrainRun(cfg.steps))
    assert stepper.held_out_loss(graphdef, held, 8) == pytest.approx(expected, rel=1e-5)  # before any step
    stepper.advance(3)
    assert stepper.held_out_loss(graphdef, held, 8) < expected - 0.05  # three steps learn something


def test_a_restarted_stepper_trains_again_from_the_untrained_model(packed):
    """restart() puts a technique's compiled step back to its initial state, schedule and data: the
    same losses step for step as its first run (DiLoCo's outer state too), without a new compile."""
    from harness.techniques import ClusterShape, technique

    cfg = TrainConfig(steps=6, batch_size=8, seq_len=64)
    for name, options in (("Data", {}), ("DiLoCo", {"sync_every": 2})):
        plan = technique(name, **options).build(MODEL, ClusterShape(2, 2), cfg, cfg.steps)
        stepper = train.plan_stepper(plan, MODEL, cfg, packed, train.TrainRun(cfg.steps))
        compiled = stepper.step_fn
        first = list(stepper.advance(6).losses)
        stepper.park()  # restart from parked state too
        stepper.restart()
        assert stepper.run.losses == [] and stepper.step_fn is compiled
        assert stepper.advance(6).losses == first, name
