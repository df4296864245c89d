"""`python -m harness train`: train a model on one device and print its trial record."""
import argparse
import dataclasses
import sys

import jax

from harness import inputs
from harness.core import data, train
from harness.core.config import MODELS, PRECISIONS, Budget, TrainConfig, compute_dtype, model_config
from harness.progress import Progress
from harness.runs import records

HELP = "train a model on one device (the single-device reference) and print its trial record"
DEFAULT_MODEL = Budget.model  # what the trials train, so that a first `train` shows the same model
DEFAULT_STEPS = 100


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME",
                   help=f"model config: {', '.join(MODELS)} (default: {DEFAULT_MODEL}, a CPU scale model)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=int, default=None, help=f"training steps (default: {DEFAULT_STEPS})")
    budget.add_argument("--epochs", type=float, default=None, help="passes over the packed corpus instead of --steps")
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size,
                   help="sequences per step (default: %(default)s, Alpa's example per GPU)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the model's positions)")
    p.add_argument("--seed", type=int, default=0, help="seed of initialisation, data order and dropout (default: 0)")
    p.add_argument("--lr", type=float, default=TrainConfig.learning_rate, help="peak learning rate (default: %(default)s)")
    p.add_argument("--corpus", default=None, metavar="PATH|HUB_ID",
                   help="corpus in the Wikipedia schema: a local dataset directory or .parquet/.jsonl/.csv file, "
                        f"or a hub id like {data.PAPER_CORPUS} (default: the fixture corpus)")
    p.add_argument("--corpus-config", default=None, metavar="NAME",
                   help=f"dataset config, e.g. {data.PAPER_CONFIG} for the paper's corpus")
    p.add_argument("--tokenizer", default=None, metavar="DIR",
                   help="directory with GPT-2's vocab.json and merges.txt (default: a BPE trained on the corpus)")
    p.add_argument("--precision", default="float32", choices=PRECISIONS,
                   help="float32: XLA's default, float32 matmuls as TF32 on GPUs that have it (Ampere, Hopper); "
                        "float32-full: full float32 matmuls, as the paper's T4 and RTX 6000 (no TF32) ran; "
                        "bfloat16, float16: compute in 16 bits, parameters and optimizer state in float32 "
                        "(default: %(default)s). MFU uses the peak of the arithmetic that ran, recorded as "
                        "throughput.peak_arithmetic")
    p.add_argument("--remat", action="store_true",
                   help="recompute each block's forward in the backward pass: about a third more arithmetic, "
                        "the activations of one block kept instead of all (a larger batch fits)")
    p.add_argument("--scan-unroll", type=int, default=1, metavar="N",
                   help="blocks per iteration of the loop over the layers; the model's layer count writes them all out, "
                        "which took 28%% off gpt2m's step on an H200 for a longer compile (docs/gpu.md; default: %(default)s)")
    p.add_argument("--vocab-multiple", type=int, default=1, metavar="N",
                   help="pad the vocabulary to a multiple of N (64: GPT-2's 50257 to 50304), the padding dropped before "
                        "the loss (default: %(default)s, as the paper ran)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="device peak TFLOP/s for MFU (default: known GPUs only; unset on CPU)")
    p.add_argument("--out", default=None, metavar="FILE.jsonl", help="append the trial record to this file")


def run(args) -> tuple[int, dict]:
    # Everything a user can get wrong is checked here, before any tokenizing or compiling.
    model_cfg = dataclasses.replace(model_config(args.model), dtype=compute_dtype(args.precision),
                                    remat=args.remat, scan_unroll=args.scan_unroll, vocab_multiple=args.vocab_multiple)
    if args.precision == "float32-full":
        jax.config.update("jax_default_matmul_precision", "highest")
    cfg = TrainConfig(batch_size=args.batch_size, seq_len=args.seq_len, seed=args.seed,
                      learning_rate=args.lr, steps=args.steps, epochs=args.epochs)
    if cfg.steps is None and cfg.epochs is None:
        cfg = dataclasses.replace(cfg, steps=DEFAULT_STEPS)
    if args.peak_tflops is not None:
        inputs.positive("--peak-tflops", args.peak_tflops)
    if args.out:
        inputs.appendable_file("--out", args.out)
    seq_len = cfg.resolved_seq_len(model_cfg)
    corpus = data.load_corpus(args.corpus, args.corpus_config)
    packed = data.prepare(model_cfg.vocab_size, seq_len, cfg.batch_size, corpus, args.tokenizer)

    print(f"training {model_cfg.name} on {corpus.description}: {len(packed.blocks)} blocks of {seq_len} tokens, "
          f"tokenizer {packed.tokenizer.description} ({packed.tokenizer.vocab_size} tokens)", file=sys.stderr)
    run_ = train.TrainRun(train.total_steps(cfg, packed))
    progress = Progress(run_.total_steps, "step")
    status, reason = "ok", None
    try:
        train.train(model_cfg, cfg, packed, run_,
                    on_step=lambda step, loss, s: progress.update(step + 1, loss=loss, s_per_step=s))
    except (Exception, KeyboardInterrupt) as exc:  # recorded as a failed trial, never lost
        status, reason = records.failure(exc)
    finally:
        progress.close()
    record = records.build(model_cfg, cfg, packed, run_, status=status, reason=reason, peak=args.peak_tflops)
    if args.out:
        records.append(args.out, record)
    if not args.json:
        print_summary(record)
    status, reason = record["status"], record["reason"]  # a run that diverged is recorded as an error
    return (0 if status == "ok" else 130 if reason == "interrupted by the user" else 1), record


def print_summary(r: dict) -> None:
    t, th = r["timing"], r["throughput"]
    lines = [
        f"status        {r['status']}" + (f" ({r['reason']})" if r["reason"] else ""),
        f"model         {r['model']['name']} ({r['model']['params']:,} parameters)",
        f"steps         {r['steps']} x {r['batch']['global_batch']} x {r['batch']['seq_len']} tokens",
    ]
    if r["losses"]:
        shown = lambda loss: "not a number" if loss is None else f"{loss:.4f}"
        lines.append(f"loss          {shown(r['losses'][0])} -> {shown(r['losses'][-1])}")
    if t["median_step_s"]:
        lines += [f"compile       {t['compile_s']:.2f} s",
                  f"step time     {t['median_step_s'] * 1e3:.1f} ms (median, first {t['excluded_warmup_steps']} excluded)",
                  f"epoch time    {t['epoch_time_s']:.1f} s (estimated)",
                  f"TFLOP/s       {th['tflops_alpa']:.4f} per device (Alpa's formula)",
                  "MFU           " + (f"{th['mfu']:.2%} (6N+12LHS rule, over the {th.get('peak_arithmetic')} peak "
                                       f"{th['peak_tflops']:g} TFLOP/s)" if th["mfu"]
                                       else "n/a (no known peak for this device)")]
    print("\n".join(lines))
