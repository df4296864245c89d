"""`python -m harness memory`: which technique fits which slice at paper scale, compile-only."""
import argparse
import contextlib
import dataclasses
import sys

from harness import inputs
from harness.analysis import gpu_compiler, memory
from harness.analysis.memory import analyse, source
from harness.core.config import Setup, Technique, TrainConfig, model_config
from harness.errors import BadInput
from harness.experiments import infer
from harness.platform import slices
from harness.runs import records
from harness.techniques import TECHNIQUES

HELP = "per-GPU memory of each technique at paper scale (compile-only XLA analysis) and where it runs out"
PAPER_MODELS = ("gpt2m", "gpt2l", "gpt2L")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="NAME",
                   help=f"{', '.join(PAPER_MODELS)}, any model config, or 'all' for the paper's three "
                        "(default: gpt2m; with --infer, all)")
    p.add_argument("--slice", default=None, metavar="NAME|FILE", action="append",
                   help=f"a Table I slice ({', '.join(slices.TABLE_I_ORDER)}) or a slice file, repeatable; "
                        "default: all of Table I")
    p.add_argument("--gpus", default="both", choices=["all", "one-vm", "both", "4", "2"],
                   help="all: every GPU of every VM; one-vm: the GPUs of one VM at a time; both (default). "
                        "4 and 2 are the paper's names for them, on its slices of two 2-GPU VMs")
    # The command's defaults are Alpa's example (TrainConfig's batch per GPU, activations kept, Shard
    # planned with this slice's links and memory); the memory claims use config.Setup's.
    p.add_argument("--batch-per-gpu", type=int, default=TrainConfig.batch_size,
                   help="sequences per GPU per step (default: %(default)s; not stated in the paper)")
    p.add_argument("--micro-batches", type=int, default=Setup.micro_batches,
                   help="microbatches per step (default: %(default)s; not stated in the paper)")
    p.add_argument("--precision", default=Setup.precision, choices=["float32", "float16", "bfloat16"],
                   help="compute precision; parameters and optimizer state stay float32 (default: %(default)s)")
    p.add_argument("--remat", action="store_true",
                   help="Pipeshard recomputes each stage's forward in the backward pass instead of keeping activations")
    p.add_argument("--techniques", nargs="+", default=list(TECHNIQUES), choices=list(TECHNIQUES), metavar="NAME",
                   help=f"techniques to analyse (default: all of {', '.join(TECHNIQUES)})")
    p.add_argument("--pipeline-schedule", default=Setup.pipeline_schedule, choices=["1f1b", "gpipe"],
                   help="Pipeshard's schedule, which sets the microbatches a stage keeps in flight "
                        "(default: %(default)s, Alpa's)")
    p.add_argument("--compiler", default="auto", choices=[*gpu_compiler.COMPILERS, "both"],
                   help="cpu: XLA's CPU compiler; gpu: XLA's GPU compiler for each slice's own GPUs, no GPU needed "
                        "(JAX's CUDA plugin: python -m harness.analysis.gpu_compiler install); both: the two side by side; "
                        "auto (default): gpu on a machine with a GPU, cpu elsewhere")
    p.add_argument("--out", default=None, metavar="FILE.jsonl", help="append the trial records to this file")
    p.add_argument("--infer", action="store_true",
                   help="infer the paper's unstated setup: analyse every setup of a plausible space (batch per "
                        "GPU x microbatches x precision x Pipeshard remat; narrow it with --batches, --micro, "
                        "--precisions) on the chosen slices, show which of the paper's observed runs each "
                        "reproduces, and judge C4's parts at every setup and at the setups inferred without them")
    p.add_argument("--batches", default=",".join(map(str, infer.BATCHES)), metavar="LIST",
                   help="--infer: sequences per GPU to try (default: %(default)s)")
    p.add_argument("--micro", default=",".join(map(str, infer.MICRO_BATCHES)), metavar="LIST",
                   help="--infer: microbatches to try (default: %(default)s)")
    p.add_argument("--precisions", default=",".join(infer.PRECISIONS), metavar="LIST",
                   help="--infer: precisions to try (default: %(default)s)")


def _ints(option: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise BadInput(f"{option} must be a comma-separated list of positive integers, got {text!r}")
    return values


def run(args) -> tuple[int, dict]:
    model = args.model or ("all" if args.infer else "gpt2m")
    models = [model_config(m) for m in (PAPER_MODELS if model == "all" else [model])]
    chosen = slices.table_i() if not args.slice or args.slice == ["all"] else [slices.load(s) for s in args.slice]
    assumptions = Setup(args.batch_per_gpu, args.micro_batches, args.precision, remat=args.remat, alpa_shard=False,
                        pipeline_schedule=args.pipeline_schedule)
    for name, value in (("--batch-per-gpu", args.batch_per_gpu), ("--micro-batches", args.micro_batches)):
        if value < 1:
            raise BadInput(f"{name} must be positive, got {value}")
    if args.infer:
        precisions = tuple(p.strip() for p in args.precisions.split(",") if p.strip())
        if not precisions or set(precisions) - {"float32", "float16", "bfloat16"}:
            raise BadInput(f"--precisions must list float32, float16 or bfloat16, got {args.precisions!r}")
        setups = infer.space(_ints("--batches", args.batches), _ints("--micro", args.micro), precisions,
                             schedule=args.pipeline_schedule)
        if not setups:
            raise BadInput("--batches and --micro leave no setup: microbatches must divide the sequences per GPU")
    gpu_counts = {"one-vm": ["per_vm"], "2": ["per_vm"], "all": ["all"], "4": ["all"], "both": ["all", "per_vm"]}[args.gpus]
    if args.out:
        inputs.appendable_file("--out", args.out)

    memory.provide_cpu_devices(chosen)  # before anything touches the backend

    if args.compiler == "both":
        if args.infer:
            raise BadInput("--infer takes one --compiler: cpu, gpu or auto")
        return _both(models, chosen, gpu_counts, assumptions, args)
    compiler = gpu_compiler.choose(args.compiler)
    with compiler or contextlib.nullcontext():
        if args.infer:
            return _infer(setups, models, chosen, args, compiler)
        out = _analyse_all(models, chosen, gpu_counts, assumptions, args.techniques, compiler)
    if args.out:
        for r in out:
            records.append(args.out, r)
    if not args.json:
        print_table(out, assumptions, source(compiler))
    return 0, {"assumptions": dataclasses.asdict(assumptions), "source": source(compiler), "records": out}


def _both(models, chosen, gpu_counts, a: Setup, args) -> tuple[int, dict]:
    """The CPU and the GPU compiler side by side, technique by technique."""
    with gpu_compiler.choose("gpu") as compiler:  # the plugin is checked before any compiling
        on_cpu = _analyse_all(models, chosen, gpu_counts, a, args.techniques, None, prefix="[cpu] ")
        on_gpu = _analyse_all(models, chosen, gpu_counts, a, args.techniques, compiler, prefix="[gpu] ")
    key = lambda r: (r["model"]["name"], r["cluster"]["slice"], tuple(r["cluster"]["vms_used"]), r["technique"])
    if [key(r) for r in on_cpu] != [key(r) for r in on_gpu]:
        raise RuntimeError("the two compilers' analyses cover different runs")
    rows = []
    for c, g in zip(on_cpu, on_gpu):
        cb, gb = c["memory"]["bytes_per_device"], g["memory"]["bytes_per_device"]
        rows.append({"model": c["model"]["name"], "slice": c["cluster"]["slice"], "vms": c["cluster"]["vms_used"],
                     "technique": c["technique"], "cpu_bytes": cb, "gpu_bytes": gb,
                     "gpu_over_cpu": gb / cb if cb and gb else None,
                     "cpu_status": c["status"], "gpu_status": g["status"]})
    if args.out:
        for r in on_cpu + on_gpu:
            records.append(args.out, r)
    if not args.json:
        print(f"assumptions: {a}; bytes per GPU from XLA's CPU compiler and its GPU compiler for each VM's GPU")
        print(f"{'model':7} {'slice':10} {'VMs':9} {'technique':10} {'CPU GB':>7} {'GPU GB':>7} {'GPU/CPU':>8}  verdicts")
        for r in rows:
            ratio = f"{r['gpu_over_cpu']:8.3f}" if r["gpu_over_cpu"] else f"{'-':>8}"
            moved = "" if r["cpu_status"] == r["gpu_status"] else "  <- differ"
            print(f"{r['model']:7} {r['slice']:10} {'+'.join(r['vms']):9} {r['technique']:10} "
                  f"{(r['cpu_bytes'] or float('nan')) / 1e9:7.1f} {(r['gpu_bytes'] or float('nan')) / 1e9:7.1f} "
                  f"{ratio}  {r['cpu_status']} / {r['gpu_status']}{moved}")
    return 0, {"assumptions": dataclasses.asdict(a), "sources": [memory.SOURCE, gpu_compiler.SOURCE],
               "comparison": rows, "records": on_cpu + on_gpu}


def _analyse_all(models, chosen, gpu_counts, a: Setup, techniques, compiler, prefix: str = "") -> list[dict]:
    out = []
    for model_cfg in models:
        for sl in chosen:
            counts = {"all": sl.gpus_per_vm * len(sl.vms), "per_vm": sl.gpus_per_vm}
            for gpus in dict.fromkeys(counts[which] for which in gpu_counts):  # one VM: "all" is "per_vm"
                print(f"{prefix}{model_cfg.name} on {sl.name}, {gpus} GPU{'s' if gpus > 1 else ''} ...", file=sys.stderr, flush=True)
                out += analyse(sl, model_cfg, gpus, a, techniques, compiler)
    return out


def _infer(setups, models, chosen, args, compiler) -> tuple[int, dict]:
    results, everything = [], []
    for i, a in enumerate(setups, 1):
        # the paper's setup is inferred from the paper's four
        recs = _analyse_all(models, chosen, ["all", "per_vm"], a, list(Technique), compiler,
                            prefix=f"[{i}/{len(setups)} {infer.label(a)}] ")
        everything += recs
        results.append(infer.evaluate(a, recs, chosen))
    if args.out:
        for r in everything:
            records.append(args.out, r)
    doc = {"source": source(compiler), "slices": [sl.name for sl in chosen], **infer.summary(results)}
    if not args.json:
        print(infer.markdown(doc))
    return 0, doc


def print_table(out: list[dict], assumptions: Setup, source: str) -> None:
    print(f"assumptions: {assumptions}; bytes from {source}")
    print(f"{'model':7} {'slice':10} {'VMs':9} {'technique':10} {'GB/GPU':>7}  verdict")
    for r in out:
        need = r["memory"]["bytes_per_device"]
        verdict = "fits" if r["status"] == "ok" else f"{r['status'].upper()}: {r['reason']}"
        print(f"{r['model']['name']:7} {r['cluster']['slice']:10} {'+'.join(r['cluster']['vms_used']):9} "
              f"{r['technique']:10} {need / 1e9 if need else float('nan'):7.1f}  {verdict}")
