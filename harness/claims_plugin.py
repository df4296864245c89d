"""pytest wiring of the claims, shared by tests_cpu, tests_gpu and tests_fabric.

Options: which slices the trials run on, the trial budget, and where the report goes. The
session-wide ClaimsLog collects every trial record and verdict and, with --report-dir, appends each
trial record to results.jsonl as it lands (a killed session keeps what it measured) and writes the
whole report when the session ends (passing, failing or interrupted).

The test bodies live here too (run_trial, check_claim), so that the CPU, GPU and live-slice
suites differ only in the runner they hand over: the same trials, judged by the same claims.
"""
import datetime
import os
import time
from pathlib import Path

import pytest

from harness import claims, memory, records, report, slices, trials
from harness.config import model_config
from harness.techniques import TECHNIQUES

QUICK_SLICES = ("TACC-TACC", "UTAH-GPN")  # one single-site slice and the nearest two-site one
REPORT_ENV = "HARNESS_REPORT_DIR"


def pytest_addoption(parser):
    g = parser.getgroup("claims", "the paper's claims")
    g.addoption("--claims-slices", default="quick", metavar="LIST",
                help=f"slices the trials run on: 'quick' ({', '.join(QUICK_SLICES)}), 'all' (Table I), or "
                     "comma-separated Table I names or slice files (default: quick)")
    g.addoption("--trial-model", default=trials.Budget.model, metavar="NAME",
                help="model every trial trains (default: %(default)s, the CPU scale model)")
    g.addoption("--trial-repeats", type=int, default=trials.Budget.repeats, metavar="N",
                help="timed steps per trial, at least 3 (default: %(default)s)")
    g.addoption("--memory-models", default="gpt2m,gpt2L", metavar="LIST",
                help="paper-scale models for the memory claims (default: %(default)s)")
    g.addoption("--report-dir", default=os.environ.get(REPORT_ENV), metavar="DIR",
                help=f"write results.jsonl, claims.md and figures here when the session ends (or set {REPORT_ENV})")


def pytest_generate_tests(metafunc):
    """A test that takes `trial` runs once per trial of its module's wanted_trials(config)
    (default: trial_list, the emulated slices')."""
    if "trial" in metafunc.fixturenames:
        wanted = getattr(metafunc.module, "wanted_trials", trial_list)(metafunc.config)
        metafunc.parametrize("trial", wanted or [None], ids=[t.label for t in wanted] or ["no-trials"])


def claim_slices(config) -> list[slices.Slice]:
    value = config.getoption("--claims-slices")
    if value == "quick":
        return [slices.load(n) for n in QUICK_SLICES]
    if value == "all":
        return slices.table_i()
    return [slices.load(n.strip()) for n in value.split(",") if n.strip()]


def budget(config) -> trials.Budget:
    return trials.Budget(model=config.getoption("--trial-model"), repeats=config.getoption("--trial-repeats"))


def trial_list(config) -> list[trials.Trial]:
    """Every technique on all VMs of each slice and on the first VM alone (the paper's single-VM
    runs: C3, C5); Data and Shard on each other VM alone (Algorithm 1, C7). Emulated VMs are
    identical shares of one machine; a live slice's suite runs every technique on every VM instead."""
    out = []
    for sl in claim_slices(config):
        out += [trials.Trial(t, sl.name, trials.ALL_VMS) for t in TECHNIQUES]
        out += [trials.Trial(t, sl.name, sl.vms[0].name) for t in TECHNIQUES]
        out += [trials.Trial(t, sl.name, vm.name) for vm in sl.vms[1:] for t in ("Data", "Shard")]
    return out


class ClaimsLog:
    def __init__(self, config):
        self.config = config
        self.trials: dict[trials.Trial, dict] = {}
        self.memory: list[dict] = []
        self.verdicts: dict[str, dict] = {}
        self.started = time.time()
        directory = config.getoption("--report-dir")
        self.directory = Path(directory) if directory else None

    def add(self, trial: trials.Trial, record: dict) -> None:
        self.trials[trial] = record
        if self.directory:
            records.append(self.directory / "results.jsonl", record)

    def write(self, directory: Path) -> None:
        context = {"slices": ", ".join(sl.name for sl in claim_slices(self.config)),
                   "trial budget": str(budget(self.config)),
                   "memory assumptions": str(MEMORY_ASSUMPTIONS),
                   "trials run": len(self.trials), "wall time (s)": round(time.time() - self.started),
                   "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        report.write(directory, list(self.trials.values()), self.memory, list(self.verdicts.values()), context)


@pytest.fixture(scope="session")
def claims_log(pytestconfig):
    claim_slices(pytestconfig)  # a bad slice name or file fails the session at once, with the field named
    model_config(pytestconfig.getoption("--trial-model"))
    log = ClaimsLog(pytestconfig)
    yield log
    if log.directory and (log.trials or log.verdicts):
        log.write(log.directory)


# -- test bodies ---------------------------------------------------------------------------------
def run_trial(trial: trials.Trial, runner: trials.Runner, benchmark, log: ClaimsLog) -> dict:
    """One trial, each timed step a pytest-benchmark round; the record goes to the log, also when
    the trial fails or the user interrupts it (then recorded as such, and the interrupt goes on)."""
    running = trials.Running(runner, trial, trial.technique, group="")
    try:
        running = runner.prepare(trial)
        if running.status == "ok":
            benchmark.pedantic(running.step, rounds=runner.budget.repeats, iterations=1)
    except trials.TrialFailed as e:
        running.fail(e.status, e.reason)
    except KeyboardInterrupt as e:
        running.fail(*records.failure(e))
        log.add(trial, running.record())
        raise
    record = running.record()
    log.add(trial, record)
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
            log.add(trial, runner.measure(trial))
    return [log.trials[t] for t in wanted]


def check_claim(verdict: claims.Verdict, log: ClaimsLog, deviations: dict[str, dict[str, str]]) -> None:
    """Fails when a trial the part needs crashed, or when a comparison the backend has not declared
    goes against the paper beyond the measured noise. `deviations` maps a part to the comparisons
    (their `what`) this backend cannot show, each with the reason: those are reported as an
    expected failure when they do not hold, with the evidence, and every other comparison of the
    part still fails the test. The report shows the verdict with and without them."""
    declared = {what: why for what, why in deviations.get(verdict.part, {}).items()
                if any(c.what == what for c in verdict.comparisons)}
    mine = [c for c in verdict.comparisons if c.what in declared]
    rest = [c for c in verdict.comparisons if c.what not in declared]
    entry = verdict.to_dict()
    entry["deviations"] = declared
    entry["undeclared_status"] = claims.worst(c.status for c in rest) if rest else claims.HOLDS
    log.verdicts[verdict.part] = entry
    evidence = "\n  ".join(verdict.evidence)
    if verdict.crashed:
        pytest.fail(f"{verdict.part} not shown: trials crashed ({', '.join(verdict.crashed)}):\n  {evidence}")
    if not verdict.comparisons:
        pytest.skip(f"{verdict.part} not shown by this run: nothing to compare ({evidence or 'no trials'})")
    assert entry["undeclared_status"] != claims.CONTRADICTED, f"{verdict.part}: {verdict.statement}\n  {evidence}"
    if entry["undeclared_status"] == claims.NOT_SHOWN:
        pytest.skip(f"{verdict.part} not shown by this run:\n  {evidence}")
    if mine and claims.worst(c.status for c in mine) != claims.HOLDS:
        pytest.xfail(f"{verdict.part}: {', '.join(declared)} do not hold here, as declared "
                     f"({'; '.join(declared.values())}):\n  {evidence}")


# -- memory (C4) ---------------------------------------------------------------------------------
# The paper states no batch, microbatches or precision. 4 sequences per GPU is the largest power of
# two at which gpt2m with Data fits the T4s of UTAH-GPN and TACC-TACC, as the paper ran it (8 does
# not: 22 GB); 4 microbatches and float32 are Alpa's example defaults. Pipeshard recomputes its
# stages (GPipe's remat): our single SPMD program would otherwise keep the residuals of its bubble
# ticks, which Alpa's per-stage programs do not. Shard plans as Alpa's ShardParallel does.
MEMORY_ASSUMPTIONS = memory.Assumptions(batch_per_gpu=4, micro_batches=4, precision="float32", remat=True,
                                        alpa_shard=True)


def memory_records(config) -> list[dict]:
    chosen = claim_slices(config)
    models = [model_config(m.strip()) for m in config.getoption("--memory-models").split(",") if m.strip()]
    out, cache = [], {}
    for m in models:
        for sl in chosen:  # all VMs, and each VM alone (the paper ran both; C4 compares both)
            out += memory.analyse(sl, m, sl.gpus_per_vm * len(sl.vms), MEMORY_ASSUMPTIONS, cache=cache)
            out += memory.analyse(sl, m, sl.gpus_per_vm, MEMORY_ASSUMPTIONS, cache=cache)
    return out

