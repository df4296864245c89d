"""Backends register themselves by name (harness.suite.backends); a module names one with its marker."""
import pytest

from harness.suite import backends


class Node:
    """What a test item gives registered_of: its id and its closest claims_backend marker."""

    def __init__(self, *args, **kwargs):
        self.nodeid = "tests_cpu/test_x.py"
        self.marker = getattr(pytest.mark, backends.MARKER)(*args, **kwargs).mark if args or kwargs else None

    def get_closest_marker(self, name):
        return self.marker if name == backends.MARKER else None


def test_the_suites_backends_are_registered_with_what_they_run_on():
    assert set(backends.REGISTRY) >= {"emulated-cpu", "emulated-gpu", "live", "local"}
    assert all(b.about and callable(b.trials) and callable(b.open) for b in backends.REGISTRY.values())
    assert backends.registered_of(Node("local")) is backends.REGISTRY["local"]
    assert backends.registered_of(Node()) is None


def test_a_marker_naming_no_registered_backend_stops_the_session_with_the_names():
    with pytest.raises(pytest.UsageError, match="needs one of .*'nowhere'") as said:
        backends.registered_of(Node("nowhere"))
    assert all(name in str(said.value) for name in backends.REGISTRY)
    with pytest.raises(pytest.UsageError, match="needs one of"):
        backends.registered_of(Node("local", "live"))


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="backend 'local' is registered twice"):
        backends.register("local", "another", lambda config: [])(lambda config, log, budget: iter(()))


def test_a_new_backend_is_one_registered_function(monkeypatch):
    monkeypatch.setattr(backends, "REGISTRY", dict(backends.REGISTRY))

    @backends.register("mine", "my cluster", lambda config: ["a trial"])
    def _mine(config, log, budget):
        yield backends.Backend("mine", runner=None, slices=[], trials=["a trial"])

    registered = backends.registered_of(Node("mine"))
    assert registered.trials(None) == ["a trial"]
    with registered.open(None, None, None) as b:
        assert b.name == "mine"


def test_a_markers_keywords_change_only_the_budget_fields_it_names(pytestconfig):
    from harness.errors import BadInput
    from harness.suite import options

    assert options.budget(pytestconfig, model="scale-tiny").model == "scale-tiny"
    with pytest.raises(BadInput, match="budget: .*'modle'"):
        options.budget(pytestconfig, modle="scale-tiny")


def test_a_groups_answer_is_its_first_processes_with_the_fullest_devices_peak():
    """Process 0 times the step (as Alpa's driver did); memory is the fullest device's."""
    from harness.backends import protocol

    answers = [{"losses": [1.0], "peak_bytes": 5}, {"losses": [1.0], "peak_bytes": 9}, {"losses": [1.0], "peak_bytes": 7}]
    assert protocol.fullest(answers) == {"losses": [1.0], "peak_bytes": 9}
    assert answers[0]["peak_bytes"] == 5  # the answers themselves are left as they came
    assert protocol.fullest([{"peak_bytes": 5}, {"peak_bytes": None}]) == {"peak_bytes": None}  # CPUs keep no count
    assert protocol.fullest([{"compile_s": 1.0}, {"compile_s": 2.0}]) == {"compile_s": 1.0}
