"""The run's log: every trial record and verdict of the session. With --report-dir, each trial
record is appended to results.jsonl as it lands (a killed session keeps what it measured), and the
whole report (claims.md, claims.json, figures) is written when the session ends, passing, failing
or interrupted."""
import contextlib
import datetime
import json
import time
from pathlib import Path

import pytest

from harness.core.config import Technique
from harness.platform import slices
from harness.suite import options


class ClaimsLog:
    def __init__(self, config):
        self.config = config
        self.trials: dict = {}  # Trial -> record
        self.memory: list[dict] = []
        self.verdicts: dict[str, dict] = {}
        self.calibration: list[dict] = []  # the calibration trials' records (harness.experiments.calibration)
        self.scaling = None  # harness.experiments.calibration.Scaling of the run's links
        self.budget = None  # the trials' Budget as the backend ran them
        # The links document (similarity.json): what the run's links were made of, the groups per
        # slice, and (after the similarity test) the groups beyond the tolerance, judged.
        self.links: dict | None = None
        self.declared = None  # the name of the declared limits the timed claims were judged with
        self.started = time.time()
        directory = options.run_config(config).report_dir
        self.directory = Path(directory) if directory else None

    def evidence(self, backend, recs: list[dict]):
        """What a declared limit's mechanism may read: this run's trials, memory analyses and links."""
        # deferred: pytest loads the plugin before conftest configures JAX
        from harness.paper import limits

        if self.links is None:
            self.links = backend.links(recs)
        self.declared = backend.declared
        return limits.Run(recs, self.memory, self.links)

    def add(self, trial, record: dict) -> None:
        # deferred: pytest loads the plugin before conftest configures JAX
        from harness.runs import records

        self.trials[trial] = record
        if self.directory:
            records.append(self.directory / "results.jsonl", record)

    def add_calibration(self, record: dict) -> None:
        # deferred: pytest loads the plugin before conftest configures JAX
        from harness.runs import records

        self.calibration.append(record)
        if self.directory:
            records.append(self.directory / "calibration.jsonl", record)

    def write(self, directory: Path) -> None:
        # deferred: pytest loads the plugin before conftest configures JAX
        from harness.experiments import report

        chosen = options.claim_slices(self.config)
        context = {"slices": ", ".join(sl.name for sl in chosen),
                   "slice sources": [slices.reference(sl) for sl in chosen],
                   "trial budget": str(self.budget or options.budget(self.config)),
                   "links": self.scaling.mode if self.scaling else options.link_scaling(self.config),
                   "declared limits": self.declared or "none",
                   "Shard played by": options.run_config(self.config).shard,
                   "memory assumptions": str(options.MEMORY_ASSUMPTIONS),
                   "memory compiler": ", ".join(sorted({r["memory"]["source"] for r in self.memory})) or "none",
                   "trials run": len(self.trials), "wall time (s)": round(time.time() - self.started),
                   "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        if self.links is not None:
            # deferred: pytest loads the plugin before conftest configures JAX
            from harness.analysis import similarity

            directory.mkdir(parents=True, exist_ok=True)
            doc = {"tolerance": similarity.TOLERANCE, **self.links}
            doc.setdefault("misses", similarity.misses(self.links))  # judged, where the similarity test ran
            (directory / "similarity.json").write_text(json.dumps(doc, indent=1))
            (directory / "similarity.md").write_text(similarity.markdown(doc))
        report.write(directory, list(self.trials.values()), self.memory, list(self.verdicts.values()), context)


def cast(run) -> contextlib.AbstractContextManager:
    """The technique the run casts as the paper's Shard, for the whole session (trials,
    predictions, memory analyses, the report); nothing to do, and no JAX loaded, for the default."""
    if run.shard == Technique.SHARD:
        return contextlib.nullcontext()
    # deferred: pytest loads the plugin before conftest configures JAX
    from harness.techniques import contract

    return contract.cast({Technique.SHARD: run.shard})


@pytest.fixture(scope="session")
def claims_log(pytestconfig):
    run = options.run_config(pytestconfig).check()  # a bad slice name or file fails the session at once, named
    log = ClaimsLog(pytestconfig)
    with cast(run):
        yield log
        if log.directory and (log.trials or log.verdicts):
            log.write(log.directory)
