"""`python -m harness`: the suite's command line.

Every subcommand takes --json, which puts exactly one JSON document on stdout (as its last and
only line); progress and logs go to stderr. Bad input ends the command with one line,
`harness: error: ...`, and exit status 2, before any expensive work.
"""
import argparse
import json
import os
import signal
import sys

from harness import __version__
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


def _interrupt_in(owner: int):
    """SIGTERM and Ctrl-C tear down (namespaces, Ray nodes, workers) in the command's own process.
    A process forked from it without exec (pyroute2 forks one to open a namespace's socket, then
    terminates it) inherits the handler and the whole stack: raising there would run the
    teardown a second time, and delete the namespaces the command is still using."""
    def handler(signum, frame):
        if os.getpid() != owner:
            os._exit(128 + signum)
        raise KeyboardInterrupt
    return handler


def main(argv=None) -> int:
    args = parser(argv).parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupt_in(os.getpid()))
    try:
        status, result = command(args.command).run(args)
    except BadInput as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, separators=(",", ":")))
    return status
