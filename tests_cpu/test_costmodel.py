"""The cost model (harness.analysis.costmodel) and `python -m harness predict`, at paper scale.

Its agreement with measured trials is tested where the trials are measured (test_claims.py);
here, its parts: TCP's window and slow start, the terms of each technique, and the command.
"""
import dataclasses
import json
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.analysis import costmodel, measured_link, netmodel
from harness.analysis.netmodel import Network
from harness.commands.cli import main
from harness.core.config import Setup, model_config
from harness.core.flops import param_count
from harness.errors import BadInput
from harness.platform import slices
from harness.techniques import technique as technique_named
from tests_cpu import slice_files

GPT2M = model_config("gpt2m")
NET = Network()


def test_one_connection_is_capped_by_window_over_rtt():
    rtt = 0.1
    big = 1e9
    rate = big / (NET.send_s(big, rtt) - NET.send_s(big / 2, rtt)) * 0.5
    assert rate == pytest.approx(NET.window_bytes / rtt, rel=0.01)
    assert NET.send_s(big, 0.0) == pytest.approx(big / NET.link_bytes_per_s)


def test_the_window_is_the_stock_linux_one_and_nccl_opens_one_flow_per_peer():
    """Half of the 6 MiB tcp_rmem is offered as window; a sender keeps 3/4 of its 4 MiB tcp_wmem in
    flight: 3 MiB either way. Each flow NCCL opens to a peer brings its own window."""
    assert netmodel.TCP_WINDOW_BYTES == 3 * 2**20 and NET.flows_per_peer == 1
    two = Network(flows_per_peer=2)
    rtt, big = 0.05, 2e9
    assert NET.send_s(big, rtt) / two.send_s(big, rtt) == pytest.approx(2, rel=0.02)
    assert two.links(50).dcn_bytes_per_s == pytest.approx(2 * NET.links(50).dcn_bytes_per_s)


def test_a_shaped_link_queues_each_window_on_top_of_its_round_trip():
    """A flow its window holds back on a shaped link carries window / (RTT + window / rate); at no
    delay, the rate; unshaped, the smaller of window / RTT and the link's rate, as before. So
    shaping adds the same time per byte at every RTT and takes none of the RTT's away (the
    smaller-of form let a slower rate hide the delay: a loaded run's solver shaped UTAH-GPN to a
    third of what its collectives carried to shrink its latency groups)."""
    net = Network(link_bytes_per_s=12.5e6, window_bytes=26.7e3, flows_per_peer=1)
    assert net.flow_bytes_per_s(7e-3) == pytest.approx(min(12.5e6, 26.7e3 / 7e-3))
    for rate in (6.6e6, 3.5e6):
        shaped = dataclasses.replace(net, shaped_bytes_per_s=rate)
        assert shaped.flow_bytes_per_s(0.0) == rate
        assert shaped.flow_bytes_per_s(7e-3) == pytest.approx(26.7e3 / (7e-3 + 26.7e3 / rate))
        for rtt in (1e-3, 7e-3, 20e-3):
            assert 1 / shaped.flow_bytes_per_s(rtt) - 1 / shaped.flow_bytes_per_s(0.0) == pytest.approx(rtt / 26.7e3)
    fast = dataclasses.replace(net, shaped_bytes_per_s=1e9)  # a shaper faster than the collectives
    assert fast.flow_bytes_per_s(0.0) == 12.5e6 and fast.send_s(1e8, 0.0) == pytest.approx(1e8 / 12.5e6)


def test_a_measured_flow_sets_the_window_or_the_link():
    slow = NET.calibrated(20.0, 1e8)  # 100 MB/s at 20 ms: 2 MB in flight
    assert slow.window_bytes == pytest.approx(2e6) and slow.link_bytes_per_s == NET.link_bytes_per_s
    full = Network(link_bytes_per_s=1.25e8).calibrated(0.5, 1.2e8)  # the flow filled a 1 Gbit/s link
    assert full.link_bytes_per_s == 1.2e8 and full.window_bytes == NET.window_bytes
    with pytest.raises(ValueError):
        NET.calibrated(0.0, 1e8)


def test_a_measured_link_file_gives_its_largest_rtt_pair_and_bad_ones_name_the_field(tmp_path):
    good = tmp_path / "link.json"
    good.write_text(json.dumps({"pairs": [{"a": "vm1", "b": "vm2", "rtt_ms": 12.0, "throughput_bytes_per_s": 3e8},
                                          {"a": "vm1", "b": "vm3", "rtt_ms": 80.0, "throughput_bytes_per_s": 4e7}]}))
    link = measured_link.load(good)
    assert (link.b, link.rtt_ms, link.flow_bytes_per_s) == ("vm3", 80.0, 4e7)
    for text, message in [("{", "not JSON"), ("{}", "non-empty list 'pairs'"),
                          ('{"pairs": [{"rtt_ms": 5}]}', "field 'throughput_bytes_per_s' must be a positive number"),
                          ('{"pairs": [{"rtt_ms": true, "throughput_bytes_per_s": 1}]}', "field 'rtt_ms'")]:
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(BadInput, match=message) as e:
            measured_link.load(bad)
        assert str(bad) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(BadInput, match="cannot read it"):
        measured_link.load(tmp_path / "missing.json")


def test_predict_on_a_measured_link_is_slower_where_the_flow_was(tmp_path):
    def data_step(rate: float) -> float:
        path = tmp_path / f"{rate}.json"
        path.write_text(json.dumps({"pairs": [{"a": "vm1", "b": "vm2", "rtt_ms": 20.2, "throughput_bytes_per_s": rate}]}))
        proc = subprocess.run([sys.executable, "-m", "harness", "predict", "--tokens", "1e6", "--link", str(path),
                               "--json"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["network"]["measured"]["source"] == str(path)
        return next(p["step_s"] for p in doc["predictions"] if p["technique"] == "Data" and len(p["vms"]) == 2)

    assert data_step(5e7) > data_step(2e8)


def test_slow_start_costs_round_trips_before_the_window_opens():
    rtt = 0.02
    iw = NET.initial_window_bytes
    assert NET.send_s(iw, rtt) == pytest.approx(rtt / 2 + rtt)  # one window: one round trip after the first byte leaves
    assert NET.send_s(3 * iw, rtt) == pytest.approx(rtt / 2 + 2 * rtt)  # then the window doubles


def test_on_a_shaped_link_the_windows_of_slow_start_queue_too():
    """While the window opens, each round trip is also as long as its window takes to drain at the
    shaped rate, as once it is open (flow_bytes_per_s): a cold transfer pays its bytes over the rate
    on top of its round trips, and its window opens to the flow's own."""
    rtt, rate = 0.02, 5e6
    net = Network(link_bytes_per_s=12.5e6, window_bytes=80e3, initial_window_bytes=10e3, flows_per_peer=1,
                  shaped_bytes_per_s=rate)
    assert net.send_s(10e3, rtt) == pytest.approx(rtt / 2 + rtt + 10e3 / rate)
    assert net.send_s(30e3, rtt) == pytest.approx(rtt / 2 + 2 * rtt + 30e3 / rate)
    carried = 10e3 + 20e3 + 40e3  # three round trips open it to 80 kB, the flow's window
    assert net.send_s(1e6, rtt) == pytest.approx(rtt / 2 + 3 * rtt + carried / rate
                                                 + (1e6 - carried) / net.flow_bytes_per_s(rtt))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(slices.TABLE_I_ORDER), st.floats(0.0, 200.0), st.floats(0.1, 100.0))
def test_every_step_grows_with_rtt_and_is_the_sum_of_its_terms(name, rtt_a, extra):
    sl = slices.load(name)
    vms = tuple(vm.name for vm in sl.vms)
    for technique in ("Data", "ZeRO2", "Shard", "Pipeshard"):
        near = costmodel.predict(technique, sl.with_rtt(rtt_a), vms, GPT2M)
        far = costmodel.predict(technique, sl.with_rtt(rtt_a + extra), vms, GPT2M)
        assert far.step_s >= near.step_s
        assert near.step_s == pytest.approx(sum(near.terms.values()))


def test_at_paper_scale_the_two_site_order_is_the_papers():
    """C2's order, predicted: Pipeshard < Data < ZeRO2 < Shard on every two-site slice of Table I,
    and Pipeshard's step grows least from TACC-TACC's RTT to GAT-AMST's."""
    for sl in slices.table_i()[1:]:
        vms = tuple(vm.name for vm in sl.vms)
        steps = {t: costmodel.predict(t, sl, vms, GPT2M).step_s for t in ("Pipeshard", "Data", "ZeRO2", "Shard")}
        assert list(steps) == sorted(steps, key=steps.get), f"{sl.name}: {steps}"
    near, far = slices.load("TACC-TACC"), slices.load("GAT-AMST")
    growth = {t: costmodel.predict(t, far, ("vm1", "vm2"), GPT2M).step_s
              - costmodel.predict(t, near, ("vm1", "vm2"), GPT2M).step_s for t in ("Pipeshard", "Data", "ZeRO2", "Shard")}
    assert min(growth, key=growth.get) == "Pipeshard" and max(growth, key=growth.get) == "Shard"


def test_zero2_as_alpa_compiled_it_is_slower_than_data_on_every_slice_and_more_so_as_the_rtt_grows():
    """Table II has ZeRO2 behind Data on every slice, further behind at longer RTTs: with
    microbatches Alpa's ZeRO2 sends an all-reduce and an all-gather, 1.5x Data's bytes. With one
    microbatch it reduce-scatters, and sends what Data sends."""
    gaps = []
    for sl in slices.table_i():
        vms = tuple(vm.name for vm in sl.vms)
        data, zero2 = (costmodel.predict(t, sl, vms, GPT2M) for t in ("Data", "ZeRO2"))
        assert zero2.step_s > data.step_s, sl.name
        gaps.append((sl.rtt_ms, zero2.step_s - data.step_s))
    assert [g for _, g in sorted(gaps)] == sorted(g for _, g in gaps)
    gat = slices.load("GAT-AMST")
    one = Setup(micro_batches=1)
    ratio = lambda setup: (costmodel.predict("ZeRO2", gat, ("vm1", "vm2"), GPT2M, setup).terms["collectives"]
                           / costmodel.predict("Data", gat, ("vm1", "vm2"), GPT2M, setup).terms["collectives"])
    assert ratio(Setup()) == pytest.approx(1.5, rel=0.05) and ratio(one) == pytest.approx(1.0, rel=0.05)


def test_at_paper_scale_data_on_one_rtx_vm_beats_pipeshard_on_all_four_gpus_of_tacc_tacc():
    """C5, predicted: gpt2m with Data on TACC-TACC's 2 RTX alone trains faster than Pipeshard on
    all 4 GPUs (time to train the same tokens goes as 1 / total TFLOP/s)."""
    sl = slices.load("TACC-TACC")
    alone = costmodel.predict("Data", sl, ("vm1",), GPT2M)
    every = costmodel.predict("Pipeshard", sl, ("vm1", "vm2"), GPT2M)
    assert alone.tflops_per_gpu * alone.gpus > every.tflops_per_gpu * every.gpus


def test_a_faster_gpu_computes_faster_and_memory_decides_what_fits():
    sl = slices.load("UTAH-GPN")  # vm1 RTX 6000 (16.3 TFLOP/s fp32), vm2 T4 (8.1)
    rtx, t4 = (costmodel.predict("Data", sl, (vm,), GPT2M) for vm in ("vm1", "vm2"))
    assert t4.terms["compute"] / rtx.terms["compute"] == pytest.approx(16.3 / 8.1)
    # The cards' GiB, less the share XLA's allocator leaves to the driver and CUDA context.
    assert rtx.memory_limit_bytes == int(0.9 * 24 * 2**30) and t4.memory_limit_bytes == int(0.9 * 16 * 2**30)
    big = Setup(batch_per_gpu=16)
    assert not costmodel.predict("Data", sl, ("vm2",), GPT2M, big).fits


def test_every_term_of_communication_is_the_sum_of_the_wire_predict_reports():
    sl = slices.load("BRIS-STAR")
    for t in ("Data", "ZeRO2", "Shard", "Pipeshard"):
        p = costmodel.predict(t, sl, ("vm1", "vm2"), GPT2M).to_dict()
        by_term = {"collectives": 0.0, "pipeline_transfers": 0.0}
        for w in p["wire"]:
            assert not w["overlaps_compute"] and w["waited_s"] == w["seconds"]  # Alpa overlapped none
            by_term["pipeline_transfers" if w["kind"] in ("send", "ring-pass") else "collectives"] += w["seconds"]
        assert by_term["collectives"] == pytest.approx(p["terms_s"]["collectives"], abs=1e-5), t
        assert by_term["pipeline_transfers"] == pytest.approx(p["terms_s"]["pipeline_transfers"], abs=1e-5), t
        json.dumps(p)  # the wire travels in predict --json
    data = costmodel.predict("Data", sl, ("vm1", "vm2"), GPT2M).wire
    gradients = next(w for w in data if w["what"] == "the gradients")
    assert gradients["crosses_vms"] and not gradients["per_microbatch"] and gradients["times"] == 1
    assert gradients["bytes_per_rank"] == 4 * param_count(GPT2M)


def test_pipeshard_pays_the_bubble_and_the_transfers_the_others_do_not():
    sl = slices.load("UTAH-MASS")
    p = costmodel.predict("Pipeshard", sl, ("vm1", "vm2"), GPT2M)
    d = costmodel.predict("Data", sl, ("vm1", "vm2"), GPT2M)
    assert p.terms["pipeline_bubble"] > 0 and p.terms["pipeline_transfers"] > 0
    assert d.terms["pipeline_bubble"] == d.terms["pipeline_transfers"] == 0
    assert p.terms["collectives"] < d.terms["collectives"]  # only the tied embedding crosses VMs


def test_predict_command_prints_one_json_document_in_seconds():
    out = subprocess.run([sys.executable, "-m", "harness", "predict", "--slice", "GAT-AMST", "--model", "gpt2L",
                          "--tokens", "1e6", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {(p["technique"], tuple(p["vms"])) for p in doc["predictions"]} == {
        (t, vms) for t in ("Data", "ZeRO2", "Shard", "Pipeshard") for vms in (("vm1", "vm2"), ("vm1",), ("vm2",))}
    for p in doc["predictions"]:
        assert p["epochs_s"] == pytest.approx(p["step_s"] * 20 * 1e6 / (p["gpus"] * 4 * 1024))
        assert set(p["terms_s"]) == {"compute", "collectives", "pipeline_bubble", "pipeline_transfers"}


@pytest.mark.parametrize("args, field", [(["--slice", "nowhere"], "slice 'nowhere'"), (["--model", "gpt5"], "model"),
                                         (["--efficiency", "0"], "--efficiency"), (["--micro-batches", "3"], "--micro-batches"),
                                         (["--tokens", "-1"], "--tokens")])
def test_predict_names_bad_input(args, field, capsys):
    assert main(["predict", *args]) == 2
    err = capsys.readouterr().err
    assert field in err and err.count("\n") == 1, err


def test_a_three_site_slice_with_per_site_rtts_is_priced_by_its_slowest_link(tmp_path):
    path = tmp_path / "three.toml"
    path.write_text('name = "THREE"\nnetwork = "L2STS"\nrtt_ms = {"A-B" = 10.0, "A-C" = 80.0, "B-C" = 75.0}\n'
                    + "".join(f'[[vm]]\nname = "vm{i}"\nsite = "{s}"\ngpus = 2\ngpu = "A30"\n' for i, s in enumerate("ABC", 1)))
    sl = slices.load(str(path))
    both = {t: costmodel.predict(t, sl, ("vm1", "vm2"), GPT2M) for t in ("Data", "Pipeshard")}
    every = {t: costmodel.predict(t, sl, ("vm1", "vm2", "vm3"), GPT2M) for t in ("Data", "Pipeshard")}
    assert every["Data"].terms["collectives"] > both["Data"].terms["collectives"]  # 80 ms against 10 ms
    assert every["Pipeshard"].notes[-1].startswith("blocks per stage") and every["Pipeshard"].gpus == 6


def test_on_one_gpu_every_technique_is_the_single_device_step(tmp_path):
    """A VM of one GPU alone: nothing to split, sum or pass between stages, so every technique
    costs what Data does (ZeRO2 once kept a second copy of the gradients, and Pipeshard summed its
    tied embedding with a stage it does not have)."""
    sl = slices.load(str(slice_files.write(tmp_path, "ONE", vms=2, gpus=1)))
    assert costmodel.placements(sl) == [("v0", "v1"), ("v0",), ("v1",)]
    solo = dataclasses.replace(sl, vms=sl.vms[:1])
    assert costmodel.placements(solo) == [("v0",)]  # all of its VMs are the one: predicted once
    data = costmodel.predict("Data", sl, ("v0",), GPT2M)
    for technique in ("ZeRO2", "Shard", "Pipeshard"):
        p = costmodel.predict(technique, sl, ("v0",), GPT2M)
        assert p.step_s == pytest.approx(data.step_s) and p.terms["collectives"] == 0, technique
        assert p.memory_bytes == pytest.approx(data.memory_bytes, rel=1e-3), technique


def test_pipeshards_memory_and_transfers_follow_its_schedule():
    """1F1B keeps as many microbatches in flight as there are stages, GPipe keeps them all; with
    the same compute and bubble, 1F1B's two stages swap activations and gradients in m + 1
    exchanges where GPipe's send them in 2m."""
    sl = slices.load("UTAH-GPN")
    one_f_one_b, gpipe = (costmodel.predict("Pipeshard", sl, ("vm1", "vm2"), GPT2M,
                                            Setup(micro_batches=8, pipeline_schedule=schedule))
                          for schedule in ("1f1b", "gpipe"))
    assert gpipe.memory_bytes > one_f_one_b.memory_bytes
    for term in ("compute", "pipeline_bubble", "collectives"):
        assert gpipe.terms[term] == one_f_one_b.terms[term], term
    ours, theirs = (next(w for w in p.wire if w["kind"] == "send") for p in (one_f_one_b, gpipe))
    assert (ours["times"], theirs["times"]) == (9, 16) and theirs["seconds"] == pytest.approx(ours["seconds"] * 16 / 9)


def test_diloco_bears_datas_gradient_sync_once_every_h_steps():
    """Beyond the paper: DiLoCo's sync is an all-reduce of the pseudo-gradient, the size of the
    gradients, over every GPU as Data's; a step bears 1/H of it. Inside a VM it all-reduces its
    gradients every step, which crosses no VM."""
    sl = slices.load("UTAH-GPN")
    vms = tuple(vm.name for vm in sl.vms)
    data = costmodel.predict("Data", sl, vms, GPT2M)
    diloco = costmodel.predict("DiLoCo", sl, vms, GPT2M)
    gradients = next(w for w in data.wire if w["what"] == "the gradients")
    sync = next(w for w in diloco.wire if w["crosses_vms"])
    assert [w["what"] for w in diloco.wire if w["crosses_vms"]] == ["the pseudo-gradient"]
    assert sync["every_steps"] == 500 and sync["bytes_per_rank"] == gradients["bytes_per_rank"]
    assert sync["seconds"] == pytest.approx(gradients["seconds"] / 500)
    assert diloco.terms["compute"] == data.terms["compute"] and diloco.step_s < data.step_s


def test_a_delayed_diloco_sync_is_waited_for_only_beyond_the_compute_it_overlaps():
    """Delayed, a sync (each fragment's) runs alongside the compute of the step it lands in: where
    the runtime overlaps them, a step waits for what it takes beyond that compute, spread over H
    steps; the bytes are the same."""
    sl = slices.load("UTAH-GPN")
    vms = tuple(vm.name for vm in sl.vms)
    for fragments in (1, 2):
        options = {"sync_every": 4, "fragments": fragments}
        now = costmodel.predict("DiLoCo", sl, vms, GPT2M, options=options)
        late = costmodel.predict("DiLoCo", sl, vms, GPT2M, options={**options, "delay": 1})
        sync_now = next(w for w in now.wire if w["crosses_vms"])
        sync_late = next(w for w in late.wire if w["crosses_vms"])
        assert sync_late["overlaps_compute"] and not sync_now["overlaps_compute"]
        assert sync_late["seconds"] == sync_now["seconds"] == sync_now["waited_s"]
        each = sync_late["seconds"] * 4 / fragments
        assert each > late.terms["compute"] > 0  # on this link the sync outlasts a step's compute
        assert sync_late["waited_s"] == pytest.approx(fragments * (each - late.terms["compute"]) / 4)
        assert late.step_s < now.step_s
        # on a runtime that runs it alone (XLA's on CPU), a delayed sync costs what an undelayed one does
        alone = costmodel.predict("DiLoCo", sl, vms, GPT2M, options={**options, "delay": 1},
                                  net=dataclasses.replace(costmodel.network_for(sl), overlaps_compute=False))
        assert alone.step_s == pytest.approx(now.step_s) and alone.wire == [{**w, "overlaps_compute": w["crosses_vms"]}
                                                                          for w in now.wire]


@pytest.mark.parametrize("options, message", [
    ({"sync_every": 4, "delay": 4}, "delay must be from 0 to sync_every / fragments - 1 (3), got 4"),
    ({"sync_every": 4, "fragments": 2, "delay": 2}, "delay must be from 0 to sync_every / fragments - 1 (1), got 2"),
    ({"delay": -1}, "delay must be from 0"),
    ({"mix": 1.5}, "mix must be in [0, 1], got 1.5"),
    ({"mix": float("nan")}, "mix must be in [0, 1], got nan"),
    ({"outer_lr": float("nan")}, "outer_lr must be a positive number, got nan"),
    ({"outer_lr": float("inf")}, "outer_lr must be a positive number, got inf"),
    ({"outer_momentum": float("nan")}, "outer_momentum must be in [0, 1), got nan"),
    ({"sync_every": 4, "fragments": 5}, "fragments must be from 1 to sync_every (4), got 5"),
])
def test_diloco_settings_out_of_range_are_named(options, message):
    with pytest.raises(BadInput, match="DiLoCo: " + re.escape(message)):
        technique_named("DiLoCo", **options)
