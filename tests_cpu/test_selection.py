"""Algorithm 1 (harness.paper.selection) over made-up trial outcomes: failures, ties, near-equal results.

The outcomes are T values (TFLOP/s per GPU, 0 = failed) that hypothesis draws, and often draws
equal, zero, or a hair either side of the threshold delta, where the published pseudo-code's edge
cases live. The measurement itself is real elsewhere (test_claims runs the algorithm on trials).
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.analysis import costmodel
from harness.core.config import model_config
from harness.errors import BadInput
from harness.paper import selection
from harness.paper.selection import DATA, PIPESHARD, SHARD, ZERO2
from harness.platform import slices

DELTA = 0.1


def outcomes(vms):
    """T of every configuration the algorithm may run, drawn around a common base value so that
    equal, near-threshold and failed runs are frequent."""
    runs = [(PIPESHARD, tuple(vms)), (ZERO2, tuple(vms))] + [(t, (vm,)) for vm in vms for t in (DATA, SHARD)]
    factor = st.sampled_from([0.0, 1.0, 1 + DELTA, 1 + DELTA + 1e-9, 1 + DELTA - 1e-9, 1 / (1 + DELTA), 0.5, 2.0, 4.0])
    value = st.one_of(factor, st.floats(0.01, 10.0))
    return st.fixed_dictionaries({r: value for r in runs})


@st.composite
def cases(draw):
    vms = [f"vm{i}" for i in range(1, draw(st.integers(2, 4)) + 1)]
    base = draw(st.floats(0.5, 50.0))
    return vms, {run: base * f for run, f in draw(outcomes(vms)).items()}


class Measured:
    def __init__(self, values):
        self.values, self.calls = values, []

    def __call__(self, technique, vms):
        self.calls.append((technique, tuple(vms)))
        return self.values[(technique, tuple(vms))]


def singles(values, vms):
    return {(t, vm): values[(t, (vm,))] for vm in vms for t in (DATA, SHARD)}


def total(values, decision, gpus_per_vm=2):
    return values[(decision.technique, decision.vms)] * gpus_per_vm * len(decision.vms)


# -- published ---------------------------------------------------------------------------------
@settings(max_examples=400, deadline=None)
@given(cases())
def test_published_follows_the_pseudo_code(case):
    vms, values = case
    m = Measured(values)
    d = selection.published(vms, m, DELTA)
    tp = values[(PIPESHARD, tuple(vms))]
    tz = max(singles(values, vms).values())
    # steps 1-2 in order, each configuration once; ZeRO2 only when step 6 is reached
    assert m.calls[:1 + 2 * len(vms)] == [(PIPESHARD, tuple(vms))] + [(t, (vm,)) for vm in vms for t in (DATA, SHARD)]
    assert len(m.calls) == len(set(m.calls)) == len(d.trials)  # no planner: nothing skipped
    reached_6 = (ZERO2, tuple(vms)) in m.calls
    assert reached_6 == (d.technique in (ZERO2, None))
    if d.technique == PIPESHARD:
        assert d.vms == tuple(vms) and tz > 0 and (tp - tz) / tz > DELTA
    elif d.technique in (DATA, SHARD):
        (vm,) = d.vms
        assert tp > 0 and (tz - tp) / tp > DELTA
        first_best = next(v for v in vms if max(values[(DATA, (v,))], values[(SHARD, (v,))]) == tz)
        assert vm == first_best  # ties go to the first VM
        assert d.technique == (DATA if values[(DATA, (vm,))] >= values[(SHARD, (vm,))] else SHARD)
    else:
        assert not (tz > 0 and (tp - tz) / tz > DELTA) and not (tp > 0 and (tz - tp) / tp > DELTA)
        assert (d.technique == ZERO2) == (values[(ZERO2, tuple(vms))] > 0)
    assert d.rule.startswith("step ")


@settings(max_examples=200, deadline=None)
@given(cases(), st.sampled_from([0.25, 0.5, 2.0, 8.0]))
def test_published_depends_on_ratios_only(case, scale):
    vms, values = case
    a = selection.published(vms, Measured(values), DELTA)
    b = selection.published(vms, Measured({k: v * scale for k, v in values.items()}), DELTA)
    assert (a.technique, a.vms) == (b.technique, b.vms)


def test_published_ignores_a_working_pipeshard_when_every_single_vm_run_fails():
    """Misbehaviour 1 of the docstring: Tz = 0 skips steps 4 and 5."""
    values = {(PIPESHARD, ("vm1", "vm2")): 5.0, (ZERO2, ("vm1", "vm2")): 1.0,
              **{(t, (vm,)): 0.0 for vm in ("vm1", "vm2") for t in (DATA, SHARD)}}
    assert selection.published(["vm1", "vm2"], Measured(values), DELTA).technique == ZERO2
    values[(ZERO2, ("vm1", "vm2"))] = 0.0
    d = selection.published(["vm1", "vm2"], Measured(values), DELTA)
    assert (d.technique, d.vms) == (None, None) and "more GPU memory" in d.rule
    fixed = selection.corrected(["vm1", "vm2"], Measured(values), DELTA)
    assert (fixed.technique, fixed.vms) == (PIPESHARD, ("vm1", "vm2"))


def test_published_answers_none_when_near_equal_runs_work_but_zero2_fails():
    """Misbehaviour 2: within delta, step 6 takes ZeRO2 unseen, and 'none' when it fails."""
    values = {(PIPESHARD, ("vm1", "vm2")): 1.0, (ZERO2, ("vm1", "vm2")): 0.0,
              (DATA, ("vm1",)): 1.05, (SHARD, ("vm1",)): 0.5, (DATA, ("vm2",)): 1.0, (SHARD, ("vm2",)): 0.5}
    assert selection.published(["vm1", "vm2"], Measured(values), DELTA).technique is None
    values[(ZERO2, ("vm1", "vm2"))] = 0.01  # far slower than both: published still takes it
    assert selection.published(["vm1", "vm2"], Measured(values), DELTA).technique == ZERO2


def test_published_prefers_per_gpu_efficiency_over_time_to_train():
    """Misbehaviour 3: T is per GPU, so 2 GPUs at 1.2 beat 4 GPUs at 1.0 (2.4 vs 4 TFLOP/s in all)."""
    values = {(PIPESHARD, ("vm1", "vm2")): 1.0, (ZERO2, ("vm1", "vm2")): 0.5,
              (DATA, ("vm1",)): 1.2, (SHARD, ("vm1",)): 0.5, (DATA, ("vm2",)): 1.0, (SHARD, ("vm2",)): 0.5}
    assert selection.published(["vm1", "vm2"], Measured(values), DELTA).vms == ("vm1",)
    assert selection.corrected(["vm1", "vm2"], Measured(values), DELTA).technique == PIPESHARD


# -- corrected ---------------------------------------------------------------------------------
@settings(max_examples=400, deadline=None)
@given(cases())
def test_corrected_answers_a_working_configuration_within_delta_of_the_fastest_measured(case):
    vms, values = case
    m = Measured(values)
    d = selection.corrected(vms, m, DELTA)
    measured = {run: values[run] * 2 * len(run[1]) for run in m.calls}  # TFLOP/s in all
    assert len(m.calls) == len(set(m.calls)) == len(d.trials)  # no planner: nothing skipped
    if d.technique is None:
        assert max(measured.values()) == 0 and (ZERO2, tuple(vms)) in m.calls
        return
    assert total(values, d) > 0
    assert total(values, d) * (1 + DELTA) * (1 + 1e-12) >= max(measured.values())


@settings(max_examples=200, deadline=None)
@given(cases(), st.sampled_from([1.5, 3.0, 100.0]))
def test_corrected_keeps_its_answer_when_that_answer_gets_faster(case, gain):
    vms, values = case
    d = selection.corrected(vms, Measured(values), DELTA)
    if d.technique is None:
        return
    faster = dict(values)
    faster[(d.technique, d.vms)] *= gain
    again = selection.corrected(vms, Measured(faster), DELTA)
    assert (again.technique, again.vms) == (d.technique, d.vms)


@settings(max_examples=200, deadline=None)
@given(cases())
def test_both_modes_agree_when_a_side_wins_clearly_per_gpu_and_in_all(case):
    """Where Pipeshard beats every single VM by more than delta per GPU, it also does in total
    throughput (it uses more GPUs), so the modes agree."""
    vms, values = case
    tz = max(singles(values, vms).values())
    if tz > 0 and (values[(PIPESHARD, tuple(vms))] - tz) / tz > DELTA:
        for mode in selection.MODES:
            assert selection.select(mode, vms, Measured(values), DELTA).technique == PIPESHARD


@pytest.mark.parametrize("vms, delta, match", [(["vm1"], 0.1, "two distinct VMs"), (["vm1", "vm1"], 0.1, "two distinct"),
                                               (["vm1", "vm2"], 0.0, "delta must be in"),
                                               (["vm1", "vm2"], 1.5, "delta must be in")])
def test_bad_input_is_named(vms, delta, match):
    with pytest.raises(BadInput, match=match):
        selection.published(vms, lambda t, v: 1.0, delta)


def test_a_nan_measurement_is_refused():
    with pytest.raises(ValueError, match="Pipeshard on vm1\\+vm2: T must be a non-negative number"):
        selection.corrected(["vm1", "vm2"], lambda t, v: float("nan"), 0.1)


# -- planner mode ------------------------------------------------------------------------------
MARGIN = 0.3


@settings(max_examples=400, deadline=None)
@given(cases(), st.data(), st.sampled_from(selection.MODES))
def test_the_planner_reaches_the_same_decision_with_at_most_as_many_trials(case, data, mode):
    """Predictions off by up to a factor 1 + margin either way (drawn per run, extremes included)
    never change the decision; the runs they skip are counted."""
    vms, values = case
    error = st.one_of(st.sampled_from([1 / (1 + MARGIN), 1.0, 1 + MARGIN]), st.floats(1 / (1 + MARGIN), 1 + MARGIN))
    guesses = {run: value * data.draw(error) for run, value in values.items()}
    full, planned = Measured(values), Measured(values)
    a = selection.select(mode, vms, full, DELTA)
    b = selection.select(mode, vms, planned, DELTA, predicted=lambda t, v: guesses[(t, tuple(v))], margin=MARGIN)
    assert (b.technique, b.vms) == (a.technique, a.vms)
    assert set(planned.calls) <= set(full.calls)
    skipped = {(x["technique"], tuple(x["vms"])) for x in b.trials if x.get("skipped")}
    assert set(planned.calls) | skipped == set(full.calls) and not set(planned.calls) & skipped


@pytest.mark.parametrize("mode", selection.MODES)
def test_a_run_predicted_exactly_the_margin_squared_below_still_runs(mode):
    """Found by the property test above: Data and Shard tie on vm4 (ties go to Data), predicted
    at the two extremes of the margin, so Data's guess is (1 + margin)^2 below Shard's up to
    rounding. Skipping it would answer Shard."""
    vms = ["vm1", "vm2", "vm3", "vm4"]
    values = {(t, (vm,)): 0.0 for vm in vms[:3] for t in (DATA, SHARD)}
    values |= {(PIPESHARD, tuple(vms)): 0.0, (ZERO2, tuple(vms)): 0.0, (DATA, ("vm4",)): 3.0, (SHARD, ("vm4",)): 3.0}
    guesses = {run: v / (1 + MARGIN) for run, v in values.items()} | {(SHARD, ("vm4",)): 3.0 * (1 + MARGIN)}
    full, planned = Measured(values), Measured(values)
    a = selection.select(mode, vms, full, DELTA)
    b = selection.select(mode, vms, planned, DELTA, predicted=lambda t, v: guesses[(t, tuple(v))], margin=MARGIN)
    assert (b.technique, b.vms) == (a.technique, a.vms) and (DATA, ("vm4",)) in planned.calls
    if mode == "corrected":  # published answers none: Pipeshard failed and so did ZeRO2
        assert (a.technique, a.vms) == (DATA, ("vm4",))


def test_the_planner_skips_the_slower_gpus_of_a_mixed_slice():
    """UTAH-GPN's RTX 6000 VM and T4 VM, predicted by the cost model at paper scale (gpt2m): the
    T4's single-VM runs are predicted about half as fast and skipped."""
    sl, cfg = slices.load("UTAH-GPN"), model_config("gpt2m")
    predicted = lambda t, vms: costmodel.predict(t, sl, tuple(vms), cfg).tflops_per_gpu
    values = {(t, vms): predicted(t, vms) for t in (PIPESHARD, ZERO2, DATA, SHARD) for vms in (("vm1", "vm2"), ("vm1",), ("vm2",))}
    m = Measured(values)  # measurements that agree with the predictions
    d = selection.published(["vm1", "vm2"], m, DELTA, predicted=predicted, margin=MARGIN)
    assert (d.technique, d.vms) == (DATA, ("vm1",))
    assert sorted(m.calls) == sorted([(PIPESHARD, ("vm1", "vm2")), (DATA, ("vm1",)), (SHARD, ("vm1",))])
    assert [(x["technique"], x["vms"]) for x in d.trials if x.get("skipped")] == [(DATA, ["vm2"]), (SHARD, ["vm2"])]
