"""The conformance setup shared by the technique tests (test_techniques.py, test_diloco.py): a
4-layer model small enough to compile fast, and the two ways those tests look at a technique: its
steps, taken one at a time, and the collectives of its compiled step."""
import dataclasses

from harness.analysis import hlo
from harness.core import model, train
from harness.core.config import GPTConfig, TrainConfig
from harness.techniques import ClusterShape, technique

MODEL = GPTConfig("conformance", n_layer=4, n_head=4, n_embd=32, vocab_size=512, n_positions=32)
UNTIED = dataclasses.replace(MODEL, tie_embeddings=False)
TRAIN = TrainConfig(steps=5, batch_size=8, seq_len=32, seed=0)
MICRO_BATCHES = 2
RTOL = 1e-4  # techniques against the single-device reference
# In one process; 2x2 across two processes (through Ray, on the emulated link) is checked for every
# technique by test_claims.py's trials, and the local two-process launcher by test_techniques.py.
SHAPES = [(1, 4), (4, 1)]


def stepper(name, cfg, shape, packed, train_cfg=TRAIN, **options) -> train.Stepper:
    """A technique's steps on `packed`, taken as the test advances them."""
    plan = technique(name, micro_batches=MICRO_BATCHES, **options).build(cfg, ClusterShape(*shape), train_cfg,
                                                                         train_cfg.steps)
    return train.plan_stepper(plan, cfg, train_cfg, packed, train.TrainRun(train_cfg.steps))


def collectives_of(name, cfg=MODEL, shape=(2, 2), micro_batches=1, text=False, **options):
    """The collectives of a technique's compiled step, its devices per VM (and, with text, the HLO).
    Read from the HLO of a 2 x 2 cluster by default: device i is on VM i // 2."""
    plan = technique(name, micro_batches=micro_batches, **options).build(cfg, ClusterShape(*shape), TRAIN, TRAIN.steps)
    _, abstract = model.abstract_init(cfg)
    compiled = plan.step.lower(*plan.abstract_args(abstract, TRAIN.batch_size, TRAIN.seq_len)).compile(hlo.COMPILE_ONLY)
    found = hlo.collectives(compiled.as_text(), plan.mesh.devices.size)
    return (found, shape[1], compiled.as_text()) if text else (found, shape[1])
