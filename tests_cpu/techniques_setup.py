"""The conformance setup shared by the technique tests: a 4-layer model small enough to compile fast."""
import dataclasses

from harness.core.config import GPTConfig, TrainConfig

MODEL = GPTConfig("conformance", n_layer=4, n_head=4, n_embd=32, vocab_size=512, n_positions=32)
UNTIED = dataclasses.replace(MODEL, tie_embeddings=False)
TRAIN = TrainConfig(steps=5, batch_size=8, seq_len=32, seed=0)
MICRO_BATCHES = 2
RTOL = 1e-4  # techniques against the single-device reference
# In one process; 2x2 across two processes (through Ray, on the emulated link) is checked for every
# technique by test_claims.py's trials, and the local two-process launcher by test_techniques.py.
SHAPES = [(1, 4), (4, 1)]
