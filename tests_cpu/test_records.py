import copy
import json

import pytest

from harness import resources
from harness.core import data, train
from harness.core.config import TrainConfig, model_config
from harness.paper import claims
from harness.runs import records


@pytest.fixture(scope="module")
def record(fixture_corpus):
    model_cfg, cfg = model_config("scale-tiny"), TrainConfig(steps=3, batch_size=8, seq_len=32)
    packed = data.prepare(model_cfg.vocab_size, 32, 8, fixture_corpus)
    return records.build(model_cfg, cfg, packed, train.train(model_cfg, cfg, packed))


@pytest.mark.slow
def test_real_record_round_trips_through_jsonl(record, tmp_path):
    path = tmp_path / "results.jsonl"
    records.append(path, record)
    records.append(path, record)
    assert records.read(path) == [record, record]


def test_record_carries_the_measurements(record):
    assert record["schema_version"] == 1 and record["status"] == "ok" and record["reason"] is None
    assert record["steps"] == 3 and record["tokens"] == 3 * 8 * 32
    assert len(record["losses"]) == len(record["timing"]["step_times_s"]) == 3
    assert record["throughput"]["tflops_alpa"] > 0
    assert record["throughput"]["mfu"] is None  # a CPU has no known peak
    assert record["environment"]["packages"]["jax"]


def mutate(record, path, value):
    bad = copy.deepcopy(record)
    *parents, last = path
    target = bad
    for key in parents:
        target = target[key]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value
    return bad


DELETE = object()


@pytest.mark.parametrize("path, value, field", [
    (["schema_version"], 2, "schema_version"),
    (["technique"], "DataParallel", "technique"),
    (["status"], "crashed", "status"),
    (["status"], "oom", "reason"),  # a failed trial must say why
    (["steps"], -1, "steps"),
    (["timing", "median_step_s"], "fast", "timing/median_step_s"),
    (["model", "params"], DELETE, "model"),
    (["cluster", "hosts"], 0, "cluster/hosts"),
    (["losses"], [1.0, "nan"], "losses/1"),
    (["created_at"], "yesterday", "created_at"),
    (["unexpected"], 1, "<record>"),
])
def test_malformed_records_are_rejected_naming_the_field(record, path, value, field):
    bad = mutate(record, path, value)
    with pytest.raises(records.InvalidRecord, match=f"field {field}"):
        records.validate(bad)
    with pytest.raises(records.InvalidRecord, match=f"results.jsonl:1: trial record field {field}"):
        records.loads(json.dumps(bad), "results.jsonl:1")


@pytest.mark.parametrize("path, factor, field", [
    (["timing", "median_step_s"], 0.5, "timing/median_step_s"),
    (["timing", "epoch_time_s"], 2, "timing/epoch_time_s"),
    (["timing", "step_times_s", 1], 10, "timing/median_step_s"),  # the times under a median left as it was
    (["tokens"], 2, "tokens"),
    (["steps"], 2, "steps"),
    (["data", "steps_per_epoch"], 2, "data/steps_per_epoch"),  # an epoch of other batches than the corpus gives
    (["throughput", "tflops_alpa"], 3, "throughput/tflops_alpa"),
    (["throughput", "tflops_rule"], 3, "throughput/tflops_rule"),
])
def test_a_record_read_back_whose_derived_field_was_changed_is_refused_naming_it(record, path, factor, field):
    """The verdicts read what a run derives (an epoch's time from the median step time, TFLOP/s):
    in a file where it no longer follows from the step times, one of them was changed after the run."""
    target = record
    for key in path:
        target = target[key]
    bad = mutate(record, path, target * factor)
    records.validate(bad)  # the schema has no quarrel with it
    with pytest.raises(records.InvalidRecord, match=f"^results.jsonl:1: trial record field {field}: .* changed after"):
        records.loads(json.dumps(bad), "results.jsonl:1")
    assert records.loads(json.dumps(record)) == record


@pytest.mark.parametrize("direction, rtt_ms, refused", [
    ({"delay_ms": 5.0}, 10.3, False),
    ({"delay_ms": 5.0}, 9.9, True),
    ({"delay_ms": 5.0, "jitter_ms": 1.0, "jitter_distribution": "uniform"}, 8.1, False),  # each way 4 ms at least
    ({"delay_ms": 5.0, "jitter_ms": 1.0, "jitter_distribution": "uniform"}, 7.9, True),
    ({"delay_ms": 5.0, "jitter_ms": 1.0, "jitter_distribution": "normal"}, 0.5, False),  # no floor
    ({"delay_ms": 5.0, "jitter_ms": 1.0}, 0.5, False),  # a slice's jitter is normal unless it says otherwise
    ({"delay_ms": 5.0, "up": False}, 0.5, False),  # a link down holds a packet for no known time
], ids=["above", "below", "uniform-jitter-above", "uniform-jitter-below", "normal-jitter", "jitter-by-default",
        "down"])
def test_a_measured_rtt_shorter_than_its_links_hold_a_round_trip_is_refused(record, direction, rtt_ms, refused):
    """A record's RTT is a probe's through the emulated links it names: one that came back sooner
    than they hold a packet there and back was changed after the run, or they were."""
    doctored = copy.deepcopy(record)
    doctored["cluster"]["vms_used"] = ["vm1", "vm2"]
    doctored["cluster"]["network"] = {"mechanism": "userspace", "rtt_ms": rtt_ms,
                                      "links": {"vm1>vm2": direction, "vm2>vm1": direction}}
    line = records.dumps(doctored)  # the schema has no quarrel with it
    if not refused:
        assert records.loads(line) == doctored
        return
    with pytest.raises(records.InvalidRecord, match=r"^results.jsonl:1: trial record field cluster/network/rtt_ms: "
                                                    r"[\d.]+ ms, shorter than the [\d.]+ ms its links hold a round "
                                                    r"trip \(vm1>vm2 and back\).*changed after the run$"):
        records.loads(line, "results.jsonl:1")


@pytest.fixture(scope="module")
def emulated_record():
    """A shipped trial across two emulated VMs, with its links as the run wrote them."""
    shipped = records.read(resources.path("baselines", "quick", "results.jsonl"))
    return next(r for r in shipped if r["cluster"]["network"].get("links"))


@pytest.mark.parametrize("setting, value, field", [
    ("delay_ms", True, "vm1>vm2/delay_ms"),  # Python would sum true as 1 ms
    ("delay_ms", "10.1", "vm1>vm2/delay_ms"),
    ("delay_ms", -1.0, "vm1>vm2/delay_ms"),
    ("delay_ms", DELETE, "vm1>vm2"),
    ("jitter_ms", None, "vm1>vm2/jitter_ms"),
    ("jitter_distribution", "gaussian", "vm1>vm2/jitter_distribution"),
    ("loss_percent", 101, "vm1>vm2/loss_percent"),
    ("loss_gemodel", {"p": 1}, "vm1>vm2/loss_gemodel"),
    ("queue_packets", 0, "vm1>vm2/queue_packets"),
    ("up", "yes", "vm1>vm2/up"),
    ("tcp_buffer_bytes", 1.5, "vm1>vm2/tcp_buffer_bytes"),
    ("latency_ms", 10.1, "vm1>vm2"),  # a setting the emulation has no such name for
])
def test_a_link_setting_not_as_the_emulation_writes_it_is_refused_naming_it(emulated_record, setting, value, field):
    """The claims hold a scaled trial's links against the RTT it was scaled to, and the records
    against its measured RTT: a link's settings are typed, or a doctored one would be summed."""
    bad = mutate(emulated_record, ["cluster", "network", "links", "vm1>vm2", setting], value)
    with pytest.raises(records.InvalidRecord, match=f"^results.jsonl:1: trial record field cluster/network/links/"
                                                    f"{field}: "):
        records.loads(json.dumps(bad), "results.jsonl:1")
    assert records.loads(json.dumps(emulated_record)) == emulated_record


def test_a_link_named_other_than_from_vm_to_vm_is_refused(emulated_record):
    bad = copy.deepcopy(emulated_record)
    bad["cluster"]["network"]["links"]["vm1-vm2"] = bad["cluster"]["network"]["links"].pop("vm1>vm2")
    with pytest.raises(records.InvalidRecord, match="^results.jsonl:1: trial record field cluster/network/links: "
                                                    "'vm1-vm2' does not match"):
        records.loads(json.dumps(bad), "results.jsonl:1")


def test_a_run_whose_loss_diverged_is_recorded_as_a_failed_trial():
    """A NaN loss is no measurement of training: the run is an error, its NaN losses are nulls
    (JSON has no NaN), and the record is written and read back like any other."""
    model_cfg, cfg = model_config("scale-tiny"), TrainConfig(steps=3, batch_size=8, seq_len=32)
    run = train.TrainRun(3, losses=[7.0, float("nan"), float("inf")], step_times_s=[0.5, 0.1, 0.1])
    diverged = records.build(model_cfg, cfg, None, run)
    assert diverged["status"] == "error" and diverged["losses"] == [7.0, None, None]
    assert diverged["reason"] == "training diverged: the loss of recorded step 2 of 3 is nan, not a finite number"
    assert records.loads(records.dumps(diverged)) == diverged
    assert claims.state(diverged) == "crashed"
    interrupted = records.build(model_cfg, cfg, None, run, status="error", reason="interrupted by the user")
    assert interrupted["reason"] == "interrupted by the user"  # a failure already recorded keeps its reason


def test_failed_trial_with_reason_is_valid(record):
    failed = mutate(mutate(record, ["status"], "oom"), ["reason"], "RESOURCE_EXHAUSTED: 17.2 GB > 16 GB")
    assert records.validate(failed)["status"] == "oom"


def test_non_json_line_is_rejected():
    with pytest.raises(records.InvalidRecord, match="results.jsonl:7: not JSON"):
        records.loads("{oops", "results.jsonl:7")


def test_failures_are_classified():
    assert records.failure(RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 1GB"))[0] == "oom"
    assert records.failure(KeyboardInterrupt()) == ("error", "interrupted by the user")
    assert records.failure(ValueError("boom")) == ("error", "ValueError: boom")
