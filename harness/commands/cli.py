"""`python -m harness`: the suite's command line.

Every subcommand takes --json, which puts exactly one JSON document on stdout (as its last and
only line); progress and logs go to stderr. Bad input ends the command with one line,
`harness: error: ...`, and exit status 2, before any expensive work.
"""
import argparse
import json
import signal
import sys

from harness import __version__, interrupts
from harness.commands import NAMES, command
from harness.errors import BadInput


def parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line; given argv that names a subcommand, only that one is set up (and imported)."""
    p = argparse.ArgumentParser(
        prog="python -m harness",
        description="Reproduce and check the claims of 'Performance of Small Language Model Pretraining "
                    "on FABRIC' (arXiv 2602.02632): four parallelization techniques on two-VM GPU slices.")
    p.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    asked = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
    for name in [asked] if asked in NAMES else NAMES:
        module = command(name)
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.add_argument("--json", action="store_true", help="print exactly one JSON document on stdout")
    p.set_defaults(json=False)
    return p


def main(argv=None) -> int:
    args = parser(argv).parse_args(argv)
    interrupts.tear_down_on(signal.SIGTERM, signal.SIGINT)
    try:
        status, result = command(args.command).run(args)
    except BadInput as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, separators=(",", ":")))
    return status
