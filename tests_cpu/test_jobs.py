"""A job: what a worker process is asked to train, and how it takes its budget."""
import dataclasses

import pytest

from harness.runs.jobs import Job, execute
from tests_cpu.techniques_setup import MODEL, TRAIN


@pytest.mark.slow
def test_job_with_an_epoch_budget_trains_that_many_steps(packed):
    """The optimizer's schedule and the loop take the budget from the same place, steps or epochs."""
    budget = {**dataclasses.asdict(TRAIN), "steps": None, "epochs": 4 / packed.steps_per_epoch(TRAIN.batch_size)}
    result = execute(Job("Data", dataclasses.asdict(MODEL), 1, 4, train=budget, options={"micro_batches": 2}))
    assert len(result["losses"]) == 4 and result["process_count"] == 1
