"""The pytest side of the harness: the paper's claims as tests, usable from a checkout
(`pytest -m cpu|gpu|fabric`) and from an installed package (`python -m harness reproduce`).

    plugin.py        the pytest11 entry point: options, markers and the trial parametrization
    options.py       the options, each over a setting of the run's configuration (harness.runs.run_config)
    session.py       the run's log: every trial record and verdict, and the report at the end
    backends.py      where the trials run, registered by name: emulated on CPU or GPUs, a live slice, loopback
    checks.py        the test bodies' steps: run a trial, judge a claim, build the memory table
    claims_tests.py  the one claims test body, whatever the backend
    emulated.py      the claims on the emulated Table I slices (what `reproduce` runs)
    privileges.py    what emulation needs (root, namespaces), or a skip (a failure in CI) with the reason
"""
