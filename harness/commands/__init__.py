"""One module per `python -m harness` subcommand, each with HELP, add_arguments(parser) and run(args).

run returns (exit status, result): the result is the command's one JSON document under --json,
and is printed for people by the command itself otherwise.
"""
import importlib

NAMES = ("reproduce", "train", "memory", "emulate", "compare", "judge", "select", "predict", "live")


def command(name: str):
    """A subcommand's module, imported when asked for: several import JAX, which costs a second
    here and half a minute in the netem tests' emulated VM, where only `emulate` runs."""
    return importlib.import_module(f"harness.commands.{name}")
