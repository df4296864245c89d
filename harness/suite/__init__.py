"""The pytest side of the harness: the paper's claims as tests, usable from a checkout
(`pytest -m cpu|gpu|fabric`) and from an installed package (`python -m harness reproduce`).

    plugin.py        the pytest11 entry point: options, markers and the trial parametrization
    options.py       what the options select: slices, trial budget, trial list, memory models
    session.py       the run's log: every trial record and verdict, and the report at the end
    backends.py      where the trials run: emulated on CPU, emulated on GPUs, or a live slice
    checks.py        the test bodies' steps: run a trial, judge a claim, build the memory table
    claims_tests.py  the one claims test body, whatever the backend
    emulated.py      the claims on the emulated Table I slices (what `reproduce` runs)
    deviations.py    what the CPU scale model cannot show: limits as data (harness.paper.limits), each
                     bounded and excusing only where the run shows its mechanism
"""
