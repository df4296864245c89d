"""Each technique's wire, as its cost tells predict, against the step it compiles: what crosses the
VMs, of which kind, once per step or inside the microbatch loop, and how many bytes. A technique
whose program and cost model drift apart fails here, before any trial or prediction is wrong."""
import pytest

from harness.analysis import costmodel, hlo
from harness.analysis.netmodel import Network
from harness.core import model
from harness.techniques import ClusterShape, technique
from harness.techniques.contract import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, RING_PASS, SCALAR, SEND, Step
from tests_cpu.techniques_setup import MICRO_BATCHES, MODEL, TRAIN

pytestmark = pytest.mark.slow  # compiles every technique's step to read its HLO

HOSTS, PER_HOST = 2, 2
HLO_OP = {ALL_REDUCE: "all-reduce", REDUCE_SCATTER: "reduce-scatter", ALL_GATHER: "all-gather",
          SEND: "collective-permute", RING_PASS: "collective-permute"}


def wire_and_hlo(name: str, m: int, combine: bool | None = None):
    options = {} if combine is None else {"combine": combine}
    plan = technique(name, micro_batches=m, **options).build(MODEL, ClusterShape(HOSTS, PER_HOST), TRAIN, TRAIN.steps)
    _, abstract = model.abstract_init(MODEL)
    compiled = [c for c in hlo.of(plan, *plan.abstract_args(abstract, TRAIN.batch_size, TRAIN.seq_len))
                if c.crosses_hosts(PER_HOST)]
    step = Step(MODEL, Network(per_tensor=not combine), costmodel.Devices((1e12,) * HOSTS, (1e15,) * HOSTS, PER_HOST),
                HOSTS, PER_HOST, rtt=0.02, seq=TRAIN.seq_len, batch=TRAIN.batch_size, m=m, value=4, remat=False)
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
    # What the wire sends per microbatch runs inside the microbatch loop, each transfer as large as
    # the wire says, or unrolled (Pipeshard's ticks), as many times a step as the wire says.
    per_microbatch = {(HLO_OP[c.kind], c.nbytes[0]): c.times for c in wire if c.per_microbatch}
    for (op, nbytes), times in per_microbatch.items():
        ran = [c for c in compiled if c.op == op and hlo_bytes(c) == nbytes]
        assert ran and (all(c.in_loop for c in ran) or (not any(c.in_loop for c in ran) and len(ran) == times)), op
    # Everything else runs once per step: outside any loop, with the bytes of the wire, kind by
    # kind (padding to whole chunks costs a little).
    rest = [c for c in compiled if (c.op, hlo_bytes(c)) not in per_microbatch]
    assert not any(c.in_loop for c in rest)
    for op in {c.op for c in rest}:
        said = sum(sum(c.nbytes) * c.times for c in wire if HLO_OP[c.kind] == op and not c.per_microbatch)
        assert said == pytest.approx(sum(hlo_bytes(c) for c in rest if c.op == op), rel=0.02), op


@pytest.mark.parametrize("name", ["Data", "ZeRO2"])
def test_combined_gradients_cross_in_as_many_collectives_as_the_wire_has_buckets(name):
    wire, compiled = wire_and_hlo(name, MICRO_BATCHES, combine=True)
    for kind in {c.kind for c in wire}:
        buckets = sum(len(c.nbytes) * c.times for c in wire if c.kind == kind and c.nbytes != (SCALAR,))
        assert buckets == len([c for c in compiled if c.op == HLO_OP[kind] and c.elements > 2]), kind
