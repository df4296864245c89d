"""`python -m harness select`: the paper's Algorithm 1 on a slice, decided from real trials.

The slice is emulated on this machine (its VMs as network namespaces behind the delay link, one
Ray node each), and each configuration the algorithm asks for is trained and timed through the
harness, exactly as the claims' trials are. Both modes of harness.paper.selection share the trials: a
configuration is run once even when both ask for it. Every trial goes to <out>/results.jsonl as
it finishes; the decisions, with the table and the rule that fired, go to <out>/selection.json.
"""
import argparse
import datetime
import json
import math

from harness import inputs
from harness.backends import ray_clusters
from harness.backends.emulation import compute, netns
from harness.core import data
from harness.core.config import Budget, TrainConfig, model_config
from harness.errors import BadInput
from harness.experiments import beyond, measured_selection
from harness.paper import selection
from harness.platform import slices
from harness.runs import trials
from harness.runs.noise import MIN_TIMED_STEPS

HELP = "pick the technique and VMs for a slice by the paper's Algorithm 1, from real trials"
INTERRUPTED = 130


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slice", default=slices.DEFAULT_SLICE, metavar="NAME|FILE",
                   help="a Table I slice or a slice file, emulated here (default: %(default)s)")
    p.add_argument("--model", default=Budget.model, metavar="NAME",
                   help="model the trials train (default: %(default)s, the CPU scale model)")
    p.add_argument("--delta", type=float, default=0.1, help="threshold in (0, 1] (default: %(default)s)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=int, default=Budget.repeats, metavar="N",
                        help=f"timed steps per trial, at least {MIN_TIMED_STEPS} (default: %(default)s)")
    budget.add_argument("--eps", type=float, default=None, metavar="EPOCHS",
                        help="time this many epochs of the corpus per trial instead (counted at the batch of all "
                             f"VMs; at least {MIN_TIMED_STEPS} steps)")
    p.add_argument("--mode", default="both", choices=[*selection.MODES, "both"],
                   help="published: Algorithm 1 as printed; corrected: by time to train (docs/selection-and-costmodel.md); "
                        "both (default): each, from one set of trials")
    p.add_argument("--planner", action="store_true",
                   help="skip single-VM runs that the cost model (harness.analysis.costmodel) says cannot change the decision")
    p.add_argument("--margin", type=float, default=0.3,
                   help="planner: how far (factor 1 + margin) a prediction may be off (default: %(default)s)")
    p.add_argument("--beyond-run", default=None, metavar="DIR",
                   help="a run folder of `reproduce --beyond`: after the paper's decision, DiLoCo on all VMs is trained "
                        "too, at that run's steps between syncs, and set against each decision by the time to learn as "
                        "much (its seconds per token times the tokens it took to the target over Data's there); marked "
                        "beyond the paper, it never changes the decision (default: the paper's candidates only)")
    p.add_argument("--out", default="reports", metavar="DIR",
                   help="parent of the run folder (default: reports/ of the current directory)")


def steps_for(args, sl: slices.Slice) -> int:
    if args.eps is None:
        return args.steps

    cfg = model_config(args.model)
    batch = Budget(model=args.model).batch_per_gpu * sl.gpus_per_vm * len(sl.vms)
    packed = data.prepare(cfg.vocab_size, TrainConfig(batch_size=batch).resolved_seq_len(cfg), batch, data.load_corpus())
    return max(MIN_TIMED_STEPS, math.ceil(args.eps * packed.steps_per_epoch(batch)))


def run(args) -> tuple[int, dict]:
    sl = slices.across_vms(slices.load(args.slice), "Algorithm 1 chooses between all VMs and one of them")
    model_config(args.model)
    if args.eps is None and args.steps < MIN_TIMED_STEPS:
        raise BadInput(f"--steps must be at least {MIN_TIMED_STEPS} for timed comparisons (a robust spread of the step "
                       f"times), got {args.steps}")
    if args.eps is not None:
        inputs.positive("--eps", args.eps)
    modes = list(selection.MODES) if args.mode == "both" else [args.mode]
    names = [vm.name for vm in sl.vms]
    for mode in modes:  # --delta, --margin and the VMs are checked before anything starts
        selection.select(mode, names, lambda t, v: 1.0, args.delta, margin=args.margin)

    factor = beyond.measured_factor(args.beyond_run) if args.beyond_run else None

    problem = netns.missing_privileges() or (compute.missing() if compute.limited(compute.shares([sl])) else None)
    if problem:
        raise BadInput(f"cannot emulate slice {sl.name} here: {problem}")
    parent = inputs.made_folder("--out", args.out)
    budget = Budget(model=args.model, repeats=steps_for(args, sl))  # --eps tokenizes the corpus
    run_id = datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + "-select"
    out = parent / run_id
    out.mkdir(exist_ok=True)
    result = {"run_id": run_id, "report_dir": str(out), "slice": sl.name, "model": args.model, "delta": args.delta,
              "steps_per_trial": budget.repeats, "interrupted": False, "crashed": None, "decisions": [], "trials": [],
              "beyond_paper": []}
    status, measure = 0, None
    try:
        with ray_clusters.emulated([sl]) as cluster:
            measure = measured_selection.Trials(trials.Runner(cluster, [sl], budget), sl, out / "results.jsonl")
            result["decisions"] = measured_selection.decide(measure, modes, args.delta,
                                                            measured_selection.predictor(sl, budget) if args.planner else None,
                                                            args.margin)
            if factor:
                result["beyond_paper"] = beyond_paper(measure, result["decisions"], factor)
    except KeyboardInterrupt:
        result["interrupted"], status = True, INTERRUPTED
    except measured_selection.TrialCrashed as e:  # a crash is no result: the decision is not made
        result["crashed"], status = str(e), 1
    result["trials"] = measured_selection.trial_table(measure) if measure else []
    skipped = {(x["technique"], tuple(x["vms"])) for d in result["decisions"] for x in d["trials"] if x.get("skipped")}
    result["planner"] = {"on": args.planner, "margin": args.margin,
                         "trials_saved": len(skipped - {(t["technique"], tuple(t["vms"])) for t in result["trials"]})}
    (out / "selection.json").write_text(json.dumps(result, indent=1))
    if not args.json:
        print(summary(result))
    return status, result


def beyond_paper(measure: measured_selection.Trials, decisions: list[dict], factor: dict) -> list[dict]:
    """DiLoCo on all VMs, trained at the sweep's sync interval, against each decision."""
    names = tuple(vm.name for vm in measure.slice.vms)
    measure.runner.options["DiLoCo"] = beyond.trained_options(factor)
    measure("DiLoCo", names)
    diloco = measure.records[("DiLoCo", names)]
    return [{**beyond.candidate(measure.records.get((d["technique"], tuple(d["vms"]))) if d["technique"] else None,
                                diloco, factor), "mode": d["mode"]} for d in decisions]


def summary(result: dict) -> str:
    lines = [f"select on {result['slice']} ({result['model']}, delta {result['delta']}): "
             f"{len(result['trials'])} trials, report in {result['report_dir']}"]
    if result["interrupted"]:
        lines.append("  interrupted: the trials run so far are in results.jsonl")
    if result["crashed"]:  # before the decisions, or in DiLoCo's run beyond the paper after them
        lines.append(f"  {'beyond the paper: not compared' if result['decisions'] else 'no decision'}: {result['crashed']}")
    for d in result["decisions"]:
        answer = f"{d['technique']} on {'+'.join(d['vms'])}" if d["technique"] else "none (needs more GPU memory)"
        lines += [f"  {d['mode']:9}: {answer}", f"             because {d['rule']}"]
    for b in result.get("beyond_paper", []):
        f = b["tokens_to_target"]
        said = (f"learns as much in {b['time_over_choice']:.3g}x the time of {b['choice']['technique']} on "
                f"{'+'.join(b['choice']['vms'])}" if b["time_over_choice"] is not None else f"not compared: {b['reason']}")
        lines.append(f"  beyond the paper ({b['mode']}): DiLoCo on {'+'.join(b['vms'])} {said} (its tokens x{f['factor']:.3g} "
                     f"Data's, measured on {f['model']}, {beyond.trained_said(f)})")
    if result["planner"]["on"]:
        lines.append(f"  planner (margin {result['planner']['margin']}): {result['planner']['trials_saved']} trial(s) saved")
    lines.append("  trials (T = average TFLOP/s per GPU, 0 = failed):")
    lines += [f"    {t['technique']:9} on {'+'.join(t['vms']):9} {t['status']:5} T = {t['T']:.4g}" for t in result["trials"]]
    return "\n".join(lines)
