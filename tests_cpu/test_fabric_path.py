"""The live-slice suite (tests_fabric) runs unchanged against an emulated slice posing as a live one.

An emulated two-site slice (namespaces, delay link, a Ray node per VM) is described only by an
inventory file, and pytest runs on its VM1, as a user runs it on a live slice's VM1. The fabric
suite must find the cluster, run a trial on both VMs through it and measure the RTT itself. What
is checked is the path, not the claims (test_claims.py judges those, on the same Runner), so the
link is short (2 ms) and one trial, Data on both VMs, stands for the others: the path does not
depend on the technique, and every set of VMs costs its own worker start-up (~20 s here).
"""
import os
import sys
from pathlib import Path

import pytest

from harness.backends.emulation.network import EmulatedNetwork, measure_rtt
from harness.backends.ray_nodes import RayCluster
from harness.core.config import Budget
from harness.platform import slices
from harness.runs import records
from harness.suite.privileges import require_emulation

pytestmark = pytest.mark.slow  # runs the live-slice suite on an emulated slice

ROOT = Path(__file__).resolve().parents[1]
RTT_MS = 2.0


def inventory_text(sl, address: str) -> str:
    lines = ['name = "posing-as-live"', f'ray_address = "{address}"', 'platform = "cpu"']
    for vm in sl.vms:
        lines += ["[[vm]]", f'name = "{vm.name}"', f'site = "{vm.site}"', f"gpus = {vm.gpus}", f'gpu = "{vm.gpu}"']
    return "\n".join(lines) + "\n"


def test_fabric_suite_on_an_emulated_slice_posing_as_live(tmp_path):
    require_emulation()
    sl = slices.load("UTAH-GPN").with_rtt(RTT_MS)
    report = tmp_path / "report"
    with EmulatedNetwork(sl) as net, RayCluster(net) as cluster:
        net.set_rtt(0.0)
        base_rtt = measure_rtt(net, "vm1", "vm2")  # what the machine adds to any RTT measured on it
        net.set_rtt(None)
        inv = tmp_path / "inventory.toml"
        inv.write_text(inventory_text(sl, cluster.address))
        # The claims themselves are judged in test_claims.py; here the path matters: trials, records, RTT.
        result = net.run("vm1", [sys.executable, "-m", "pytest", "tests_fabric", "-m", "fabric", "-p", "no:cacheprovider",
                                 "-q", "-k", "test_ray_cluster or (test_trial and Data and 4gpu)",
                                 "--slice-inventory", str(inv), "--trial-model", "scale-tiny",
                                 "--report-dir", str(report)],
                         cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, **cluster.auth})  # as a user of a token-protected slice would
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout, result.stdout[-3000:]  # the trial and the cluster check, none skipped
    [r] = records.read(report / "results.jsonl")
    assert r["status"] == "ok" and len(r["timing"]["step_times_s"]) == Budget.repeats
    assert r["cluster"]["vms_used"] == ["vm1", "vm2"] and r["cluster"]["network"]["mechanism"] == "live"
    # Measured by the suite, not read from the inventory (which states no RTT); what the link adds
    # to the machine's own round trip is checked, as ping's minimum.
    added = r["cluster"]["network"]["rtt_ms"] - base_rtt
    assert abs(added - RTT_MS) <= 0.05 * RTT_MS + 0.3, f"{added:.3f} ms added for {RTT_MS} ms (base {base_rtt:.3f} ms)"
