"""The arithmetic a trial runs in (config.PRECISIONS): chosen once for the budget, carried to every
worker in its jobs, fixed in the compiled step, and named in the record."""
import dataclasses

import pytest

from harness.core.config import Budget, TrainConfig, model_config
from harness.errors import BadInput
from harness.platform import slices
from harness.runs import jobs, trials


def test_a_bad_precision_is_named_before_any_trial():
    with pytest.raises(BadInput, match="precision must be one of float32, float32-full, bfloat16, float16, got 'fp8'"):
        Budget(precision="fp8")


@pytest.mark.parametrize("precision, dtype, full", [
    ("float32", "float32", False), ("float32-full", "float32", True), ("bfloat16", "bfloat16", False)])
def test_the_trials_jobs_carry_the_budgets_precision(precision, dtype, full):
    sl = slices.load("UTAH-GPN")
    runner = trials.Runner(None, [sl], Budget(model="scale-tiny", precision=precision))
    job = runner.job(trials.Trial.on(sl, "ZeRO2"))
    assert (job.model["dtype"], job.full_fp32) == (dtype, full)


@pytest.mark.slow
@pytest.mark.untimed
def test_full_float32_is_compiled_into_the_step():
    """float32-full asks XLA for full-precision matmuls when the step is compiled, so a worker's
    compiled step keeps it whatever the process's setting is afterwards."""
    def compiled_text(full_fp32: bool) -> str:
        job = jobs.Job("Data", dataclasses.asdict(model_config("scale-tiny")), 1, 1,
                       train=dataclasses.asdict(TrainConfig(steps=2, batch_size=2)), full_fp32=full_fp32)
        stepper, _ = jobs.start(job)
        return stepper.step_fn.as_text()

    assert "highest" in compiled_text(True) and "highest" not in compiled_text(False)
