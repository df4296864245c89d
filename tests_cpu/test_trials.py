"""What a trial is made of, without running one (the claims suite runs them)."""
from harness import slices, trials


def test_a_live_slice_runs_every_technique_on_all_vms_and_on_each_vm_alone():
    sl = slices.load("UTAH-GPN")
    labels = {t.label for t in trials.trials_for(sl)}
    assert labels == {f"{t}-UTAH-GPN-{where}" for t in ("Data", "ZeRO2", "Shard", "Pipeshard")
                      for where in ("4gpu", "vm1", "vm2")}


def test_a_trial_goes_into_the_benchmark_json_as_its_fields():
    """pytest-benchmark writes a parameter it cannot serialise as 'UNSERIALIZABLE[<repr>]'."""
    import json

    from harness.config import Technique
    from harness.suite import plugin

    doc = {"benchmarks": [{"params": {"trial": trials.Trial(Technique.DATA, "UTAH-GPN", trials.ALL_VMS)}},
                          {"params": None}]}
    plugin.pytest_benchmark_update_json(None, [], doc)
    assert json.loads(json.dumps(doc))["benchmarks"][0]["params"] == {
        "trial": {"technique": "Data", "slice": "UTAH-GPN", "vms": "all"}}
