"""`python -m harness reproduce`: every trial and claim on the emulated Table I slices, and the report.

It runs the claims suite that ships with the package (harness/suite/emulated.py, which
tests_cpu/test_claims.py also collects) with pytest, so the report and the tests are one and the
same judgement, from a checkout or from an installed copy: pytest's progress goes to stderr;
./reports/<run id>/ gets results.jsonl, benchmark.json (pytest-benchmark), claims.md, claims.json
and the figures. Then the run is compared with the shipped baseline of its mode and links
(harness/resources/baselines/<mode>/ for literal links, <mode>-similarity/ for scaled ones), if
there is one.
"""
import argparse
import dataclasses
import datetime
import importlib.resources
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness import inputs, resources
from harness.core.config import model_config
from harness.errors import BadInput
from harness.experiments import compare, infer, report
from harness.paper.figures import times
from harness.platform import slices
from harness.runs.run_config import QUICK_SLICES, SHARDS, RunConfig

HELP = "run every trial and claim on the emulated slices and write reports/<run id>/ (claims.md, figures, JSON)"
# Each mode's settings over RunConfig's defaults.
MODES = {
    # --quick: the defaults, the two slices that span the paper's regimes.
    "quick": {},
    # full: all five Table I slices, all three paper models for memory.
    "full": {"slices": "all", "memory_models": ("gpt2m", "gpt2l", "gpt2L")},
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true",
                   help=f"the two slices that span the paper's regimes ({', '.join(QUICK_SLICES)}) (default: all five "
                        "Table I slices; README.md gives the time of each on a 2-core machine)")
    p.add_argument("--slice", default=None, metavar="NAME|FILE", action="append",
                   help="run the claims on this slice instead (repeatable): a Table I name or your own slice file")
    p.add_argument("--literal", action="store_true",
                   help="run the trials at the paper's RTTs as they are, with the CPU runtime's per-tensor "
                        "collectives (default: similarity-scaled links, with the collectives combined as on GPUs: "
                        "each slice's RTT and rate set so that the scale model splits its steps as gpt2m did in the "
                        "paper; see docs/claims.md, 'Similarity scaling')")
    p.add_argument("--gpu-speeds", action="store_true",
                   help="each emulated VM computes at its GPU's speed against the run's fastest, by a CPU quota "
                        "(default: every VM at its cores' full speed; see docs/claims.md, 'The scale model on CPU')")
    p.add_argument("--shard", default=None, choices=SHARDS,
                   help="the registered technique the claims run as the paper's Shard: 'Shard', this suite's planner, "
                        "or 'Shard-alpa', Alpa's ShardParallel as it ran (docs/techniques.md; default: "
                        f"{RunConfig.shard})")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="TOML file of the run's settings (harness/runs/run_config.py) over the mode's; the options "
                        "here override it")
    p.add_argument("--model", default=None, metavar="NAME",
                   help=f"model the trials train (default: {RunConfig.model})")
    p.add_argument("--out", default="reports", metavar="DIR",
                   help="parent of the run folder (default: reports/ of the current directory)")
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="baseline run folder to compare with (default: the shipped baseline of the mode and links, "
                        "when there is one and the run is on the mode's own slices, not --slice)")
    p.add_argument("--infer", action="store_true",
                   help="after the claims, infer the paper's unstated setup from its observed runs and judge C4 apart "
                        "from that choice (`python -m harness memory --infer` on the run's slices, a compile per "
                        "setup tried): inference.md and inference.json in the report")
    p.add_argument("--beyond", nargs="?", const="also", choices=("also", "only"), default=None,
                   help="beyond the paper: every technique, DiLoCo too, trained to one target loss on each slice's own "
                        "link, and claims B1 (the RTT above which DiLoCo reaches it before Pipeshard) and B2 (bytes "
                        "across the link per target): the section 'Beyond the paper' of claims.md, beyond.md, "
                        "beyond.json, beyond.jsonl and figures (harness/experiments/beyond.py). '--beyond' runs it "
                        "after the paper's claims, '--beyond only' instead of them")
    p.add_argument("--beyond-set", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting of the sweep beyond the paper, repeatable: reference_steps, eval_every, cap_steps, "
                        "repeats, sync_every (DiLoCo's H), techniques (comma-separated), combine, or diloco.OPTION for "
                        "DiLoCo's outer_lr, outer_momentum, nesterov, fragments, delay, mix (defaults: "
                        "harness/experiments/beyond.py's Settings)")
    p.add_argument("--threshold", type=float, default=compare.THRESHOLD,
                   help="slowdown of a trial's median step time that counts as a regression (default: %(default)s = +50%%)")


def run(args) -> tuple[int, dict]:
    mode = "quick" if args.quick else "full"
    run_config = RunConfig().override({k: f"mode {mode}" for k in MODES[mode]}, **MODES[mode])
    if args.config:
        labels, given = _file_settings(args.config)
        run_config = run_config.override(labels, **given)
    run_config = run_config.override(
        {"slices": "--slice", "model": "--model", "link_scaling": "--literal", "gpu_speeds": "--gpu-speeds",
         "shard": "--shard"},
        slices=",".join(str(Path(s).resolve()) if Path(s).is_file() else s for s in args.slice) if args.slice else None,
        model=args.model, link_scaling="literal" if args.literal else None, gpu_speeds=args.gpu_speeds or None,
        shard=args.shard)
    run_config.check()  # a bad slice file, model or inventory fails here, named, before any work
    sweep_settings = _beyond_settings(args, run_config)
    inputs.positive("--threshold", args.threshold)
    if args.baseline:
        # judged again at the end (harness.experiments.compare): one its records cannot be judged from is refused now
        given = inputs.run_folder("--baseline", args.baseline)
        try:
            compare.load(given)
        except BadInput as e:
            raise BadInput(f"--baseline {e}") from None
    suite = Path(str(importlib.resources.files("harness.suite").joinpath("emulated.py")))
    run_id = datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{mode}"
    out = inputs.made_folder("--out", args.out) / run_id
    out.mkdir(exist_ok=True)
    # What the run is set by goes with its report; pytest reads it from there.
    settings = out / "run.toml"
    settings.write_text(dataclasses.replace(run_config, report_dir=str(out)).to_toml())
    # --noconftest: the suite runs the same from a checkout as from site-packages, where no
    # checkout's conftest.py is around to configure it.
    argv = [sys.executable, "-m", "pytest", str(suite), "--noconftest", "-p", "no:cacheprovider", "-v", "--no-header",
            "--run-config", str(settings), "--benchmark-json", str(out / "benchmark.json"),
            "--benchmark-storage", f"file://{(out / '.benchmarks').resolve()}",  # not in the user's directory
            "--benchmark-columns", "median,min,max,rounds"]
    print(f"reproduce ({mode}): {suite} -> {out}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    status = 0 if args.beyond == "only" else _pytest(argv)
    if args.beyond and status != INTERRUPTED:
        status = max(status, _beyond(run_config, out, sweep_settings))
    wall = time.perf_counter() - start
    result = {"run_id": run_id, "mode": mode, "report_dir": str(out), "pytest_exit_status": status,
              "wall_s": round(wall, 1), "files": sorted(p.name for p in out.iterdir())}
    if args.infer and status != INTERRUPTED:
        status = max(status, _infer(run_config.slices, out))
        result["files"] = sorted(p.name for p in out.iterdir())
    claims_file = out / "claims.json"
    result["verdicts"] = json.loads(claims_file.read_text())["verdicts"] if claims_file.is_file() else []
    beyond_file = out / "beyond.json"
    if beyond_file.is_file():
        result["beyond"] = json.loads(beyond_file.read_text())["verdicts"]
    # The shipped baselines ran the mode's own slices: a run on others has nothing to compare with them.
    # They ran every VM at full speed, too, and the default Shard: a run at the GPUs' speeds or with
    # another Shard differs from them by design.
    modes_own = RunConfig().override({}, **MODES[mode]).slices
    baseline = (Path(args.baseline) if args.baseline
                else None if run_config.slices != modes_own or run_config.gpu_speeds or run_config.shard != RunConfig.shard
                else resources.path("baselines", mode if run_config.link_scaling == "literal" else f"{mode}-similarity"))
    if baseline and (baseline / "results.jsonl").is_file() and (out / "results.jsonl").is_file():
        result["comparison"] = compare.compare(baseline, out, args.threshold)
    if not args.json:
        print(summary(result))
    return (status if status in (0, 1, INTERRUPTED) else 1), result


INTERRUPTED = 130


def _file_settings(path: str) -> tuple[dict, dict]:
    """(labels, settings) of a run configuration file, for RunConfig.override."""
    loaded = RunConfig.load(path)
    given = {k: getattr(loaded, k) for k in loaded.origin}
    return dict(loaded.origin), given


def _infer(which: str, out: Path, narrower: tuple[str, ...] = ()) -> int:
    """`memory --infer` on each slice of the run (all Table I slices for 'all'), into the report;
    `narrower`: more of its options (a smaller space)."""
    names = {"all": slices.TABLE_I_ORDER, "quick": QUICK_SLICES}.get(which, which.split(","))
    argv = [sys.executable, "-m", "harness", "memory", "--infer", "--json", *narrower]
    for name in names:
        argv += ["--slice", name]
    print(f"reproduce: inferring the paper's setup on {', '.join(names)} ...", file=sys.stderr, flush=True)
    path = out / "inference.json"
    with path.open("w") as f:
        status = _child(argv, stdout=f)
    if status != 0:
        return status
    (out / "inference.md").write_text(infer.markdown(json.loads(path.read_text())) + "\n")
    return 0


def _beyond_settings(args, run_config: RunConfig):
    """The sweep's settings with --beyond-set's, checked against the run's model before any work;
    None without --beyond."""
    if not args.beyond:
        if args.beyond_set:
            raise BadInput("--beyond-set: it sets the sweep beyond the paper; give --beyond (or --beyond only) too")
        return None
    # deferred: JAX loads only where the sweep runs
    from harness.experiments import beyond

    settings = beyond.Settings().override(args.beyond_set)
    settings.check(model_config(run_config.budget().model))
    return settings


def _beyond(run_config: RunConfig, out: Path, settings) -> int:
    """The sweep of harness.experiments.beyond on the run's slices, on an emulated cluster of its
    own, into the report; each result goes to beyond.jsonl as it comes, so that Ctrl-C loses none."""
    # deferred: JAX and Ray load only where the sweep runs
    from harness.backends import ray_clusters
    from harness.backends.contract import Failed
    from harness.backends.emulation import netns
    from harness.experiments import beyond
    from harness.runs import trials

    problem = netns.missing_privileges()
    if problem:
        print(f"reproduce --beyond: cannot emulate slices here: {problem}", file=sys.stderr)
        return 1
    chosen = run_config.claim_slices

    def keep(result):
        beyond.append(out / "beyond.jsonl", result)
        print(f"reproduce --beyond: {result.technique} on {result.slice}, repeat {result.repeat + 1}: {result.status} "
              f"after {result.steps} steps, {result.seconds:.1f} s", file=sys.stderr, flush=True)

    print(f"reproduce --beyond: {', '.join(settings.techniques)} to a target on {', '.join(sl.name for sl in chosen)}",
          file=sys.stderr, flush=True)
    try:
        with ray_clusters.emulated(chosen) as cluster:
            runner = trials.Runner(cluster, chosen, settings.budget(run_config.budget()), **settings.runner_options)
            doc = beyond.sweep(runner, settings, keep).to_dict()
    except KeyboardInterrupt:
        return INTERRUPTED
    except Failed as e:  # the reference run itself failed: there is no target to time anything to
        print(f"reproduce --beyond: {e.reason}", file=sys.stderr)
        return 1
    judged = beyond.judge(doc)
    (out / "beyond.json").write_text(json.dumps({**doc, "verdicts": judged}, indent=1))
    section = beyond.markdown(doc, judged)
    (out / "beyond.md").write_text(section)
    beyond.figures(doc, out)
    claims_md = out / "claims.md"
    if claims_md.is_file():  # a section of its own, after the paper's
        claims_md.write_text(claims_md.read_text().rstrip("\n") + "\n\n" + section)
    return 0


def _pytest(argv: list[str]) -> int:
    return _child(argv, stdout=sys.stderr)


def session_env(environ) -> dict:
    """The environment for a pytest session of its own, started from inside another one: without
    pytest-xdist's variables. A child that inherits PYTEST_XDIST_WORKER from a test running on an
    xdist worker takes itself for that worker, and pytest-benchmark then disables its benchmarks."""
    return {k: v for k, v in environ.items() if not k.startswith("PYTEST_XDIST_")}


def _child(argv: list[str], stdout) -> int:
    """pytest in a child process with its output on our stderr. Ctrl-C (or SIGTERM) is passed on,
    so that its fixtures record the interrupted trial, write the report and tear the emulated
    slice down; we wait for that and return 130."""
    # Run in the background (nohup, `&` from a script), we ignore SIGINT and the child would too:
    # give it SIGINT back, or the Ctrl-C we pass on (after a SIGTERM to us) could not stop it.
    # Four CPU devices in the test process: the memory claims compile for up to 4 GPUs at once.
    env = {**session_env(os.environ), "JAX_NUM_CPU_DEVICES": "4"}
    proc = subprocess.Popen(argv, stdout=stdout, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return INTERRUPTED


def summary(result: dict) -> str:
    ended = "interrupted" if result["pytest_exit_status"] == INTERRUPTED else "ended"
    report_file = next((f for f in ("claims.md", "beyond.md") if f in result["files"]), None)
    lines = [f"run {result['run_id']}: {result['wall_s']:.0f} s, report in {result['report_dir']}/{report_file}"
             if report_file else
             f"run {result['run_id']} {ended} after {result['wall_s']:.0f} s without a report; "
             f"what it recorded is in {result['report_dir']}/ ({', '.join(f for f in result['files'] if not f.startswith('.')) or 'nothing'})"]
    if result["verdicts"]:
        lines.append("  " + report.counts(result["verdicts"]))
    for v in result["verdicts"]:
        lines.append(f"  {v['part']:18} {report.STATUS_MARK[report.outcome(v)]}")
        # Each contradiction a declared limit covers: how far it goes, the bound, and this run's
        # own figure for the limit's mechanism.
        for c in v.get("comparisons", []):
            e = c.get("excuse")
            if e:
                gap, bound, figure = e["gap"], e["bound"], e["figure"]
                lines.append(f"    {c['id']}: {'excused' if e['excused'] else 'NOT excused'}; "
                             f"{'unknown' if gap is None else times(gap, bound)} against the paper, "
                             f"bound {'unknown' if bound is None else times(bound, gap)}; {e['mechanism']}: "
                             f"{'not measured' if figure is None else times(figure, e['threshold'])} "
                             f"(threshold {e['threshold']:g}x)")
    for v in result.get("beyond", []):
        lines.append(f"  {v['part']:18} {v['status']} (beyond the paper)")
    if "comparison" in result:
        lines.append(compare.summary(result["comparison"]))
    return "\n".join(lines)
