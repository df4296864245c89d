"""The model, its data and single-device training: what every technique trains, knowing nothing of parallelism.

config.py     the models, a trial's budget and training settings, as dataclasses; the techniques' names
model.py      GPT-2 in Flax NNX
data.py       corpus -> tokens -> blocks -> batches, deterministic in (seed, epoch, step)
tokenizer.py  GPT-2's BPE files where the user has them, else a byte-level BPE trained on the corpus
optim.py      the optimizer of the paper's most likely setup (Alpa's run_clm_flax)
train.py      the single-device trainer: the reference every technique's losses are checked against
flops.py      parameter counts and per-step FLOPs, in closed form
"""
