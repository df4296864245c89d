"""Conformance of the four techniques: same numbers as the single-device trainer in one process, and
the communication structure of their definitions, read from the compiled HLO. (In two processes:
test_cluster_local.py; through Ray on the emulated link: the claims suite's trials.)"""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.analysis.netmodel import Links
from harness.core import model, train
from harness.core.config import model_config
from harness.core.flops import param_count
from harness.errors import BadInput
from harness.techniques import TECHNIQUES, ClusterShape, buckets, technique
from harness.techniques.pipeshard import exchanges
from harness.techniques.pipeshard_stages import SCHEDULES, balance
from harness.techniques.shard_alpa import NAME as ALPA_SHARD
from harness.techniques.shard_alpa import PLANS, AlpaPlan
from harness.techniques.shard_parallel import IntraOpPlan, choose, estimate
from tests_cpu.techniques_setup import MICRO_BATCHES, MODEL, RTOL, SHAPES, TRAIN, UNTIED, collectives_of, stepper

pytestmark = [pytest.mark.slow, pytest.mark.untimed]  # compiles and trains every technique on four devices


def run_in_process(name, cfg, shape, packed, **options):
    plan = technique(name, micro_batches=MICRO_BATCHES, **options).build(cfg, ClusterShape(*shape), TRAIN, TRAIN.steps)
    return train.train_plan(plan, cfg, TRAIN, packed).losses


# DiLoCo's VMs take steps of their own between syncs: test_diloco.py holds it against Data.
SAME_UPDATES = [name for name, cls in TECHNIQUES.items() if not cls.local_updates]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", SAME_UPDATES)
def test_one_process_matches_single_device(name, shape, packed, reference):
    losses = run_in_process(name, MODEL, shape, packed)
    np.testing.assert_allclose(losses, reference[MODEL.name + "True"], rtol=RTOL)


@pytest.mark.parametrize("name", ["Data", "ZeRO2", ALPA_SHARD])
def test_combined_buckets_match_single_device(name, packed, reference):
    np.testing.assert_allclose(run_in_process(name, MODEL, (2, 2), packed, combine=True),
                               reference[MODEL.name + "True"], rtol=RTOL)


def test_a_stepper_parked_between_steps_trains_on_as_if_it_had_not_been(packed):
    """A sweep parks every technique but the one that runs (harness.backends.worker): its state,
    sharded over the devices, leaves them for host memory and comes back bit for bit."""
    plan = technique("ZeRO2", micro_batches=MICRO_BATCHES).build(MODEL, ClusterShape(2, 2), TRAIN, TRAIN.steps)
    never_parked = train.plan_stepper(plan, MODEL, TRAIN, packed, train.TrainRun(TRAIN.steps)).advance(TRAIN.steps)
    parked = train.plan_stepper(plan, MODEL, TRAIN, packed, train.TrainRun(TRAIN.steps))
    parked.advance(2)
    state = jax.tree.leaves((parked.params, parked.opt_state))
    shardings, live = [x.sharding for x in state], len(jax.live_arrays())
    del state
    parked.park()
    parked.park()  # twice is once
    assert parked.params is None and len(jax.live_arrays()) <= live - len(shardings)  # off the devices
    parked.advance(TRAIN.steps - 2)
    assert [x.sharding for x in jax.tree.leaves((parked.params, parked.opt_state))] == shardings
    assert parked.run.losses == never_parked.losses


@pytest.mark.parametrize("shape", [(2, 2), (4, 1)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_pipeshard_with_untied_embeddings_matches(shape, packed, reference):
    np.testing.assert_allclose(run_in_process("Pipeshard", UNTIED, shape, packed), reference[UNTIED.name + "False"],
                               rtol=RTOL)


@pytest.mark.parametrize("shape", [(2, 2), (4, 1)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_pipeshard_in_gpipes_order_matches(shape, packed, reference):
    np.testing.assert_allclose(run_in_process("Pipeshard", MODEL, shape, packed, schedule="gpipe"),
                               reference[MODEL.name + "True"], rtol=RTOL)


def test_pipeshard_with_rematerialisation_matches(packed, reference):
    np.testing.assert_allclose(run_in_process("Pipeshard", MODEL, (2, 2), packed, remat=True),
                               reference[MODEL.name + "True"], rtol=RTOL)


@pytest.mark.parametrize("cfg", [MODEL, UNTIED], ids=["tied", "untied"])
@pytest.mark.parametrize("blocks, vocab", PLANS, ids=lambda x: x)
def test_alpas_shard_matches_in_every_plan_its_solver_can_pick(blocks, vocab, cfg, packed, reference):
    """Each plan its step runs, tied head or not: the blocks split by the batch or by heads and
    hidden units over all four GPUs, the vocabulary matrices by the batch or by the vocabulary."""
    np.testing.assert_allclose(run_in_process(ALPA_SHARD, cfg, (2, 2), packed, plan=AlpaPlan(blocks, vocab)),
                               reference[cfg.name + str(cfg.tie_embeddings)], rtol=RTOL)


def test_alpas_shard_pads_a_vocabulary_the_gpus_do_not_divide(packed):
    """gpt2m's 50257 words on four GPUs: the padded rows are no words (no probability, no gradient)."""
    odd = dataclasses.replace(MODEL, vocab_size=MODEL.vocab_size - 3)
    words = dataclasses.replace(packed, blocks=packed.blocks % odd.vocab_size)
    single = train.train(odd, TRAIN, words).losses
    np.testing.assert_allclose(run_in_process(ALPA_SHARD, odd, (2, 2), words, plan=AlpaPlan("data", "vocab")), single,
                               rtol=RTOL)


@pytest.mark.parametrize("name", SAME_UPDATES)
def test_a_padded_vocabulary_and_a_sliced_loss_train_as_on_one_device(name, packed):
    """The embedding padded to a multiple of 64 rows (cfg.vocab_multiple, 500 words) and the loss
    over two slices of the sequence (cfg.loss_chunks; the pipeline's head takes it whole): every
    technique splits, pads and reduces them as the single-device trainer computes them."""
    padded = dataclasses.replace(MODEL, vocab_size=MODEL.vocab_size - 12, vocab_multiple=64, loss_chunks=2)
    words = dataclasses.replace(packed, blocks=packed.blocks % padded.vocab_size)
    np.testing.assert_allclose(run_in_process(name, padded, (2, 2), words), train.train(padded, TRAIN, words).losses,
                               rtol=RTOL)


@pytest.mark.parametrize("cfg, shape", [(MODEL, (2, 2)), (UNTIED, (4, 1))], ids=["tied-2x2", "untied-4x1"])
@pytest.mark.parametrize("name", SAME_UPDATES)
def test_the_model_a_technique_trained_is_the_single_devices(name, cfg, shape, packed, reference_params):
    """Plan.model_params puts a technique's parameters back in the model's own tree (Pipeshard's
    stages, Alpa's padded vocabulary, ...): after the same steps it is the single-device model."""
    s = stepper(name, cfg, shape, packed)
    s.advance(TRAIN.steps)
    ours = jax.device_get(s.plan.model_params(s.params, s.opt_state))
    assert jax.tree.structure(ours) == jax.tree.structure(reference_params[cfg.tie_embeddings])
    # AdamW moves a weight by up to the learning rate a step whatever its gradient's size, so a
    # gradient near zero summed in another order may move it a little differently: the tolerance
    # is a small part of what TRAIN's steps move a weight (5 x 5e-3).
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(reference_params[cfg.tie_embeddings])):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-4)


def test_shard_with_tensor_parallel_plan_matches(packed, reference):
    plan = IntraOpPlan(data=(2, 1), tensor=(1, 2), shard_optimizer=True)
    np.testing.assert_allclose(run_in_process("Shard", MODEL, (2, 2), packed, plan=plan),
                               reference[MODEL.name + "True"], rtol=RTOL)


# Without conftest.ONE_PROCESS_CLUSTER_FLAG, on one core beside a busy process, 4 runs of 4
# deadlocked within their first 300 steps (on a quiet core, none did in 1000).
DEADLOCK_STEPS = 300
# A rendezvous that waits this long is a deadlock (XLA's default is 40 s): healthy waits, even
# beside a busy core, took under a second.
DEADLOCK_WAIT_S = 60


def test_a_one_process_cluster_pinned_to_one_core_never_deadlocks():
    """The flags this process runs with (conftest.py) keep XLA's CPU runtime from deadlocking the
    tensor-parallel step on a busy core; a deadlock aborts the child, with XLA's message on its
    stderr."""
    core = min(os.sched_getaffinity(0))
    busy = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_collective_call_terminate_timeout_seconds={DEADLOCK_WAIT_S}"
        env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "4"}
        done = subprocess.run([sys.executable, "-m", "tests_cpu.one_core_steps", str(core), str(DEADLOCK_STEPS)],
                              env=env, cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=900)
        competed = busy.poll() is None  # the core stayed busy the whole run
    finally:
        busy.kill()
        busy.wait()
    stuck = [line for line in done.stderr.splitlines() if "Termination timeout" in line]
    assert done.returncode == 0, f"exit {done.returncode}: {(stuck or done.stderr.splitlines() or ['no stderr'])[-1]}"
    assert competed, f"the busy process on core {core} ended before the steps did (exit {busy.returncode})"
    assert done.stdout.startswith(f"{DEADLOCK_STEPS} steps")


# ---- structure, read from the compiled HLO of a 2x2 cluster (device i is on VM i // 2) ----

@pytest.mark.parametrize("micro_batches", [1, MICRO_BATCHES])
def test_data_all_reduces_gradients_across_vms_once_per_step(micro_batches):
    found, dph = collectives_of("Data", micro_batches=micro_batches)
    crossing = [c for c in found if c.crosses_hosts(dph)]
    assert {c.op for c in crossing} == {"all-reduce"}
    assert sum(c.elements for c in crossing) >= param_count(MODEL)  # the whole gradient
    assert not any(c.in_loop for c in crossing)  # after the last microbatch, not inside their loop


def test_zero2_with_one_microbatch_reduce_scatters_gradients_and_all_gathers_parameters():
    found, dph = collectives_of("ZeRO2")
    crossing = [c for c in found if c.crosses_hosts(dph)]
    scattered = sum(c.elements for c in crossing if c.op == "reduce-scatter") * 4
    gathered = sum(c.elements for c in crossing if c.op == "all-gather")
    assert scattered >= param_count(MODEL) and gathered >= param_count(MODEL)
    # What is still all-reduced is the loss and the gradient norm: scalars, not gradients.
    assert all(c.elements <= 2 for c in crossing if c.op == "all-reduce")


def test_zero2_with_microbatches_all_reduces_and_all_gathers_once_per_step_as_alpa_compiled_it():
    """ALPA-WIRE.md: with M > 1 Alpa's ZeRO2 all-reduces the whole gradient (the accumulator stays
    replicated) and all-gathers the parameters, both after the last microbatch: 1.5x Data's bytes."""
    assert MICRO_BATCHES > 1
    found, dph = collectives_of("ZeRO2", micro_batches=MICRO_BATCHES)
    crossing = [c for c in found if c.crosses_hosts(dph)]
    reduced = sum(c.elements for c in crossing if c.op == "all-reduce" and c.elements > 2)
    gathered = sum(c.elements for c in crossing if c.op == "all-gather")
    assert reduced >= param_count(MODEL) and gathered >= param_count(MODEL)
    assert not any(c.op == "reduce-scatter" for c in crossing) and not any(c.in_loop for c in crossing)
    data, _ = collectives_of("Data", micro_batches=MICRO_BATCHES)
    ring_bytes = lambda cs: sum(c.elements * {"all-reduce": 2, "all-gather": 1, "reduce-scatter": 1}.get(c.op, 0)
                                for c in cs if c.crosses_hosts(dph))
    assert ring_bytes(found) / ring_bytes(data) == pytest.approx(1.5, rel=0.02)


def test_gradients_cross_vms_in_buckets_as_gpus_combine_them():
    """Combined, the techniques concatenate each bucket (XLA's CPU runtime would run a combined
    collective tensor by tensor): the scale model's gradients, under 30 MiB, are one all-reduce for
    Data and one reduce-scatter and one all-gather for ZeRO2; uncombined, one per tensor."""
    leaves = len(jax.tree.leaves(model.abstract_init(MODEL)[1]))

    def crossing(name, **options):
        found, dph = collectives_of(name, **options)
        return [c.op for c in found if c.crosses_hosts(dph) and c.elements > 2]  # not the loss and norm

    assert crossing("Data", combine=True) == ["all-reduce"]
    assert sorted(crossing("ZeRO2", combine=True)) == ["all-gather", "reduce-scatter"]
    assert crossing("Data").count("all-reduce") in (1, leaves)  # XLA's own combiner may tuple them
    assert sorted(crossing("ZeRO2")) == ["all-gather"] * leaves + ["reduce-scatter"] * leaves


def test_buckets_are_consecutive_and_stay_under_the_threshold():
    assert buckets.plan([10, 10, 10, 25, 5], 30) == [[0, 1, 2], [3, 4]]
    assert buckets.plan([50, 1, 1], 30) == [[0], [1, 2]]  # a tensor over the threshold travels alone
    assert buckets.plan([], 30) == []
    assert buckets.ALL_REDUCE_COMBINE_BYTES == 30 * 2**20


def test_shard_runs_collectives_inside_the_layers_on_the_tensor_axis():
    inside_vm, dph = collectives_of("Shard", plan=IntraOpPlan(data=(2, 1), tensor=(1, 2), shard_optimizer=False))
    in_layers = [c for c in inside_vm if c.in_loop and c.elements == TRAIN.batch_size // 2 * TRAIN.seq_len * 32]
    assert in_layers and not any(c.crosses_hosts(dph) for c in in_layers)  # tensor axis inside the VM
    across, _ = collectives_of("Shard", plan=IntraOpPlan(data=(1, 2), tensor=(2, 1), shard_optimizer=False))
    in_layers = [c for c in across if c.in_loop and c.op == "all-reduce"]
    assert in_layers and all(c.crosses_hosts(dph) for c in in_layers)  # tensor axis across the VMs


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("shape", [(2, 2), (4, 1)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_pipeshard_only_permutes_between_vms_but_the_tied_embedding(shape, schedule):
    found, dph = collectives_of("Pipeshard", shape=shape, micro_batches=MICRO_BATCHES, schedule=schedule)
    crossing = [c for c in found if c.crosses_hosts(dph)]
    # activations forward and their gradients back, as many exchanges as the schedule has: 1F1B
    # swaps them in one on two stages, GPipe sends each on a tick of its own
    activations = [c for c in crossing if c.op == "collective-permute" and c.elements > 2]
    assert len(activations) == exchanges(schedule, shape[0], MICRO_BATCHES)
    others = [c for c in crossing if c.op != "collective-permute"]
    assert [(c.op, c.elements) for c in others] == [("all-reduce", MODEL.vocab_size * MODEL.n_embd)]


def test_pipeshard_with_untied_embeddings_has_no_collective_across_vms():
    found, dph = collectives_of("Pipeshard", cfg=UNTIED)
    assert {c.op for c in found if c.crosses_hosts(dph)} == {"collective-permute"}


# ---- memory ----

def optimizer_bytes_per_device(name) -> int:
    plan = technique(name).build(MODEL, ClusterShape(2, 2), TRAIN, TRAIN.steps)
    _, abstract = model.abstract_init(MODEL)
    _, opt_state, _, _ = plan.abstract_args(abstract, TRAIN.batch_size, TRAIN.seq_len)
    return sum(np.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(opt_state))


def test_zero2_keeps_a_quarter_of_datas_optimizer_state_on_four_devices():
    ratio = optimizer_bytes_per_device("ZeRO2") / optimizer_bytes_per_device("Data")
    assert ratio == pytest.approx(1 / 4, rel=0.02)  # padding to whole chunks costs a little


# ---- bad input, before compiling ----

@pytest.mark.parametrize("name, options, shape, message", [
    ("Data", {}, (3, 1), "batch 8 is not divisible by devices x microbatches 3"),
    ("ZeRO2", {"micro_batches": 3}, (1, 2), "batch 8 is not divisible by devices x microbatches 6"),
    ("Pipeshard", {}, (5, 1), "Pipeshard: 5 stages (one per VM) but model conformance has only 4 layers"),
    ("Pipeshard", {"micro_batches": 3}, (2, 2), "batch 8 is not divisible by microbatches 3"),
    ("Pipeshard", {"micro_batches": 4}, (2, 4), "microbatch 2 is not divisible by devices per VM 4"),
    ("Shard", {"plan": IntraOpPlan((1, 1), (1, 3), False)}, (1, 3), "tensor axis 3 does not divide n_head 4"),
])
def test_bad_shapes_are_rejected_naming_the_numbers(name, options, shape, message):
    with pytest.raises(BadInput, match=message.replace("(", r"\(").replace(")", r"\)")):
        technique(name, **options).validate(MODEL, ClusterShape(*shape), TRAIN.batch_size)


def test_unknown_technique():
    with pytest.raises(BadInput, match="unknown technique 'FSDP'; expected one of Data, ZeRO2, Shard, Pipeshard, DiLoCo, Shard-alpa"):
        technique("FSDP")


# ---- the Pipeshard cut and the Shard planner ----

def test_pipeline_cut_gives_the_head_stage_fewer_layers():
    assert balance(24, 2, layer_cost=1.0, last_extra=3.5) == [14, 10]
    assert balance(4, 4, 1.0, 100.0) == [1, 1, 1, 1]


@given(layers=st.integers(1, 12), stages=st.integers(1, 4), extra=st.floats(0, 10))
def test_pipeline_cut_is_optimal_and_complete(layers, stages, extra):
    if stages > layers:
        return
    cut = balance(layers, stages, 1.0, extra)
    assert sum(cut) == layers and len(cut) == stages and min(cut) >= 1
    cost = lambda c: max(*c[:-1], c[-1] + extra) if len(c) > 1 else c[0] + extra
    import itertools
    best = min(cost(c) for c in itertools.product(range(1, layers + 1), repeat=stages) if sum(c) == layers)
    assert cost(cut) == pytest.approx(best)


def test_shard_planner_keeps_tensor_parallelism_inside_vms_when_vms_are_far_apart():
    gpt2m = model_config("gpt2m")
    far, _, table = choose(ClusterShape(2, 2), gpt2m, 32, 1024, 4, Links.for_rtt(100.0), 16e12)
    assert far.tensor[0] == 1  # never split a layer across a 100 ms link
    assert far.tensor_size == 2  # but shrink the gradient all-reduce that does cross it
    assert len(table) == 7
    # A planner that sees every link as fast (Alpa's uniform mesh) keeps plain data parallelism.
    uniform, _, _ = choose(ClusterShape(2, 2), gpt2m, 32, 1024, 4, Links.for_rtt(100.0).uniform(), 16e12)
    assert (uniform.data_size, uniform.tensor_size) == (4, 1)
    data_comm = lambda links: estimate(far, gpt2m, 32, 1024, 4, links, 16e12)["data_comm_s"]
    assert data_comm(Links.for_rtt(100.0)) > data_comm(Links.for_rtt(1.0))


def test_shard_planner_picks_the_smallest_plan_when_none_fits():
    gpt2m = model_config("gpt2m")
    plan, est, table = choose(ClusterShape(1, 2), gpt2m, 16, 1024, 4, Links(), 16e12, device_memory=1e9)
    assert all(problem.startswith("needs ") for _, _, problem in table)
    assert est["bytes_per_device"] == min(e["bytes_per_device"] for _, e, _ in table)
    with pytest.raises(BadInput, match="no intra-op plan for gpt2m"):  # only when no plan can be built at all
        choose(ClusterShape(1, 2), gpt2m, 3, 1024, 4, Links(), 16e12)
