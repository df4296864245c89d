"""What a trial is made of, without running one (the claims suite runs them)."""
from harness import slices, trials


def test_a_live_slice_runs_every_technique_on_all_vms_and_on_each_vm_alone():
    sl = slices.load("UTAH-GPN")
    labels = {t.label for t in trials.trials_for(sl)}
    assert labels == {f"{t}-UTAH-GPN-{where}" for t in ("Data", "ZeRO2", "Shard", "Pipeshard")
                      for where in ("4gpu", "vm1", "vm2")}
