"""The steps the claims' tests are made of, the same on every backend: run one trial as a
pytest-benchmark test, make sure every trial a claim needs has run, judge a claim's verdict
against the backend's declared deviations, and build the compile-only memory table."""
import contextlib

import pytest

from harness.analysis import gpu_compiler, memory
from harness.core.config import Technique
from harness.paper import claims, limits
from harness.runs import trials
from harness.suite import options
from harness.suite.session import ClaimsLog


def run_trial(trial: trials.Trial, runner: trials.Runner, benchmark, log: ClaimsLog) -> dict:
    """One trial, each timed step a pytest-benchmark round; the record goes to the log, also when
    the trial fails or the user interrupts it (Runner.measure)."""
    record = runner.measure(trial, lambda r: log.add(trial, r), lambda result: benchmark.pedantic(
        runner.step, args=(result,), rounds=runner.budget.repeats, iterations=1))
    benchmark.extra_info.update(
        trial=trial.label, technique=trial.technique, slice=trial.slice, vms=record["cluster"]["vms_used"],
        status=record["status"], reason=record["reason"], rtt_ms=record["cluster"]["network"]["rtt_ms"],
        mechanism=record["cluster"]["network"]["mechanism"], median_step_s=record["timing"]["median_step_s"],
        epoch_time_s=record["timing"]["epoch_time_s"], tflops_alpa=record["throughput"]["tflops_alpa"],
        compile_s=record["timing"]["compile_s"], model=record["model"]["name"], record_id=record["record_id"])
    if record["status"] == "error":  # out of memory is a result (the paper's x); an error is a problem
        pytest.fail(f"trial {trial.label} failed: {record['reason']}")
    return record


def ensure_trials(runner: trials.Runner, log: ClaimsLog, wanted: list[trials.Trial]) -> list[dict]:
    """Records of the wanted trials; those no test ran yet (a claim selected on its own) run now."""
    for trial in wanted:
        if trial not in log.trials:
            runner.measure(trial, lambda r, t=trial: log.add(t, r))
    return [log.trials[t] for t in wanted]


def check_claim(verdict: claims.Verdict, log: ClaimsLog, declared=(), run: limits.Run | None = None) -> None:
    """Judges the part's contradictions against the backend's declared limits (`declared`,
    harness.paper.limits: each excuses only what this run's own measurement explains, within its
    bound), records the verdict, and ends the test: it fails when a trial the part needs crashed
    or a contradiction is not excused; skips when the part compares nothing or a comparison (a
    declared one too) was not made; is an expected failure, with each limit's reason built from
    this run, when every contradiction is excused; passes otherwise (holds, or within noise)."""
    limits.apply([verdict], declared, run or limits.Run())
    log.verdicts[verdict.part] = verdict.to_dict()
    evidence = "\n  ".join(verdict.evidence + [f"{c.id}: {c.excuse['reason']}" for c in verdict.comparisons
                                               if c.excuse])
    if verdict.crashed:
        pytest.fail(f"{verdict.part} not shown: trials crashed ({', '.join(verdict.crashed)}):\n  {evidence}")
    if not verdict.comparisons:
        pytest.skip(f"{verdict.part} not shown by this run: nothing to compare ({evidence or 'no trials'})")
    outcome = verdict.outcome
    assert outcome != claims.CONTRADICTED, f"{verdict.part}: {verdict.statement}\n  {evidence}"
    if outcome == claims.NOT_SHOWN:
        pytest.skip(f"{verdict.part} not shown by this run:\n  {evidence}")
    if outcome == claims.EXCUSED:
        reasons = dict.fromkeys(c.excuse["reason"] for c in verdict.comparisons if c.excused)
        pytest.xfail(f"{verdict.part}: " + ", ".join(c.id for c in verdict.comparisons if c.excused)
                     + f" do not hold here, within declared limits ({'; '.join(reasons)}):\n  {evidence}")


# -- memory (C4) ---------------------------------------------------------------------------------


def memory_records(config) -> list[dict]:
    """The paper's four techniques analysed as C4 judges them (a technique registered beside them
    is the memory command's to analyse, not the claims')."""
    out = []
    compiler = gpu_compiler.choose(options.run_config(config).memory_compiler)
    with compiler or contextlib.nullcontext():
        for m in options.memory_models(config):
            for sl in options.claim_slices(config):  # all VMs, and each VM alone (the paper ran both; C4 compares both)
                for gpus in (sl.gpus_per_vm * len(sl.vms), sl.gpus_per_vm):
                    out += memory.analyse(sl, m, gpus, options.MEMORY_ASSUMPTIONS, tuple(Technique), compiler=compiler)
    return out
