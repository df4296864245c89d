"""`python -m harness predict`: every technique on a slice, predicted in closed form (harness.analysis.costmodel)."""
import argparse
import dataclasses
import sys

from harness import inputs
from harness.analysis import costmodel, measured_link
from harness.core import data
from harness.core.config import Setup, model_config
from harness.errors import BadInput
from harness.experiments import beyond
from harness.platform import slices
from harness.platform.hardware import ACCELERATORS

HELP = "predict step time, 20-epoch time, TFLOP/s and memory of each technique on a slice, in seconds of CPU"
CHARS_PER_TOKEN = 4.0  # GPT-2's byte-level BPE on English prose: about 4 characters per token (OpenAI's rule of thumb)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slice", default=slices.DEFAULT_SLICE, metavar="NAME|FILE",
                   help="a Table I slice or a slice file (GPU types: " + ", ".join(ACCELERATORS) + "; default: %(default)s)")
    p.add_argument("--model", default="gpt2m", metavar="NAME", help="model (default: %(default)s)")
    p.add_argument("--batch-per-gpu", type=int, default=Setup.batch_per_gpu,
                   help="sequences per GPU per step (default: %(default)s; not stated in the paper)")
    p.add_argument("--micro-batches", type=int, default=Setup.micro_batches,
                   help="microbatches per step (default: %(default)s)")
    p.add_argument("--precision", default=Setup.precision, choices=sorted(costmodel.BYTES),
                   help="compute precision (default: %(default)s)")
    p.add_argument("--remat", action="store_true",
                   help="Pipeshard recomputes its stages' activations in the backward pass (default: off, as Alpa's)")
    p.add_argument("--pipeline-schedule", default=Setup.pipeline_schedule, choices=["1f1b", "gpipe"],
                   help="Pipeshard's schedule, which sets the microbatches a stage keeps in memory "
                        "(default: %(default)s, Alpa's); both pay the same bubble")
    p.add_argument("--epochs", type=int, default=20, help="epochs to time (default: %(default)s)")
    p.add_argument("--tokens", type=float, default=None, metavar="N",
                   help="tokens in one epoch of the dataset (default: the embedded corpus, counted as "
                        f"characters / {CHARS_PER_TOKEN:g})")
    p.add_argument("--link", default=None, metavar="FILE.json",
                   help="a measured link (`python -m harness emulate --json`, or the same shape from a live slice): "
                        "its RTT replaces the slice's and one flow's measured rate sets the TCP window")
    p.add_argument("--beyond-run", default=None, metavar="DIR",
                   help="a run folder of `reproduce --beyond`: DiLoCo, beyond the paper, joins as a candidate at that "
                        "run's steps between syncs, its epochs' time scaled by the tokens it took to the target against "
                        "Data's there (default: DiLoCo at its own 500 steps between syncs, the time it takes to learn "
                        "as much as Data's epochs not predicted)")
    p.add_argument("--efficiency", type=float, default=costmodel.COMPUTE_EFFICIENCY,
                   help="fraction of a GPU's peak a training step sustains (default: %(default)s)")


def run(args) -> tuple[int, dict]:
    sl = slices.load(args.slice)
    cfg = model_config(args.model)
    for name in ("batch_per_gpu", "micro_batches", "epochs"):
        if getattr(args, name) < 1:
            raise BadInput(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if not 0 < args.efficiency <= 1:
        raise BadInput(f"--efficiency must be in (0, 1], got {args.efficiency}")
    if args.tokens is not None:
        inputs.positive("--tokens", args.tokens)
    if (args.batch_per_gpu * sl.gpus_per_vm) % args.micro_batches:
        raise BadInput(f"--micro-batches {args.micro_batches} must divide one VM's batch "
                       f"({args.batch_per_gpu} x {sl.gpus_per_vm} GPUs)")
    link = measured_link.load(args.link) if args.link else None
    factor = beyond.measured_factor(args.beyond_run) if args.beyond_run else None
    tokens = args.tokens if args.tokens is not None else corpus_tokens()
    net = costmodel.network_for(sl)
    if link:
        sl, net = sl.with_rtt(link.rtt_ms), net.calibrated(link.rtt_ms, link.flow_bytes_per_s)
    setup = Setup(args.batch_per_gpu, args.micro_batches, args.precision, remat=args.remat,
                  pipeline_schedule=args.pipeline_schedule)
    predictions, cannot = costmodel.predict_slice(
        sl, cfg, setup, net=net, devices_for=lambda vms: costmodel.Devices.of(sl, vms, args.precision, args.efficiency),
        epochs=args.epochs, dataset_tokens=tokens)
    result = {"slice": sl.name, "model": cfg.name,
              "setup": dataclasses.asdict(setup) | {"epochs": args.epochs, "dataset_tokens": tokens,
                                                    "efficiency": args.efficiency},
              "rtt_ms": sl.rtt_ms,
              "network": {"link_bytes_per_s": net.link_bytes_per_s, "window_bytes": net.window_bytes,
                          "flows_per_peer": net.flows_per_peer,
                          "measured": link.to_dict() if link else None},
              "predictions": [p.to_dict() for p in predictions], "cannot_run": cannot,
              "beyond_paper": diloco(sl, cfg, setup, net, args, tokens, factor)}
    if not args.json:
        print(summary(result))
    return 0, result


def diloco(sl, cfg, setup, net, args, tokens: float, factor: dict | None) -> list[dict]:
    """DiLoCo on every placement of more than one VM, marked as beyond the paper: its step from its
    wire (the pseudo-gradient's all-reduce once every H steps); with a sweep's measured factor, H is
    that sweep's and its epochs' time is the time to learn what Data learns in them."""
    out = []
    for vms in costmodel.placements(sl):
        if len(vms) < 2:
            continue  # on one VM DiLoCo is Data
        p = costmodel.predict("DiLoCo", sl, vms, cfg, setup, net=net,
                              devices=costmodel.Devices.of(sl, vms, args.precision, args.efficiency),
                              epochs=args.epochs, dataset_tokens=tokens,
                              options=beyond.trained_options(factor) if factor else None).to_dict()
        p["epochs_s"] = p["epochs_s"] * factor["factor"] if factor and p["epochs_s"] else None
        out.append({**p, "beyond_paper": True, "tokens_to_target": factor})
    return out


def corpus_tokens() -> float:
    print("predict: counting the embedded corpus ...", file=sys.stderr, flush=True)
    return sum(len(t) for t in data.load_corpus().texts) / CHARS_PER_TOKEN


def _network_line(n: dict) -> str:
    m = n["measured"]
    where = (f"measured {m['a']}-{m['b']}: {m['rtt_ms']:g} ms, one flow {m['flow_bytes_per_s'] / 1e6:.1f} MB/s "
             f"({m['source']})") if m else "stock settings (harness/analysis/netmodel.py)"
    return (f"network: link {n['link_bytes_per_s'] * 8 / 1e9:.3g} Gbit/s, TCP window {n['window_bytes'] / 2**20:.2f} MiB x "
            f"{n['flows_per_peer']} flow(s) per peer; {where}")


def summary(result: dict) -> str:
    s = result["setup"]
    lines = [f"{result['model']} on {result['slice']} (RTT {result['rtt_ms']} ms), {s['batch_per_gpu']} sequences per GPU, "
             f"{s['micro_batches']} microbatches, {s['precision']}, {s['epochs']} epochs of {s['dataset_tokens']:.3g} tokens",
             _network_line(result["network"]),
             f"{'technique':9} {'VMs':9} {'step s':>7} {'compute':>8} {'collect.':>8} {'bubble':>7} {'transf.':>7} "
             f"{'epochs h':>9} {'TFLOP/s':>7} {'GB/GPU':>7}"]
    for p in result["predictions"]:
        t = p["terms_s"]
        hours = f"{p['epochs_s'] / 3600:9.2f}" if p["epochs_s"] else f"{'':9}"
        lines.append(f"{p['technique']:9} {'+'.join(p['vms']):9} {p['step_s']:7.3g} {t['compute']:8.3g} "
                     f"{t['collectives']:8.3g} {t['pipeline_bubble']:7.3g} {t['pipeline_transfers']:7.3g} {hours} "
                     f"{p['tflops_per_gpu']:7.3g} {p['memory_gb']:6.1f}{'' if p['fits'] else ' x (out of memory)'}")
    lines += [f"{c['technique']:9} {'+'.join(c['vms']):9} cannot run: {c['reason']}" for c in result["cannot_run"]]
    for p in result["beyond_paper"]:
        f = p["tokens_to_target"]
        time = (f"{p['epochs_s'] / 3600:.2f} h to learn what Data learns in {s['epochs']} epochs (x{f['factor']:.3g} its "
                f"tokens, measured on {f['model']} with {beyond.trained_said(f)})") if f else \
            "the time to learn as much as Data not predicted: its tokens against Data's are measured by reproduce --beyond"
        lines.append(f"beyond the paper: {p['technique']} on {'+'.join(p['vms'])}: {p['step_s']:.3g} s a step "
                     f"({p['notes'][0] if p['notes'] else ''}); {time}")
    return "\n".join(lines)
