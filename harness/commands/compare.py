"""`python -m harness compare BASELINE RUN`: flag regressions of a run against a baseline run."""
import argparse
from pathlib import Path

from harness import inputs
from harness.experiments import compare

HELP = "compare a run folder with a baseline: slower trials, newly failed trials, worse claim verdicts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("baseline", metavar="BASELINE", help="baseline run folder, e.g. harness/resources/baselines/quick-similarity")
    p.add_argument("run", metavar="RUN", help="run folder written by reproduce, e.g. reports/<run id>")
    p.add_argument("--threshold", type=float, default=compare.THRESHOLD,
                   help="slowdown of a median step time that counts as a regression (default: %(default)s = +50%%)")


def run(args) -> tuple[int, dict]:
    inputs.run_folder("BASELINE", args.baseline)
    inputs.run_folder("RUN", args.run)
    inputs.positive("--threshold", args.threshold)
    result = compare.compare(Path(args.baseline), Path(args.run), args.threshold)
    if not args.json:
        print(compare.summary(result))
    return (1 if result["regressed"] else 0), result
