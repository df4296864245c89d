"""`python -m harness memory`: which technique fits which slice at paper scale, compile-only."""
import argparse
import dataclasses
import sys

from harness import records, slices
from harness.config import model_config
from harness.errors import BadInput
from harness.config import Setup
from harness.memory import SOURCE, analyse
from harness.techniques import TECHNIQUES

HELP = "per-GPU memory of each technique at paper scale (compile-only XLA analysis) and where it runs out"
PAPER_MODELS = ("gpt2m", "gpt2l", "gpt2L")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="gpt2m", metavar="NAME",
                   help=f"{', '.join(PAPER_MODELS)}, any model config, or 'all' for the paper's three (default: gpt2m)")
    p.add_argument("--slice", default="all", metavar="NAME|FILE",
                   help=f"a Table I slice ({', '.join(slices.TABLE_I_ORDER)}), a slice file, or 'all' (default)")
    p.add_argument("--gpus", default="both", choices=["2", "4", "both"],
                   help="4: all GPUs of both VMs; 2: one VM at a time; both (default)")
    # The command's defaults are Alpa's example (8 sequences per GPU, activations kept, Shard
    # planned with this slice's links and memory); the memory claims use config.Setup's.
    p.add_argument("--batch-per-gpu", type=int, default=8,
                   help="sequences per GPU per step (default: %(default)s; not stated in the paper)")
    p.add_argument("--micro-batches", type=int, default=Setup.micro_batches,
                   help="microbatches per step (default: %(default)s; not stated in the paper)")
    p.add_argument("--precision", default=Setup.precision, choices=["float32", "float16", "bfloat16"],
                   help="compute precision; parameters and optimizer state stay float32 (default: %(default)s)")
    p.add_argument("--remat", action="store_true",
                   help="Pipeshard recomputes each stage's forward in the backward pass instead of keeping activations")
    p.add_argument("--techniques", nargs="+", default=list(TECHNIQUES), choices=list(TECHNIQUES), metavar="NAME",
                   help=f"techniques to analyse (default: all of {', '.join(TECHNIQUES)})")
    p.add_argument("--out", default=None, metavar="FILE.jsonl", help="append the trial records to this file")


def run(args) -> tuple[int, dict]:
    models = [model_config(m) for m in (PAPER_MODELS if args.model == "all" else [args.model])]
    chosen = slices.table_i() if args.slice == "all" else [slices.load(args.slice)]
    assumptions = Setup(args.batch_per_gpu, args.micro_batches, args.precision, remat=args.remat, alpa_shard=False)
    for name, value in (("--batch-per-gpu", args.batch_per_gpu), ("--micro-batches", args.micro_batches)):
        if value < 1:
            raise BadInput(f"{name} must be positive, got {value}")
    gpu_counts = {"2": ["per_vm"], "4": ["all"], "both": ["all", "per_vm"]}[args.gpus]

    import jax  # the mesh of the largest slice must exist before anything touches the backend

    jax.config.update("jax_num_cpu_devices", max(len(s.vms) * s.gpus_per_vm for s in chosen))

    out, cache = [], {}
    for model_cfg in models:
        for sl in chosen:
            for which in gpu_counts:
                gpus = sl.gpus_per_vm * (len(sl.vms) if which == "all" else 1)
                print(f"{model_cfg.name} on {sl.name}, {gpus} GPUs ...", file=sys.stderr, flush=True)
                out += analyse(sl, model_cfg, gpus, assumptions, args.techniques, cache)
    if args.out:
        for r in out:
            records.append(args.out, r)
    if not args.json:
        print_table(out, assumptions)
    return 0, {"assumptions": dataclasses.asdict(assumptions), "source": SOURCE, "records": out}


def print_table(out: list[dict], assumptions: Setup) -> None:
    print(f"assumptions: {assumptions}; bytes from {SOURCE}")
    print(f"{'model':7} {'slice':10} {'VMs':9} {'technique':10} {'GB/GPU':>7}  verdict")
    for r in out:
        need = r["memory"]["bytes_per_device"]
        verdict = "fits" if r["status"] == "ok" else f"{r['status'].upper()}: {r['reason']}"
        print(f"{r['model']['name']:7} {r['cluster']['slice']:10} {'+'.join(r['cluster']['vms_used']):9} "
              f"{r['technique']:10} {need / 1e9 if need else float('nan'):7.1f}  {verdict}")
