"""SIGTERM as Ctrl-C: what a command or a pytest session started (namespaces, Ray nodes, workers)
is torn down by the same `finally` blocks and fixture teardowns, whether a user pressed Ctrl-C or
a CI job, `timeout` or `kill` ended it. Python's default SIGTERM ends the process on the spot and
leaves all of it behind."""
import os
import signal


def interrupt_in(owner: int):
    """A handler raising KeyboardInterrupt in the process `owner` alone. A process forked from it
    without exec (pyroute2 forks one to open a namespace's socket, then terminates it) inherits the
    handler and the whole stack: raising there would run the teardown a second time, and delete
    the namespaces the owner is still using."""
    def handler(signum, frame):
        if os.getpid() != owner:
            os._exit(128 + signum)
        raise KeyboardInterrupt
    return handler


def tear_down_on(*signums: int, replace: bool = True) -> None:
    """Make each signal interrupt this process as Ctrl-C does. replace=False leaves a signal whose
    handler someone already set (a test runner embedding us) as it is."""
    for signum in signums:
        if replace or signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, interrupt_in(os.getpid()))
