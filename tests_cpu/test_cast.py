"""Which registered technique plays the paper's Shard (RunConfig.shard, contract.cast): the trials'
jobs, the predictions and the memory analyses under the paper's name all run the player, the
records keep the paper's name, and nothing outlives the cast."""
import pytest

from harness.analysis import costmodel
from harness.core.config import Budget, Technique, model_config
from harness.errors import BadInput
from harness.platform import slices
from harness.runs import trials
from harness.runs.run_config import SHARDS, RunConfig
from harness.techniques import TECHNIQUES, technique_class
from harness.techniques.contract import cast
from harness.techniques.shard_alpa import NAME as ALPA_SHARD
from harness.techniques.shard_alpa import AlpaShardParallel
from harness.techniques.shard_parallel import ShardParallel

GPT2M = model_config("gpt2m")


def test_every_shard_a_run_may_cast_is_registered():
    assert set(SHARDS) <= set(TECHNIQUES) and SHARDS[0] == RunConfig.shard == Technique.SHARD


def test_a_cast_shard_runs_under_the_papers_name_and_only_inside_the_cast():
    sl = slices.load("UTAH-GPN")
    runner = trials.Runner(None, [sl], Budget(model="scale-tiny", combine=True))
    mine = costmodel.predict("Shard", sl, ("vm1", "vm2"), GPT2M)
    with cast({Technique.SHARD: ALPA_SHARD}):
        assert technique_class("Shard") is AlpaShardParallel
        job = runner.job(trials.Trial.on(sl, "Shard"))
        assert job.technique == ALPA_SHARD and job.options["combine"] is True  # Alpa's grouped gradient sync
        alpas = costmodel.predict("Shard", sl, ("vm1", "vm2"), GPT2M)
        assert alpas.technique == "Shard" and alpas.step_s != mine.step_s
    assert technique_class("Shard") is ShardParallel
    job = runner.job(trials.Trial.on(sl, "Shard"))
    assert job.technique == "Shard" and "combine" not in job.options  # the suite's planner takes none


def test_a_cast_ends_when_its_block_fails():
    with pytest.raises(RuntimeError), cast({Technique.SHARD: ALPA_SHARD}):
        raise RuntimeError("a trial crashed")
    assert technique_class("Shard") is ShardParallel


def test_an_unknown_player_is_named():
    with pytest.raises(BadInput, match="Shard played by 'Shard-x': no such technique; expected one of"):
        with cast({Technique.SHARD: "Shard-x"}):
            pass
    with pytest.raises(BadInput, match="shard: must be one of Shard, Shard-alpa, got 'Shard-x'"):
        RunConfig(shard="Shard-x")
