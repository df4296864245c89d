"""Each technique's wire, as its cost tells predict, against the step it compiles: what crosses the
VMs, of which kind, once per step or inside the microbatch loop, and how many bytes. A technique
whose program and cost model drift apart fails here, before any trial or prediction is wrong."""
import dataclasses

import pytest

from harness.analysis import costmodel, hlo
from harness.analysis.netmodel import Network
from harness.core import model
from harness.techniques import ClusterShape, technique
from harness.techniques.contract import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, RING_PASS, SCALAR, SEND, Step
from harness.techniques.shard_alpa import NAME as ALPA_SHARD
from harness.techniques.shard_alpa import solve
from tests_cpu.techniques_setup import MICRO_BATCHES, MODEL, TRAIN

pytestmark = [pytest.mark.slow, pytest.mark.untimed]  # compiles every technique's step to read its HLO

HOSTS, PER_HOST = 2, 2
HLO_OP = {ALL_REDUCE: "all-reduce", REDUCE_SCATTER: "reduce-scatter", ALL_GATHER: "all-gather",
          SEND: "collective-permute", RING_PASS: "collective-permute"}


# Alpa's Shard in each plan its solver picks (shard_alpa.solve) for the conformance setup's
# microbatch: three layers, so that no stacked tensor of the model has a microbatch's size.
SHARD_MODELS = {"data/vocab": dataclasses.replace(MODEL, n_layer=3),
                "tensor/vocab": dataclasses.replace(MODEL, n_layer=3, n_embd=64),
                "data/data": dataclasses.replace(MODEL, n_layer=3, vocab_size=128)}
SHARD_TRAIN, SHARD_M = dataclasses.replace(TRAIN, batch_size=16), 4  # a loop of three after the first


def wire_and_hlo(name: str, m: int, combine: bool | None = None, cfg=MODEL, train=TRAIN):
    options = {} if combine is None else {"combine": combine}
    plan = technique(name, micro_batches=m, **options).build(cfg, ClusterShape(HOSTS, PER_HOST), train, train.steps)
    _, abstract = model.abstract_init(cfg)
    compiled = [c for c in hlo.of(plan, *plan.abstract_args(abstract, train.batch_size, train.seq_len))
                if c.crosses_hosts(PER_HOST)]
    step = Step(cfg, Network(per_tensor=not combine), costmodel.Devices((1e12,) * HOSTS, (1e15,) * HOSTS, PER_HOST),
                HOSTS, PER_HOST, rtt=0.02, seq=train.seq_len, batch=train.batch_size, m=m, value=4, remat=False)
    wire = [c for c in technique(name).cost(step).wire if c.crosses_vms]
    return wire, compiled


def hlo_bytes(c: hlo.Collective) -> float:
    """Bytes per rank as the wire counts them: a reduce-scatter's input, everything else's result."""
    return 4 * c.elements * (HOSTS * PER_HOST if c.op == "reduce-scatter" else 1)


CASES = [("Data", 1, False), ("Data", MICRO_BATCHES, False), ("Data", MICRO_BATCHES, True),
         ("ZeRO2", 1, False), ("ZeRO2", MICRO_BATCHES, False), ("ZeRO2", 1, True), ("ZeRO2", MICRO_BATCHES, True),
         ("Pipeshard", MICRO_BATCHES, None)]


@pytest.mark.parametrize("name, m, combine", CASES, ids=lambda x: str(x))
def test_what_crosses_the_vms_is_what_the_cost_model_prices(name, m, combine):
    wire, compiled = wire_and_hlo(name, m, combine)
    assert {HLO_OP[c.kind] for c in wire} == {c.op for c in compiled}  # the kinds that cross
    # What the wire sends per microbatch runs inside the microbatch loop (the first microbatch,
    # which seeds the sum, before it), each transfer as large as the wire says, or unrolled
    # (Pipeshard's ticks), as many times a step as the wire says.
    per_microbatch = {(HLO_OP[c.kind], c.nbytes[0]): c.times for c in wire if c.per_microbatch}
    for (op, nbytes), times in per_microbatch.items():
        ran = [c for c in compiled if c.op == op and hlo_bytes(c) == nbytes]
        assert ran and (any(c.in_loop for c in ran) or len(ran) == times), op
    # Everything else runs once per step: outside any loop, with the bytes of the wire, kind by
    # kind (padding to whole chunks costs a little).
    rest = [c for c in compiled if (c.op, hlo_bytes(c)) not in per_microbatch]
    assert not any(c.in_loop for c in rest)
    for op in {c.op for c in rest}:
        said = sum(sum(c.nbytes) * c.times for c in wire if HLO_OP[c.kind] == op and not c.per_microbatch)
        assert said == pytest.approx(sum(hlo_bytes(c) for c in rest if c.op == op), rel=0.02), op


def test_shard_plans_are_the_solvers():
    """The models above give the plans they are named for, so each case tests the plan it says."""
    for name, cfg in SHARD_MODELS.items():
        plan, _ = solve(cfg, HOSTS * PER_HOST, SHARD_TRAIN.batch_size / SHARD_M, SHARD_TRAIN.seq_len)
        assert f"{plan.blocks}/{plan.vocab}" == name


@pytest.mark.parametrize("combine", [False, True])
@pytest.mark.parametrize("plan", list(SHARD_MODELS))
def test_shard_sends_activations_in_every_microbatch_and_gradients_once_per_step(plan, combine):
    """Alpa's Shard: inside the microbatch loop only what one microbatch's activations need (the
    first microbatch, which seeds the sum, runs before the loop), the gradients after it. XLA may
    combine collectives of one kind, so bytes are compared kind by kind."""
    wire, compiled = wire_and_hlo(ALPA_SHARD, SHARD_M, combine, SHARD_MODELS[plan], SHARD_TRAIN)
    assert {HLO_OP[c.kind] for c in wire} == {c.op for c in compiled}
    one_microbatch, per_step = {}, {}
    for c in wire:
        op = HLO_OP[c.kind]
        if c.per_microbatch:
            one_microbatch[op] = one_microbatch.get(op, 0) + c.nbytes[0] * c.times / SHARD_M
        else:
            per_step[op] = per_step.get(op, 0) + sum(c.nbytes) * c.times
    looped = [c for c in compiled if c.in_loop]
    assert {c.op for c in looped} == set(one_microbatch)
    for op in {c.op for c in compiled}:
        inside = sum(hlo_bytes(c) for c in looped if c.op == op)
        outside = sum(hlo_bytes(c) for c in compiled if c.op == op and not c.in_loop)
        assert inside <= one_microbatch.get(op, 0) * 1.02, op  # no gradient inside the loop
        assert per_step.get(op, 0) * 0.98 <= outside <= (per_step.get(op, 0) + one_microbatch.get(op, 0)) * 1.02, op


@pytest.mark.parametrize("name", ["Data", "ZeRO2"])
def test_combined_gradients_cross_in_as_many_collectives_as_the_wire_has_buckets(name):
    wire, compiled = wire_and_hlo(name, MICRO_BATCHES, combine=True)
    for kind in {c.kind for c in wire}:
        buckets = sum(len(c.nbytes) * c.times for c in wire if c.kind == kind and c.nbytes != (SCALAR,))
        assert buckets == len([c for c in compiled if c.op == HLO_OP[kind] and c.elements > 2]), kind
