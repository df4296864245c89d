"""DiLoCo, beyond the paper: local SGD between VMs, Data inside each. Its VMs take steps of their
own between syncs, so it is not held against the single-device trainer step for step (as
test_techniques.py holds the paper's techniques) but against Data where the two must agree: on one
VM, and on two where Adam is linear in the gradient. Its compiled step is read for what crosses
VMs: the pseudo-gradient, only on a sync."""
import dataclasses

import jax
import numpy as np
import pytest

from harness.analysis import hlo
from harness.core.flops import param_count
from harness.techniques import technique
from harness.techniques.diloco import NAME as DILOCO
from tests_cpu.techniques_setup import MICRO_BATCHES, MODEL, RTOL, TRAIN, collectives_of, stepper

pytestmark = [pytest.mark.slow, pytest.mark.untimed]  # compiles and trains DiLoCo on four devices


def rows(params) -> list:
    return jax.tree.leaves(jax.device_get(params))


def test_diloco_on_one_vm_is_data(packed, reference):
    """One VM's average is its own model: with outer learning rate 1 and no momentum every sync
    leaves it where its AdamW steps took it."""
    losses = stepper(DILOCO, MODEL, (1, 4), packed, sync_every=2, outer_lr=1.0, outer_momentum=0.0).advance(
        TRAIN.steps).losses
    np.testing.assert_allclose(losses, reference[MODEL.name + "True"], rtol=RTOL)


def test_diloco_model_is_its_outer_one(packed, reference_params):
    """On one VM, outer learning rate 1, no momentum and a sync after the last step, DiLoCo's
    outer model is where Data's AdamW steps took it."""
    s = stepper(DILOCO, MODEL, (1, 4), packed, sync_every=TRAIN.steps, outer_lr=1.0, outer_momentum=0.0)
    s.advance(TRAIN.steps)
    ours = jax.device_get(s.plan.model_params(s.params, s.opt_state))
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(reference_params[MODEL.tie_embeddings])):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-4)


def test_diloco_syncing_every_step_without_momentum_is_data_where_adam_is_linear(packed):
    """The VMs' average update is the update of their average gradient only where the inner
    optimizer is linear in the gradient: Adam with no moments and an epsilon that dwarfs every
    gradient (SGD at learning rate / epsilon), no clipping, no weight decay. There DiLoCo with
    H = 1, outer learning rate 1 and no momentum is Data, step for step, on two VMs."""
    linear = dataclasses.replace(TRAIN, adam_b1=0.0, adam_b2=0.0, adam_eps=1e6, learning_rate=5e4,
                                 grad_clip_norm=1e9, weight_decay=0.0)
    data = stepper("Data", MODEL, (2, 2), packed, linear)
    diloco = stepper(DILOCO, MODEL, (2, 2), packed, linear, sync_every=1, outer_lr=1.0, outer_momentum=0.0)
    for _ in range(linear.steps):
        data.advance(1), diloco.advance(1)
        for ours, theirs in zip(rows(diloco.params), rows(data.params)):
            for vm in range(2):
                np.testing.assert_allclose(ours[vm], theirs, rtol=1e-4, atol=1e-6)
    # and Adam as the paper ran it is not linear: the same sync leaves DiLoCo elsewhere
    adam = stepper(DILOCO, MODEL, (2, 2), packed, sync_every=1, outer_lr=1.0, outer_momentum=0.0)
    adam.advance(TRAIN.steps)
    ran = stepper("Data", MODEL, (2, 2), packed)
    ran.advance(TRAIN.steps)
    assert not all(np.allclose(o[0], t, rtol=1e-4, atol=1e-6) for o, t in zip(rows(adam.params), rows(ran.params)))


def test_diloco_vms_part_between_syncs_and_meet_at_every_sync(packed):
    s = stepper(DILOCO, MODEL, (2, 2), packed, sync_every=2)
    for step in range(1, TRAIN.steps + 1):
        s.advance(1)
        same = all(np.array_equal(x[0], x[1]) for x in rows(s.params))
        assert same == (step % 2 == 0), step


@pytest.mark.parametrize("delay", [0, 1])
def test_streaming_diloco_syncs_its_fragments_in_turn(packed, delay):
    """Two fragments, H = 4 (MODEL's four layers: layers 0-1 with the embeddings and the final
    norm, then layers 2-3): after inner step 2 the VMs share the first fragment and still differ
    in the second, after step 4 they share the second, and so on; the embeddings go with the first.
    Delayed by a step (taking the outer parameters as they land), each is shared a step later."""
    s = stepper(DILOCO, MODEL, (2, 2), packed, dataclasses.replace(TRAIN, steps=8), sync_every=4, fragments=2,
                delay=delay, mix=0.0)
    for step in range(1, 9):
        s.advance(1)
        params = jax.device_get(s.params)
        first = [params["wte"]["embedding"]] + [x[:, :2] for x in jax.tree.leaves(params["blocks"])]
        second = [x[:, 2:] for x in jax.tree.leaves(params["blocks"])]
        landed = (step - delay) % 4  # the phase of the sync that lands after this step
        assert all(np.array_equal(x[0], x[1]) for x in first) == (step > delay and landed == 2), step
        assert all(np.array_equal(x[0], x[1]) for x in second) == (step > delay and landed == 0), step


def test_streaming_diloco_with_one_fragment_is_diloco(packed):
    a = stepper(DILOCO, MODEL, (2, 2), packed, sync_every=2).advance(TRAIN.steps).losses
    b = stepper(DILOCO, MODEL, (2, 2), packed, sync_every=2, fragments=1).advance(TRAIN.steps).losses
    np.testing.assert_array_equal(a, b)


def test_streaming_diloco_sends_a_fragment_per_sync():
    """Each sync branch all-reduces one fragment across VMs; together the branches carry one copy
    of the parameters, and no branch carries more than the largest fragment."""
    found, dph = collectives_of(DILOCO, micro_batches=MICRO_BATCHES, sync_every=4, fragments=2)
    crossing = [c for c in found if c.crosses_hosts(dph)]
    assert crossing and all(c.op == "all-reduce" and c.in_branch and not c.in_loop for c in crossing)
    assert sum(c.elements for c in crossing) == param_count(MODEL)
    by_branch = {}  # a fragment's all-reduces sit in the computation of the branch that syncs it
    for c in crossing:
        by_branch[c.computation] = by_branch.get(c.computation, 0) + c.elements
    assert len(by_branch) == 2 and max(by_branch.values()) < 0.75 * param_count(MODEL), by_branch


def test_only_diloco_pseudo_gradient_crosses_the_vms_and_only_on_a_sync():
    """In the compiled step every collective that crosses VMs is an all-reduce inside the branch a
    sync takes, and together they carry one copy of the parameters: the pseudo-gradient."""
    found, dph = collectives_of(DILOCO, micro_batches=MICRO_BATCHES, sync_every=4)
    crossing = [c for c in found if c.crosses_hosts(dph)]
    assert crossing and all(c.op == "all-reduce" and c.in_branch and not c.in_loop for c in crossing)
    assert sum(c.elements for c in crossing) == param_count(MODEL)
    inside = [c for c in found if not c.crosses_hosts(dph)]
    assert inside and not any(c.in_branch for c in inside)  # the inner steps' gradients, every step


def test_a_delayed_sync_lands_its_steps_later_and_merges_by_mix(packed):
    """delay 1: the sync due after step 4 lands with step 5. Until then each VM trains on and the
    outer model stays; then, with mix 0, the VMs meet at the new outer model; with mix 0.5 they
    keep half of their own and still differ."""
    nine = dataclasses.replace(TRAIN, steps=9)
    taking = stepper(DILOCO, MODEL, (2, 2), packed, nine, sync_every=4, delay=1, mix=0.0)
    mixing = stepper(DILOCO, MODEL, (2, 2), packed, nine, sync_every=4, delay=1, mix=0.5)
    outer = rows(taking.opt_state["outer"])
    for step in range(1, 10):
        taking.advance(1), mixing.advance(1)
        assert all(np.array_equal(x[0], x[1]) for x in rows(taking.params)) == (step in (5, 9)), step
        assert not all(np.array_equal(x[0], x[1]) for x in rows(mixing.params)), step
        moved = not all(np.array_equal(a, b) for a, b in zip(outer, rows(taking.opt_state["outer"])))
        assert moved == (step in (5, 9)) == technique(DILOCO, sync_every=4, delay=1).model_moves(step), step
        outer = rows(taking.opt_state["outer"])


def test_a_delayed_sync_on_one_vm_keeping_its_own_is_data_and_its_outer_model_lags(packed, reference):
    """One VM, H = 2, mix 1 (the VM keeps its own), outer learning rate 1, no momentum: its steps
    are Data's, and its outer model is where Data was when the last landed sync was noted: after
    step 4 where Data was after step 2 (the sync noted after step 4 has not landed), after step 5
    where it was after step 4."""
    s = stepper(DILOCO, MODEL, (1, 4), packed, sync_every=2, delay=1, mix=1.0, outer_lr=1.0, outer_momentum=0.0)
    data = stepper("Data", MODEL, (1, 4), packed)

    def assert_outer_is_datas():
        ours = jax.device_get(s.plan.model_params(s.params, s.opt_state))
        theirs = jax.device_get(data.plan.model_params(data.params, data.opt_state))
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-4)

    s.advance(4), data.advance(2)
    assert_outer_is_datas()
    np.testing.assert_allclose(s.advance(1).losses, reference[MODEL.name + "True"], rtol=RTOL)
    data.advance(2)
    assert_outer_is_datas()


@pytest.mark.parametrize("delay", [0, 1])
def test_a_delayed_sync_runs_in_the_program_of_a_step_beside_its_forward_and_backward(delay):
    """What lets a delayed sync overlap the step it lands in: in the compiled step the all-reduce
    that crosses VMs sits in the same computation as that step's loops (its microbatches' forward
    and backward), and neither waits for the other. Undelayed, it waits for the step's update: in
    its branch there is nothing left to run beside it."""
    found, dph, text = collectives_of(DILOCO, micro_batches=MICRO_BATCHES, sync_every=4, delay=delay, text=True)
    crossing = [c for c in found if c.crosses_hosts(dph)]
    assert crossing and all(c.op == "all-reduce" and c.in_branch for c in crossing)
    assert sum(c.elements for c in crossing) == param_count(MODEL)  # the pseudo-gradient, once
    for c in crossing:
        assert bool(hlo.beside(text, c)) == bool(delay), c
