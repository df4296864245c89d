"""Which technique, on which VMs: the paper's Algorithm 1, as published and corrected.

Both modes ask `measure(technique, vms)` for the performance T of a run (average TFLOP/s per GPU
over a short budget; 0 when it fails, e.g. out of memory) and run each configuration at most once,
in the published order: Pipeshard on all VMs; Data and Shard on each VM alone; ZeRO2 on all VMs
only when the earlier results leave the decision open.

`published` is the pseudo-code (docs/paper.md, "Algorithm 1") taken literally, for two VMs or more (Pipeshard and
ZeRO2 span every VM; Data and Shard run on each VM; "ties to V1" becomes "ties to the first VM").
Read literally, it gives answers a user would not want:
1. A working Pipeshard loses to nothing: when every single-VM run fails (Tz = 0), step 4 needs
   Tz > 0, step 5 needs Tz > Tp, and step 6 answers ZeRO2, or "none: needs more GPU memory" when
   ZeRO2 fails too, although Pipeshard ran.
2. Near-equal results (within delta) also answer ZeRO2, without comparing it with the two runs it
   tied between (it may be far slower), and "none" if ZeRO2 fails although two runs worked.
3. T is per GPU (Alpa divides by the number of GPUs), so Pipeshard on 4 GPUs loses to one VM of 2
   GPUs that is only a little more efficient per GPU, even when Pipeshard trains twice as fast.

`corrected` keeps the algorithm's order and threshold but compares what a user waits for: the
time to train, i.e. the run's total throughput (T x GPUs it uses); a failed run never wins; a
working configuration is never thrown away for "none". When Pipeshard and the best single VM are
within delta of each other (or both fail), ZeRO2 is tried too, and the answer is the single VM if it
is within delta of the fastest of the three (about as fast, and it frees VMs), else the fastest.
So the answer is always within delta of the fastest configuration the algorithm measured.
"""
from dataclasses import dataclass, field
from typing import Callable

from harness import inputs
from harness.errors import BadInput

PIPESHARD, DATA, SHARD, ZERO2 = "Pipeshard", "Data", "Shard", "ZeRO2"
MODES = ("published", "corrected")


@dataclass(frozen=True)
class Run:
    technique: str
    vms: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.technique} on {'+'.join(self.vms)}"


@dataclass
class Decision:
    technique: str | None  # None: nothing ran; the cluster needs more GPU memory
    vms: tuple[str, ...] | None
    rule: str  # which step of the algorithm decided, with its numbers
    mode: str
    delta: float
    trials: list[dict] = field(default_factory=list)  # every run measured (or skipped), in order: technique, vms, T, gpus

    def to_dict(self) -> dict:
        return {"technique": self.technique, "vms": list(self.vms) if self.vms else None, "rule": self.rule,
                "mode": self.mode, "delta": self.delta, "trials": self.trials}


class _Trials:
    """Runs each configuration at most once and keeps the table of what ran (and what a planner skipped)."""

    def __init__(self, measure: Callable[[str, tuple], float], gpus_per_vm: int):
        self.measure, self.gpus_per_vm = measure, gpus_per_vm
        self.table: list[dict] = []
        self.seen: dict[Run, float] = {}

    def __call__(self, technique: str, vms: tuple) -> float:
        run = Run(technique, tuple(vms))
        if run not in self.seen:
            value = float(self.measure(run.technique, run.vms))
            if not value >= 0:  # NaN or negative: a measurement bug, not a result
                raise ValueError(f"{run.label}: T must be a non-negative number, got {value}")
            self.seen[run] = value
            self.table.append({"technique": technique, "vms": list(run.vms), "T": value,
                               "gpus": self.gpus_per_vm * len(run.vms)})
        return self.seen[run]

    def skip(self, technique: str, vms: tuple, why: str) -> None:
        self.table.append({"technique": technique, "vms": list(vms), "T": None, "skipped": why,
                           "gpus": self.gpus_per_vm * len(vms)})


def _check(vms, delta: float) -> tuple[str, ...]:
    vms = tuple(vms)
    if len(vms) < 2 or len(set(vms)) != len(vms):
        raise BadInput(f"selection needs at least two distinct VMs, got {list(vms)}")
    if not 0 < delta <= 1:
        raise BadInput(f"--delta must be in (0, 1], got {delta}")
    return vms


def _best_single(vms, t: _Trials, predicted=None, margin: float = 0.3) -> tuple[float, str, str]:
    """(T, VM, technique) of the best single-VM run: the first VM on a tie, Data when Td >= Ts.

    With predictions (planner mode) the candidates run from the most promising down, and one is
    skipped when its prediction is below a measured candidate's by more than the factor
    (1 + margin)^2: if every prediction is within a factor 1 + margin of what it predicts, the
    skipped run would have been slower, so the answer is the one all runs would give."""
    candidates = [(vm, tech) for vm in vms for tech in (DATA, SHARD)]
    measured: dict[tuple, float] = {}
    if predicted is None:
        for vm, tech in candidates:
            measured[(vm, tech)] = t(tech, (vm,))
    else:
        guess = {c: predicted(c[1], (c[0],)) for c in candidates}
        # A run exactly (1 + margin)^2 below may tie, and ties decide (first VM, Data): it must run.
        # The factor is computed in floating point, so "exactly" gets a relative tolerance.
        bound = (1 + margin) ** 2 * (1 + 1e-9)
        for c in sorted(candidates, key=lambda c: -guess[c]):
            beaten_by = next((b for b, value in measured.items()
                              if value > 0 and guess[c] * bound < guess[b]), None)
            if beaten_by:
                t.skip(c[1], (c[0],), f"predicted below {beaten_by[1]} on {beaten_by[0]} by more than (1 + {margin})^2")
            else:
                measured[c] = t(c[1], (c[0],))
    best = None
    for vm in vms:
        td, ts = measured.get((vm, DATA)), measured.get((vm, SHARD))
        if td is None and ts is None:
            continue
        here = (td, vm, DATA) if ts is None or (td is not None and td >= ts) else (ts, vm, SHARD)
        if best is None or here[0] > best[0]:
            best = here
    return best


def published(vms, measure: Callable[[str, tuple], float], delta: float = 0.1, gpus_per_vm: int = 2,
              predicted=None, margin: float = 0.3) -> Decision:
    vms = _check(vms, delta)
    t = _Trials(measure, gpus_per_vm)
    tp = t(PIPESHARD, vms)  # step 1
    tz, vm, tech = _best_single(vms, t, predicted, margin)  # steps 2-3

    def decide(technique, on, rule):
        return Decision(technique, on, rule, "published", delta, t.table)

    if tz > 0 and (tp - tz) / tz > delta:
        return decide(PIPESHARD, vms, f"step 4: (Tp - Tz) / Tz = ({tp:.4g} - {tz:.4g}) / {tz:.4g} "
                                      f"= {(tp - tz) / tz:.3g} > delta = {delta}")
    if tp > 0 and (tz - tp) / tp > delta:
        return decide(tech, (vm,), f"step 5: (Tz - Tp) / Tp = ({tz:.4g} - {tp:.4g}) / {tp:.4g} "
                                   f"= {(tz - tp) / tp:.3g} > delta = {delta}; best single VM {vm} with {tech}")
    tz2 = t(ZERO2, vms)  # step 6
    if tz2 > 0:
        return decide(ZERO2, vms, f"step 6: neither step 4 nor 5 applies (Tp = {tp:.4g}, Tz = {tz:.4g}) "
                                  f"and ZeRO2 runs (T = {tz2:.4g})")
    return decide(None, None, f"step 6: neither step 4 nor 5 applies (Tp = {tp:.4g}, Tz = {tz:.4g}) and ZeRO2 "
                              "fails: the cluster needs more GPU memory")


def corrected(vms, measure: Callable[[str, tuple], float], delta: float = 0.1, gpus_per_vm: int = 2,
              predicted=None, margin: float = 0.3) -> Decision:
    vms = _check(vms, delta)
    t = _Trials(measure, gpus_per_vm)
    # Total throughput (T x GPUs used) is proportional to 1 / time to train the same model on the same data.
    p = t(PIPESHARD, vms) * gpus_per_vm * len(vms)
    tz, vm, tech = _best_single(vms, t, predicted, margin)
    z = tz * gpus_per_vm

    def decide(technique, on, rule):
        return Decision(technique, on, rule, "corrected", delta, t.table)

    def beats(a, b):  # a runs and is better than b by more than delta; a failed b always loses
        return a > 0 and (b == 0 or (a - b) / b > delta)

    if beats(p, z):
        return decide(PIPESHARD, vms, f"Pipeshard on all VMs ({p:.4g} TFLOP/s in all) beats the best single VM "
                                      f"({tech} on {vm}, {z:.4g}) by more than delta = {delta}")
    if beats(z, p):
        return decide(tech, (vm,), f"{tech} on {vm} alone ({z:.4g} TFLOP/s in all) beats Pipeshard on all VMs "
                                   f"({p:.4g}) by more than delta = {delta}")
    # Here Pipeshard and the best single VM are within delta of each other, or both fail.
    z2 = t(ZERO2, vms) * gpus_per_vm * len(vms)
    best = max(p, z, z2)
    if best == 0:
        return decide(None, None, "every run fails: the cluster needs more GPU memory")
    if z * (1 + delta) >= best:
        return decide(tech, (vm,), f"{tech} on {vm} alone ({z:.4g} TFLOP/s in all) is within delta = {delta} of "
                                   f"the best (Pipeshard {p:.4g}, ZeRO2 {z2:.4g}) and frees the other VMs")
    technique = PIPESHARD if p >= z2 else ZERO2
    return decide(technique, vms, f"Pipeshard ({p:.4g} TFLOP/s in all) and {tech} on {vm} ({z:.4g}) are within "
                                  f"delta = {delta} or fail; ZeRO2 gives {z2:.4g}; {technique} on all VMs is the fastest")


def average_tflops(record: dict | None) -> float:
    """T of a trial record: average TFLOP/s per GPU over its timed steps (Alpa's formula, as the
    paper's driver averaged over its logging interval); 0 for a failed or missing trial."""
    if record is None or record["status"] != "ok" or not record["timing"]["step_times_s"]:
        return 0.0
    times = record["timing"]["step_times_s"]
    gpus = record["cluster"]["hosts"] * record["cluster"]["devices_per_host"]
    return record["throughput"]["flops_per_step_alpa"] * len(times) / sum(times) / gpus / 1e12


def select(mode: str, vms, measure, delta: float = 0.1, gpus_per_vm: int = 2, predicted=None,
           margin: float = 0.3) -> Decision:
    """Algorithm 1 in the given mode; with `predicted(technique, vms) -> T` (planner mode), single-VM
    runs that cannot change the decision (see _best_single) are skipped."""
    if mode not in MODES:
        raise BadInput(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    inputs.non_negative("--margin", margin)
    return (published if mode == "published" else corrected)(vms, measure, delta, gpus_per_vm, predicted, margin)
