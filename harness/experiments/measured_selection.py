"""Algorithm 1 fed by real trials: harness.paper.selection asks measure(technique, vms) for a run's T,
and Trials answers by training and timing that trial on a runner (an emulated or live slice).
Every record lands in a results file as it finishes; a configuration is run once even when both
modes ask for it. predictor() gives the planner harness.analysis.costmodel's T for the same trials."""
import sys
from pathlib import Path

from harness.analysis import costmodel
from harness.core import flops
from harness.core.config import Budget, Setup, model_config
from harness.paper import claims, selection
from harness.platform import slices
from harness.runs import records, trials


class TrialCrashed(Exception):
    """A trial the algorithm asked for crashed: its T is no measurement, so no decision is made
    (only the paper's x, the allocator's out of memory, is a failed run's T = 0)."""


class Trials:
    """measure(technique, vms) for harness.paper.selection: trains the trial on the emulated slice and
    returns its T; every record lands in results.jsonl at once, an interrupted one too. A trial
    that crashed raises TrialCrashed."""

    def __init__(self, runner: trials.Runner, sl: slices.Slice, results: Path):
        self.runner, self.slice, self.results = runner, sl, results
        self.records: dict[tuple, dict] = {}

    def __call__(self, technique: str, vms: tuple) -> float:
        key = (technique, tuple(vms))
        if key not in self.records:
            trial = trials.Trial.on(self.slice, technique, trials.ALL_VMS if len(vms) > 1 else vms[0])
            print(f"select: {trial.label} ...", file=sys.stderr, flush=True)
            record = self.runner.measure(trial, lambda r: records.append(self.results, r))
            self.records[key] = record
            print(f"select: {trial.label}: {record['status']}, T = {selection.average_tflops(record):.4g} "
                  f"TFLOP/s per GPU", file=sys.stderr, flush=True)
        record = self.records[key]
        why = None if record["status"] == "oom" else claims.problem(record)  # the runner judged its x already
        if why:
            raise TrialCrashed(f"{technique} on {'+'.join(vms)} crashed: {why}")
        return selection.average_tflops(record)


def decide(measure: Trials, modes: list[str], delta: float, predicted=None, margin: float = 0.3) -> list[dict]:
    """Each mode's decision, all from the one set of trials `measure` runs and records."""
    names = [vm.name for vm in measure.slice.vms]
    return [selection.select(mode, names, measure, delta, measure.slice.gpus_per_vm, predicted, margin).to_dict()
            for mode in modes]


def trial_table(measure: Trials) -> list[dict]:
    return [{"technique": r["technique"], "vms": r["cluster"]["vms_used"], "status": r["status"],
             "T": selection.average_tflops(r), "median_step_s": r["timing"]["median_step_s"],
             "record_id": r["record_id"]} for r in measure.records.values()]


def predictor(sl: slices.Slice, budget: Budget):
    """T per GPU as harness.analysis.costmodel predicts it for this machine's emulated VMs: identical CPU
    devices, so only the techniques' own costs rank the single-VM runs. The absolute rate does
    not matter: the planner compares predictions with each other."""
    cfg = model_config(budget.model)
    setup = Setup(batch_per_gpu=budget.batch_per_gpu, micro_batches=budget.micro_batches, remat=False)

    def t(technique: str, vms: tuple) -> float:
        devices = costmodel.Devices(tuple(1e10 for _ in vms), tuple(1e15 for _ in vms), sl.gpus_per_vm)
        p = costmodel.predict(technique, sl, tuple(vms), cfg, setup, devices=devices)
        batch = budget.batch_per_gpu * p.gpus
        return flops.alpa_step_flops(cfg, batch, cfg.n_positions) / p.step_s / p.gpus / 1e12

    return t
