"""`python -m harness judge RUN`: a run folder judged again by this code, from its files alone."""
import argparse
from pathlib import Path

from harness.errors import BadInput
from harness.experiments import rejudge, report

HELP = ("judge a run folder again from its records and say where its claims.json or similarity.json differs "
        "(--write: rewrite them)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run folder written by reproduce, e.g. reports/<run id> or "
                                              "harness/resources/baselines/quick-similarity")
    p.add_argument("--write", action="store_true",
                   help="rewrite the folder's claims.json and claims.md with today's verdicts, and its similarity.json and "
                        "similarity.md with the links its records give (the records stay)")


def run(args) -> tuple[int, dict]:
    folder = Path(args.run)
    if not rejudge.results_file(folder).is_file():
        raise BadInput(f"RUN {folder}: no {' or '.join(rejudge.RESULTS)} there (expected a run folder written by reproduce)")
    if not (folder / "claims.json").is_file():
        raise BadInput(f"RUN {folder}: no claims.json there (its slices and declared limits are read from it)")
    verdicts = rejudge.judge(folder)
    before = rejudge.differences(folder, verdicts)
    if args.write and before:
        rejudge.write(folder, verdicts)
    result = {"run": str(folder), "verdicts": [v.to_dict() for v in verdicts], "differences": before,
              "written": bool(args.write and before)}
    if not args.json:
        print(summary(result))
    return (1 if before and not args.write else 0), result


def summary(result: dict) -> str:
    lines = [f"{result['run']}: " + report.counts(result["verdicts"])]
    lines += [f"  {v['part']:18} {report.STATUS_MARK[v['outcome']]}" for v in result["verdicts"]]
    if not result["differences"]:
        lines.append("  its claims.json and similarity.json say the same")
    else:
        lines.append("  its files " + ("were rewritten; they said otherwise:" if result["written"] else "say otherwise:"))
        lines += [f"    {d}" for d in result["differences"]]
    return "\n".join(lines)
