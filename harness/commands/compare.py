"""`python -m harness compare BASELINE RUN`: flag regressions of a run against a baseline run."""
import argparse
from pathlib import Path

from harness import compare
from harness.errors import BadInput

HELP = "compare a run folder with a baseline: slower trials, newly failed trials, worse claim verdicts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("baseline", metavar="BASELINE", help="baseline run folder, e.g. harness/resources/baselines/quick")
    p.add_argument("run", metavar="RUN", help="run folder written by reproduce, e.g. reports/<run id>")
    p.add_argument("--threshold", type=float, default=compare.THRESHOLD,
                   help="slowdown of a median step time that counts as a regression (default: %(default)s = +50%%)")


def run(args) -> tuple[int, dict]:
    for name in ("baseline", "run"):
        if not (Path(getattr(args, name)) / "results.jsonl").is_file():
            raise BadInput(f"{name} {getattr(args, name)}: no results.jsonl there (expected a run folder)")
    if args.threshold <= 0:
        raise BadInput(f"--threshold must be positive, got {args.threshold}")
    result = compare.compare(Path(args.baseline), Path(args.run), args.threshold)
    if not args.json:
        print(compare.summary(result))
    return (1 if result["regressed"] else 0), result
