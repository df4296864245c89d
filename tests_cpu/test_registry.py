"""A technique is one registered unit: one added beside the paper's four is built, trained and
predicted like them, and changes no verdict about the paper, whose claims run its four."""
import numpy as np
import pytest

from harness import schemas
from harness.analysis import costmodel
from harness.core import train
from harness.core.config import Technique, model_config
from harness.paper import claims
from harness.platform import slices
from harness.techniques import TECHNIQUES, ClusterShape, DataParallel, register, technique
from tests_cpu.techniques_setup import MICRO_BATCHES, MODEL, TRAIN
from tests_cpu.test_verdicts import full_run


@pytest.fixture
def fifth():
    """Data parallelism under another name, registered for the test and taken away after it."""
    @register
    class Fifth(DataParallel):
        name = "Fifth"

    try:
        yield Fifth
    finally:
        TECHNIQUES.pop("Fifth", None)


@pytest.mark.slow
@pytest.mark.untimed
def test_a_registered_technique_trains_as_the_one_it_copies(fifth, packed):
    def losses(name):
        plan = technique(name, micro_batches=MICRO_BATCHES).build(MODEL, ClusterShape(2, 2), TRAIN, TRAIN.steps)
        return train.train_plan(plan, MODEL, TRAIN, packed).losses

    assert "Fifth" in TECHNIQUES and "Fifth" not in list(Technique)
    np.testing.assert_allclose(losses("Fifth"), losses("Data"), rtol=1e-6)


def test_a_registered_technique_is_predicted_and_the_papers_four_are_not_moved(fifth):
    sl, gpt2m = slices.load("UTAH-GPN"), model_config("gpt2m")
    vms = tuple(vm.name for vm in sl.vms)
    assert costmodel.predict("Fifth", sl, vms, gpt2m).step_s == costmodel.predict("Data", sl, vms, gpt2m).step_s
    predicted, _ = costmodel.predict_slice(sl, gpt2m)
    assert {p.technique for p in predicted} == set(Technique)


def test_a_fifth_technique_faster_than_all_changes_no_verdict_about_the_paper(fifth):
    trials, _ = full_run()
    table_i = slices.table_i()
    before = [v.to_dict() for v in claims.judge(trials, table_i)]
    fast = [{**r, "technique": "Fifth", "record_id": r["record_id"] + "-fifth",
             "timing": {**r["timing"], "step_times_s": [0.01] * len(r["timing"]["step_times_s"]), "median_step_s": 0.01}}
            for r in trials if r["technique"] == "Data"]
    after = [v.to_dict() for v in claims.judge(trials + fast, table_i)]
    assert after == before


def test_a_class_that_does_not_say_its_cost_is_not_a_technique():
    class NoCost:
        name = "NoCost"

        def validate(self, *args):
            pass

        def build(self, *args):
            pass

    with pytest.raises(TypeError, match="technique NoCost has no cost"):
        register(NoCost)
    assert "NoCost" not in TECHNIQUES


def test_the_registry_lists_the_papers_techniques_in_its_order_whatever_the_import_order():
    """Sorting the imports of techniques/__init__.py once reordered every table and record list."""
    assert list(TECHNIQUES)[:4] == list(Technique)
    data = TECHNIQUES.pop("Data")
    try:
        register(data)  # registered last
        assert list(TECHNIQUES)[:4] == list(Technique)
    finally:
        TECHNIQUES["Data"] = data
        register(data)


def test_every_registered_technique_can_write_a_record():
    """A record names its technique from the schema's list: a technique registered without it
    could train and then fail to keep its trial."""
    enum = schemas.validator("record").schema["properties"]["technique"]["enum"]
    assert set(TECHNIQUES) <= set(enum), enum
