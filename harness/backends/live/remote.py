"""The VM's side of `live up` and `live down`, run there by the harness's venv:

    python -m harness.backends.live.remote stop WORKDIR [MARKER]

stops every process tree rooted at a process whose command line mentions WORKDIR (and MARKER, if
given): the Ray node `live up` started (its daemons name their session dir under WORKDIR, its
workers descend from the raylet), link probes, drivers. Nothing else on the VM is touched, so a
second slice's or the user's own Ray survive (`ray stop` would stop them all). Prints how many
processes it stopped.
"""
import os
import sys

from harness.backends import process_trees

GRACE_S = 3.0  # Ray's daemons take seconds to honour SIGTERM; what is left then is killed


def stop(workdir: str, marker: str | None = None) -> int:
    spared = process_trees.ancestors(os.getpid())  # this command (and the shell that runs it) names WORKDIR too
    inside = workdir.rstrip("/") + "/"  # a path under it: /w/vm1 must not stop /w/vm10's processes

    def targets() -> list[int]:
        pids = [p for p in process_trees.all_pids() if p not in spared]
        roots = {p for p in pids if process_trees.mentions(p, inside) and (marker is None or process_trees.mentions(p, marker))}
        return process_trees.in_trees(pids, roots)

    found = len(targets())
    process_trees.kill(targets, GRACE_S)
    return found


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[0] != "stop":
        print(__doc__, file=sys.stderr)
        return 2
    print(stop(*argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
