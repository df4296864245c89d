"""`python -m harness select`: bad input is named before anything starts; --eps becomes a step budget;
a crashed trial decides nothing, where out of memory is a failed run's T = 0.

Its decisions over real trials are tested on the claims' cluster (test_claims.py), through the
same code the command runs once it has brought its own emulated slice up with ray_clusters.emulated,
whose teardown on Ctrl-C test_reproduce.py checks.
"""

import math

import pytest

from harness.commands.cli import main


@pytest.mark.parametrize("args, field", [(["--delta", "0"], "--delta"), (["--steps", "4"], "--steps"),
                                         (["--slice", "nowhere"], "slice 'nowhere'"), (["--eps", "-1"], "--eps"),
                                         (["--margin", "-1"], "--margin")])
def test_select_names_bad_input_before_starting_anything(args, field, capsys):
    assert main(["select", *args]) == 2
    err = capsys.readouterr().err
    assert field in err and err.count("\n") == 1, err



def test_eps_is_counted_in_steps_of_the_all_vm_batch():
    """--eps EPOCHS becomes a step budget: epochs x steps per epoch at the batch of all VMs (8 here)."""
    from argparse import Namespace

    from harness.commands.select import steps_for
    from harness.core import data
    from harness.platform import slices

    per_epoch = data.prepare(4096, 128, 8, data.load_corpus()).steps_per_epoch(8)
    sl = slices.load("UTAH-GPN")
    assert steps_for(Namespace(eps=0.05, steps=5, model="scale-small"), sl) == max(5, math.ceil(0.05 * per_epoch))
    assert steps_for(Namespace(eps=1e-6, steps=5, model="scale-small"), sl) == 5  # never below 5 timed steps
    assert steps_for(Namespace(eps=None, steps=7, model="scale-small"), sl) == 7


@pytest.mark.parametrize("pipeshard", ["oom", "error"])
def test_a_crashed_trial_decides_nothing_where_out_of_memory_is_a_failed_run(pipeshard, tmp_path):
    """Algorithm 1 counts a run that failed, out of memory (the paper's x), as T = 0. A crash is no
    measurement: the trials stop the algorithm, naming the trial and why, instead of feeding it a 0."""
    from harness.experiments import measured_selection
    from harness.platform import slices
    from tests_cpu.claim_records import trial

    sl = slices.load("UTAH-GPN")

    class Ran:  # a runner whose trials have run: it hands back their records
        def measure(self, t, keep):
            status = pipeshard if t.technique == "Pipeshard" else "ok"
            r = trial(t.technique, sl.name, [1.0] * 5, vms=("vm1", "vm2") if t.vms == "all" else (t.vms,),
                      status=status)
            keep(r)
            return r

    measure = measured_selection.Trials(Ran(), sl, tmp_path / "results.jsonl")
    if pipeshard == "oom":
        decision = measured_selection.decide(measure, ["published"], 0.1)[0]
        assert decision["technique"] is not None and decision["technique"] != "Pipeshard"
        assert {(t["technique"], t["T"]) for t in measured_selection.trial_table(measure)} >= {("Pipeshard", 0.0)}
        return
    with pytest.raises(measured_selection.TrialCrashed,
                       match=r"Pipeshard on vm1\+vm2 crashed: RuntimeError: worker died"):
        measured_selection.decide(measure, ["published"], 0.1)
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 1  # the crash is kept all the same


def test_the_summary_says_whether_a_crash_stopped_the_decision_or_only_the_comparison_beyond_it():
    from harness.commands.select import summary

    result = {"slice": "UTAH-GPN", "model": "scale-small", "delta": 0.1, "report_dir": "r", "interrupted": False,
              "crashed": "Pipeshard on vm1+vm2 crashed: RuntimeError: worker died", "decisions": [], "trials": [],
              "beyond_paper": [], "planner": {"on": False}}
    assert "  no decision: Pipeshard on vm1+vm2 crashed: RuntimeError: worker died" in summary(result).splitlines()
    decided = {"mode": "published", "technique": "Data", "vms": ["vm2"], "rule": "step 5"}
    result.update(decisions=[decided], crashed="DiLoCo on vm1+vm2 crashed: RuntimeError: worker died")
    lines = summary(result).splitlines()
    assert "  beyond the paper: not compared: DiLoCo on vm1+vm2 crashed: RuntimeError: worker died" in lines
    assert "  published: Data on vm2" in lines
