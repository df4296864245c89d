"""Time to a target loss: how long, in wall-clock time on a cluster's links and in tokens, each
technique takes to bring the loss on held-out data down to a target. Beyond the paper: DiLoCo
takes other steps than Data, so its time per step says nothing of how soon it has learnt as much.

The target comes from a reference run: the held-out loss Data on the slice's first VM alone reaches
after a stated number of steps. Every run trains on the same corpus less its held-out part
(harness.runs.trials.Runner's held_out), with the optimizer schedule spanning the cap, and is
measured on the held-out part every `eval_every` steps (skipping a measurement where the model has
not moved since the last: DiLoCo's between syncs); the time is the sum of its timed steps (the
first step, which pays one-time costs, is trained but not timed, as in the trials). A run that does
not reach the target within the cap is "not reached", a result of its own; one that fails is
recorded as failed, never as reached or not. Each run starts from the untrained model: a step that
has trained before (a repeat, another slice) starts over with its compile kept (Runner.prepare's
fresh), so repeats differ in their times, not in their losses. Where the cluster counts the link's
packets, the bytes that crossed it during the training steps are kept too.

    runner = Runner(cluster, [sl], budget, held_out=HELD_OUT, schedule_steps=cap)
    target = target_loss(runner, sl, reference_steps)
    result = to_target(runner, Trial.on(sl, "DiLoCo"), target, eval_every=5, cap_steps=cap)
"""
import math
from dataclasses import asdict, dataclass, field

from harness.backends.contract import Failed
from harness.errors import BadInput
from harness.platform.slices import Slice
from harness.runs.trials import Runner, Trial

HELD_OUT = 0.05  # of the corpus's blocks, never trained on


@dataclass
class ToTarget:
    technique: str
    slice: str
    vms: str
    target: float
    status: str = "not reached"  # reached, not reached (within the cap), or error
    steps: int = 0  # trained, the untimed first one included
    tokens: int = 0
    seconds: float = 0.0  # the timed steps' wall-clock time
    # delivered across the link by the training steps (with the few packets of the RTT probe a
    # change of slice sends); None: not counted (one VM, a live slice)
    link_bytes: int | None = None
    curve: list = field(default_factory=list)  # (tokens, seconds, held-out loss) at every measurement
    reason: str | None = None
    repeat: int = 0  # which of a sweep's repeats (harness.experiments.beyond)

    def to_dict(self) -> dict:
        return asdict(self)


def _check(eval_every: int, cap_steps: int) -> None:
    if eval_every < 1 or cap_steps < 2:
        raise BadInput(f"time to target: eval_every must be at least 1 and the cap at least 2 steps, got "
                       f"{eval_every} and {cap_steps}")


def target_loss(runner: Runner, sl: Slice, steps: int) -> float:
    """The held-out loss Data on the slice's first VM alone reaches after `steps` steps."""
    trial = Trial.on(sl, "Data", sl.vms[0].name)
    prepared = runner.prepare(trial, fresh=True)
    if prepared.status != "ok":
        raise Failed(prepared.status, f"the reference run ({trial.label}): {prepared.reason}")
    for _ in range(steps - runner.budget.warmup_steps):
        runner.step(prepared)
    return measured(runner.held_out_loss(trial), f"the reference run ({trial.label}) after {steps} steps")


def measured(loss: float, where: str) -> float:
    """A held-out loss that is a number; a NaN or an infinity is a failure, never a result."""
    if not math.isfinite(loss):
        raise Failed("error", f"{where}: the held-out loss is {loss}")
    return loss


def to_target(runner: Runner, trial: Trial, target: float, eval_every: int, cap_steps: int) -> ToTarget:
    """Train trial's step until its held-out loss is at most target, measuring it every eval_every
    steps, for at most cap_steps steps."""
    _check(eval_every, cap_steps)
    result = ToTarget(trial.technique, trial.slice, trial.vms, target)
    tokens_per_step = runner.train_config(trial).batch_size * runner.train_config(trial).resolved_seq_len(
        runner.model_cfg)
    try:
        before = runner.counters(trial)  # the untimed first step crosses the link too
        prepared = runner.prepare(trial, fresh=True)
        if prepared.status != "ok":
            return _failed(result, prepared.reason)
        if before is not None:
            result.link_bytes = delivered(before, runner.counters(trial))
        result.steps = runner.budget.warmup_steps
        moves, measured_at = runner.method(trial).model_moves, None
        while True:
            result.tokens = result.steps * tokens_per_step
            # A model that has not moved since it was measured (DiLoCo's between syncs) would give
            # the same loss again: it is measured once.
            if measured_at is None or any(moves(s) for s in range(measured_at + 1, result.steps + 1)):
                loss = measured(runner.held_out_loss(trial), f"{trial.label} after {result.steps} steps")
                result.curve.append((result.tokens, result.seconds, loss))
                measured_at = result.steps
                if loss <= target:
                    result.status = "reached"
                    return result
            if result.steps >= cap_steps:
                return result
            before = runner.counters(trial)
            for _ in range(min(eval_every, cap_steps - result.steps)):
                result.seconds += runner.step(prepared)
                result.steps += 1
            if before is not None:  # the held-out loss's own traffic, between these blocks, is not the training's
                result.link_bytes += delivered(before, runner.counters(trial))
    except Failed as e:
        return _failed(result, e.reason)


def delivered(before: dict, after: dict) -> int:
    return after["delivered_bytes"] - before["delivered_bytes"]


def _failed(result: ToTarget, reason: str | None) -> ToTarget:
    result.status, result.reason = "error", reason
    return result
