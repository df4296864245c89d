"""What the netem mechanism does on a kernel that has sch_netem: run as a script there (test_netem.py
runs it inside a stock kernel under qemu, or directly where the machine's own kernel has netem).

    python tests_cpu/netem_inside.py OUT_DIR

Measures, and writes OUT_DIR/netem.json; the tests judge. Each part is recorded as it ends, so a
part that fails leaves the others' measurements and its own error.
"""
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

from harness.backends.emulation import netns
from harness.backends.emulation.network import EmulatedNetwork, choose_mechanism, measure_throughput
from harness.platform import slices

# Three sites, every pair its own RTT, and one direction slower than its way back.
THREE_SITES = """
name = "THREE"
rtt_ms = {"A-B" = 20.0, "A-C" = 60.0, "B-C" = 100.0}
[[vm]]
name = "vm1"
site = "A"
gpus = 1
gpu = "T4"
[[vm]]
name = "vm2"
site = "B"
gpus = 1
gpu = "T4"
[[vm]]
name = "vm3"
site = "C"
gpus = 1
gpu = "T4"
[[link]]
from = "A"
to = "C"
delay_ms = 45.0
"""


def ping(net: EmulatedNetwork, a: str, b: str, count: int, port: int = 7201, timeout_s: float = 2.0) -> dict:
    server = net.popen(b, [sys.executable, "-m", "harness.backends.emulation.probe", "echo", net.address[b], str(port)],
                       stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        out = net.run(a, [sys.executable, "-m", "harness.backends.emulation.probe", "ping", net.address[b], str(port),
                          str(count), str(timeout_s)], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)
    finally:
        server.kill()
        server.wait()


def qdiscs(net: EmulatedNetwork, vm: str) -> str:
    return net.run(vm, ["tc", "qdisc", "show"], capture_output=True, text=True, check=True).stdout


def main(out_dir: Path) -> None:
    results: dict = {}
    sink = out_dir / "netem.json"

    def part(name, fn):
        start = time.monotonic()
        try:
            results[name] = fn()
        except Exception:
            results[name] = {"error": traceback.format_exc()}
        results[name]["seconds"] = time.monotonic() - start
        sink.write_text(json.dumps(results, indent=1))
        print(f"{name}: {results[name]['seconds']:.1f} s", file=sys.stderr, flush=True)

    part("auto", lambda: {"mechanism": choose_mechanism("auto")})

    def per_pair():
        path = out_dir / "three.toml"
        path.write_text(THREE_SITES)
        sl = slices.load(str(path))
        with EmulatedNetwork(sl, mechanism="netem") as net:
            pairs = {f"{a}-{b}": min(ping(net, a, b, 20)["rtt_ms"]) for a, b in (("vm1", "vm2"), ("vm1", "vm3"),
                                                                               ("vm2", "vm3"))}
            targets = {f"{a}-{b}": net.shape(a, b).delay_ms + net.shape(b, a).delay_ms
                       for a, b in (("vm1", "vm2"), ("vm1", "vm3"), ("vm2", "vm3"))}
            shown = qdiscs(net, "vm1")
            names = list(net.netns.values())
        return {"rtt_ms": pairs, "target_ms": targets, "qdiscs_vm1": shown,
                "left": [n for n in names if n in netns.ours()]}

    part("per_pair", per_pair)

    def live_changes():
        sl = slices.load("UTAH-MASS")
        with EmulatedNetwork(sl, mechanism="netem") as net:
            out = {"slice_rtt_ms": min(ping(net, "vm1", "vm2", 20)["rtt_ms"])}
            net.set_rtt(10.0)
            out["set_rtt_10"] = min(ping(net, "vm1", "vm2", 20)["rtt_ms"])
            net.set_link("vm1", "vm2", up=False)
            down = ping(net, "vm1", "vm2", 5, port=7202, timeout_s=0.5)
            out["down"] = {"returned": len(down["rtt_ms"]), "lost": down["lost"],
                           "counters": net.counters()["vm1>vm2"]}
            net.set_link("vm1", "vm2", up=True)
            out["back_up_rtt_ms"] = min(ping(net, "vm1", "vm2", 20, port=7203)["rtt_ms"])
        return out

    part("live_changes", live_changes)

    def shapes():
        # Loss, Gilbert-Elliott loss, jitter with a distribution and a rate cap, as tc shows them,
        # and what they do to packets.
        clean = slices.load("UTAH-GPN").with_rtt(2.0)
        with EmulatedNetwork(clean, mechanism="netem") as net:
            # The VMs learn each other's MAC on a clean link first: ARP through 30% loss each way
            # can fail for seconds, and the probes sent meanwhile never reach the link (a run
            # counted 76 packets on it for 100 probes, and 18 answers).
            ping(net, "vm1", "vm2", 3)
            net.use_slice(slices.with_link_defaults(clean, loss_percent=30.0))
            # Half the probes are lost, each waited for: 0.15 s is 7 times the slowest round trip
            # seen under TCG on a busy machine (2 ms here + 20), and an answer after it only
            # lowers `returned` (the test also judges the link's own counts).
            result = ping(net, "vm1", "vm2", 100, timeout_s=0.15)
            loss = {"sent": 100, "returned": len(result["rtt_ms"]), "counters": net.counters(),
                    "settings": net.settings()["vm1>vm2"], "qdiscs": qdiscs(net, "vm1")}
        jittery = slices.with_link_defaults(slices.load("UTAH-GPN"), jitter_ms=5.0, jitter_distribution="pareto")
        with EmulatedNetwork(jittery, rtt_ms=20.0, mechanism="netem") as net:
            jitter = {"rtt_ms": ping(net, "vm1", "vm2", 60)["rtt_ms"], "qdiscs": qdiscs(net, "vm1")}
        bursty = slices.with_link_defaults(slices.load("UTAH-GPN"),
                                           loss_gemodel={"p": 1.0, "r": 25.0, "bad_loss": 100.0, "good_loss": 0.0})
        with EmulatedNetwork(bursty, rtt_ms=2.0, mechanism="netem") as net:
            gemodel = {"qdiscs": qdiscs(net, "vm1"), "counters": net.counters()["vm1>vm2"]}
        capped = slices.with_link_defaults(slices.load("UTAH-GPN"), bandwidth_gbps=0.05)
        with EmulatedNetwork(capped, rtt_ms=2.0, mechanism="netem") as net:
            rate = {"cap_bytes_per_s": 0.05e9 / 8, "bytes_per_s": measure_throughput(net, "vm1", "vm2", 2_000_000),
                    "qdiscs": qdiscs(net, "vm1")}
        return {"loss": loss, "jitter": jitter, "gemodel": gemodel, "rate": rate}

    part("shapes", shapes)

    def cli():
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "harness", "emulate", "--slice", "GAT-AMST", "--json",
                               "--transfer-s", "0.2"],  # TCG carries a few MB/s, not 40,
                              capture_output=True, text=True)
        return {"returncode": proc.returncode, "stderr": proc.stderr[-2000:], "wall_s": time.monotonic() - start,
                "report": json.loads(proc.stdout) if proc.returncode == 0 else None}

    part("cli", cli)
    link_leftovers = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    results["leftovers"] = {"netns": netns.ours(),
                            "veths": [line for line in link_leftovers.splitlines() if ": fh" in line]}
    sink.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
