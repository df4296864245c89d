"""The claims' tests, one body for every backend: each trial timed by pytest-benchmark, then each
timed claim judged on the table of trials. A module runs them by importing them and naming its
backend (harness.suite.backends):

    from harness.suite.claims_tests import *  # noqa: F403
    pytestmark = pytest.mark.claims_backend("emulated-gpu")
"""
import pytest

from harness.paper import claims
from harness.suite import checks

__all__ = ["test_trial", "test_claim"]


def test_trial(trial, backend, benchmark, claims_log):
    checks.run_trial(trial, backend.runner, benchmark, claims_log)


@pytest.mark.parametrize("claim", claims.TIMED_CLAIMS, ids=lambda c: c.__name__)
def test_claim(claim, backend, claims_log):
    recs = checks.ensure_trials(backend.runner, claims_log, backend.trials)
    checks.check_claim(claim(claims.Table(recs, backend.slices)), claims_log, backend.limits,
                       claims_log.evidence(backend, recs))
