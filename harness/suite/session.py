"""The run's log: every trial record and verdict of the session. With --report-dir, each trial
record is appended to results.jsonl as it lands (a killed session keeps what it measured), and the
whole report (claims.md, claims.json, figures) is written when the session ends, passing, failing
or interrupted."""
import datetime
import json
import time
from pathlib import Path

import pytest

from harness.suite import options


class ClaimsLog:
    def __init__(self, config):
        self.config = config
        self.trials: dict = {}  # Trial -> record
        self.memory: list[dict] = []
        self.verdicts: dict[str, dict] = {}
        self.calibration: list[dict] = []  # the calibration trials' records (harness.calibration)
        self.scaling = None  # harness.calibration.Scaling of the run's links
        self.budget = None  # the trials' Budget as the backend ran them
        self.similarity: dict | None = None  # the groups, paper scale vs this run (the similarity test)
        self.started = time.time()
        directory = config.getoption("--report-dir")
        self.directory = Path(directory) if directory else None

    def add(self, trial, record: dict) -> None:
        from harness import records

        self.trials[trial] = record
        if self.directory:
            records.append(self.directory / "results.jsonl", record)

    def add_calibration(self, record: dict) -> None:
        from harness import records

        self.calibration.append(record)
        if self.directory:
            records.append(self.directory / "calibration.jsonl", record)

    def write(self, directory: Path) -> None:
        from harness import report
        from harness.suite.checks import MEMORY_ASSUMPTIONS

        context = {"slices": ", ".join(sl.name for sl in options.claim_slices(self.config)),
                   "trial budget": str(self.budget or options.budget(self.config)),
                   "links": self.scaling.mode if self.scaling else options.link_scaling(self.config),
                   "memory assumptions": str(MEMORY_ASSUMPTIONS),
                   "memory compiler": ", ".join(sorted({r["memory"]["source"] for r in self.memory})) or "none",
                   "trials run": len(self.trials), "wall time (s)": round(time.time() - self.started),
                   "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        report.write(directory, list(self.trials.values()), self.memory, list(self.verdicts.values()), context)
        if self.similarity is not None:
            from harness import similarity

            (directory / "similarity.json").write_text(json.dumps(self.similarity, indent=1))
            (directory / "similarity.md").write_text(similarity.markdown(self.similarity))


@pytest.fixture(scope="session")
def claims_log(pytestconfig):
    options.claim_slices(pytestconfig)  # a bad slice name or file fails the session at once, with the field named
    options.budget(pytestconfig)
    log = ClaimsLog(pytestconfig)
    yield log
    if log.directory and (log.trials or log.verdicts):
        log.write(log.directory)
