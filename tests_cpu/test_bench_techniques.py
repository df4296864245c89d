"""Benchmarks (pytest-benchmark; run without -n): technique step times on the CPU scale model in one
process, and the compile time of each paper-scale memory analysis. (The two-process step times are
recorded by test_techniques.py::test_two_processes_match_single_device, which runs them anyway.) Nothing here asserts a speed: the numbers go
to the benchmark JSON (`pytest -m cpu --benchmark-json FILE`) for side-by-side comparison."""
import pytest

from harness import data, model
from harness.config import TrainConfig, model_config
from harness.memory import Assumptions, compiled_bytes
from harness.techniques import TECHNIQUES, ClusterShape, technique

SCALE = model_config("scale-small")
TRAIN = TrainConfig(steps=6, batch_size=8, seq_len=128)
MICRO_BATCHES = 2


@pytest.fixture(scope="module")
def packed(fixture_corpus):
    return data.prepare(SCALE.vocab_size, TRAIN.seq_len, TRAIN.batch_size, fixture_corpus)


@pytest.mark.parametrize("name", list(TECHNIQUES))
def test_step_time_one_process_1x4(benchmark, name, packed):
    plan = technique(name, micro_batches=MICRO_BATCHES).build(SCALE, ClusterShape(1, 4), TRAIN, TRAIN.steps)
    _, canonical = model.init(SCALE, TRAIN.seed)
    state = list(plan.init_state(canonical))
    batch = plan.place_batch(*packed.batch(0, TRAIN.batch_size, TRAIN.seed))
    step = plan.step.lower(*state, *batch).compile()

    def one_step():
        params, opt_state, loss = step(*state, *batch)
        state[:] = params, opt_state
        loss.block_until_ready()

    benchmark.pedantic(one_step, rounds=5, warmup_rounds=1)
    benchmark.extra_info.update(technique=name, cluster="1x4", processes=1, model=SCALE.name,
                                batch=TRAIN.batch_size, seq_len=TRAIN.seq_len, micro_batches=MICRO_BATCHES)


@pytest.mark.parametrize("name", list(TECHNIQUES))
def test_compile_time_paper_scale_memory_analysis(benchmark, name):
    gpt2m = model_config("gpt2m")
    result = benchmark.pedantic(lambda: compiled_bytes(technique(name, micro_batches=4), gpt2m, ClusterShape(2, 2),
                                                       Assumptions()), rounds=1, iterations=1)
    benchmark.extra_info.update(technique=name, model="gpt2m", cluster="2x2",
                                bytes_per_device=result["bytes_per_device"])
