"""One module per `python -m harness` subcommand, each with HELP, add_arguments(parser) and run(args).

run returns (exit status, result): the result is the command's one JSON document under --json,
and is printed for people by the command itself otherwise.
"""
from harness.commands import compare, emulate, memory, predict, reproduce, select, train

COMMANDS = {"reproduce": reproduce, "train": train, "memory": memory, "emulate": emulate, "compare": compare,
            "select": select, "predict": predict}
