"""The cost model against measured trials: predicted vs measured step time on the emulated slices.

The emulated CPU slices are not in the data sheets, so four figures are taken from the trials
themselves, each from a named trial that is then left out of the comparison:
- a device's sustained FLOP/s: from Data on one VM alone (no link involved), on the first slice;
- the link's effective TCP window: from Data on all VMs of the two-site slice of lowest RTT (the
  window that makes the model's Data step equal the measured one).
- the rate at which a collective moves bytes between VMs and the fixed cost of one: from ZeRO2
  (few collectives, all the gradients) and Shard (a hundred small ones) on all VMs at the lowest
  RTT, solved together; gloo on one core per VM moves bytes far slower than one TCP flow would.
Everything else is predicted: the other techniques, the one-VM runs, the other RTTs. The delay
link's own rate is measured by the run (one TCP flow at no added delay, in each all-VM record's
network section): it bounds the collectives' rate; its MTU is network.MTU; gloo, JAX's CPU
collectives, runs one ring rank per VM (one process each).

Each VM computes at the share of the device rate that its GPU had in the trial (an emulated VM's
CPU quota, harness.backends.emulation.compute; the record's cluster.compute_shares).

The verdict is rank agreement (Spearman) across techniques on each slice and across RTTs for
each technique, and the error of every prediction, in costmodel.md next to the claims; the
calibration trials are left out of both. A prediction's error counts only beyond the noise of
the two measurements it compares (harness.runs.noise, as the claims count a difference): the trial's
own, and the calibration's, from which the prediction was derived. Both are at least the drift of
this run: the model gives every VM of one GPU one device rate, so a technique on one such VM is
one experiment that the run repeated (once per VM and slice, and once more to calibrate), and how
far those repeats moved apart is noise that no model of the slice could explain.
"""
import math
import statistics
from dataclasses import replace

import scipy.optimize
import scipy.stats

from harness.analysis import costmodel
from harness.analysis.netmodel import GLOO_FLOWS_PER_PEER, Network
from harness.backends.emulation.network import MTU
from harness.core.config import GPTConfig, Setup
from harness.paper import claims
from harness.platform import slices
from harness.runs import noise

TCP_HEADERS = 52  # IPv4 + TCP with timestamps
# What the cost model must do against every run's own trials to be believed about the paper's
# (stated before any run, as the validation the suite holds it to): a median absolute error of the
# predicted step time of at most this share, and a rank agreement over the all-VM trials of at least
# RANK_AGREEMENT (among four techniques, 0.8 is one swap of neighbours).
MEDIAN_ERROR = 0.15
RANK_AGREEMENT = 0.9
ROUNDS = 6  # of the joint solve for a collective's rate and fixed cost


def spearman(xs: list[float], ys: list[float]) -> float:
    """Rank agreement; nan where it is undefined (fewer than two points, or all equal)."""
    if len(xs) < 2 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return math.nan
    # A ratio of small integers (ranks) computed in floats: 0.8, one swap among four, came out
    # 0.7999999999999999 and failed a bound of 0.8.
    return round(float(scipy.stats.spearmanr(xs, ys).statistic), 12)


def _model(r: dict) -> GPTConfig:
    m = r["model"]
    return GPTConfig(m["name"], m["n_layer"], m["n_head"], m["n_embd"], m["vocab_size"], m["n_positions"],
                     m["tie_embeddings"])


def _setup(r: dict) -> Setup:
    gpus = r["cluster"]["hosts"] * r["cluster"]["devices_per_host"]
    return Setup(batch_per_gpu=r["batch"]["global_batch"] // gpus, micro_batches=r["batch"]["micro_batches"],
                           precision=r["precision"], remat=False, seq_len=r["batch"]["seq_len"])


def _slice(r: dict, by_name: dict[str, slices.Slice]) -> slices.Slice:
    sl = by_name[r["cluster"]["slice"]]  # the run's own slices: a slice file's is not found by name
    rtt = r["cluster"]["network"]["rtt_ms"]
    return sl.with_rtt(rtt) if rtt is not None else sl


def _predict(r: dict, net: Network, device_flops: float, by_name: dict) -> costmodel.Prediction:
    sl = _slice(r, by_name)
    shaped = [d["bandwidth_gbps"] * 1e9 / 8 for d in (r["cluster"]["network"].get("links") or {}).values()
              if d.get("bandwidth_gbps")]
    if shaped:  # a link given a rate (similarity scaling): its windows queue for it (Network.shaped_bytes_per_s)
        net = replace(net, shaped_bytes_per_s=min(shaped))
    vms = tuple(r["cluster"]["vms_used"])
    devices = costmodel.Devices(tuple(device_flops * share(r, vm) for vm in vms), tuple(1e15 for _ in vms),
                                sl.gpus_per_vm)
    return costmodel.predict(r["technique"], sl, vms, _model(r), _setup(r), net, devices)


def share(r: dict, vm: str) -> float:
    """The share of its cores VM vm computed with in trial r (harness.backends.emulation.compute): its GPU's
    speed against the run's fastest; 1 where the record gives none."""
    return (r["cluster"].get("compute_shares") or {}).get(vm, 1.0)


def _solve(f, target: float, lo: float, hi: float) -> float:
    """x in [lo, hi] where f(x) = target, for f monotonic, searched on a log scale (the unknowns
    span orders of magnitude); the nearer bound when the target lies beyond f's range there."""
    def g(u):
        return f(math.exp(u)) - target

    a, b = math.log(lo), math.log(hi)
    ga, gb = g(a), g(b)
    if ga * gb > 0:
        return lo if abs(ga) < abs(gb) else hi
    return math.exp(scipy.optimize.brentq(g, a, b, xtol=1e-9))


def calibrate(recs: list[dict], by_name: dict[str, slices.Slice], per_tensor: bool = True
              ) -> tuple[Network, float, list[str]]:
    """(network, FLOP/s per device, the trials used) from the records of an emulated run: the
    device rate from Data on one VM; a collective's rate and fixed cost from ZeRO2 and Shard on all
    VMs at the lowest RTT (from ZeRO2 alone, the fixed cost only, where Shard did not run); the
    window from Data on all VMs at the lowest two-site RTT.
    by_name: the run's slices, by the name its records give; per_tensor: the trials ran one
    collective per gradient tensor (Budget.combine off)."""
    ok = [r for r in recs if r["status"] == "ok" and r["timing"]["median_step_s"] and r["cluster"]["slice"]]
    rtt = lambda r: r["cluster"]["network"]["rtt_ms"] or 0.0
    every = sorted((r for r in ok if r["cluster"]["hosts"] > 1), key=rtt)
    single = next(r for r in ok if r["technique"] == "Data" and r["cluster"]["hosts"] == 1)
    device_flops = (single["throughput"]["flops_per_step_alpa"] / single["timing"]["median_step_s"]
                    / single["cluster"]["devices_per_host"] / share(single, single["cluster"]["vms_used"][0]))
    rates = [r["cluster"]["network"].get("link_bytes_per_s") for r in every]
    if not any(rates):
        raise ValueError("the records carry no measured link rate (network.link_bytes_per_s): not an emulated run")
    net = Network(link_bytes_per_s=max(filter(None, rates)), ring_over_devices=False,
                  initial_window_bytes=10 * (MTU - TCP_HEADERS), flows_per_peer=GLOO_FLOWS_PER_PEER,
                  per_tensor=per_tensor, overlaps_compute=False)
    used = [single]
    zero2 = next((r for r in every if r["technique"] == "ZeRO2"), None)
    shard = next((r for r in every if r["technique"] == "Shard"), None)
    if zero2 and shard:
        # ZeRO2 moves all gradients in few collectives, Shard small activations in a hundred: each
        # trial pins mostly one figure, so solving for each in turn settles both in a few rounds.
        top = net.link_bytes_per_s
        for _ in range(ROUNDS):
            rate = _solve(lambda x: _predict(zero2, replace(net, link_bytes_per_s=x), device_flops, by_name).step_s,
                          zero2["timing"]["median_step_s"], 1e6, top)
            net = replace(net, link_bytes_per_s=rate)
            cost = _solve(lambda x: _predict(shard, replace(net, per_collective_s=x), device_flops, by_name).step_s,
                          shard["timing"]["median_step_s"], 1e-7, 1.0)
            net = replace(net, per_collective_s=cost)
        used += [zero2, shard]
    elif zero2:
        cost = _solve(lambda x: _predict(zero2, replace(net, per_collective_s=x), device_flops, by_name).step_s,
                      zero2["timing"]["median_step_s"], 1e-7, 1.0)
        net, used = replace(net, per_collective_s=cost), used + [zero2]
    data = next((r for r in every if r["technique"] == "Data" and rtt(r) >= 1.0), None)
    if data:
        net, used = fit_window(net, device_flops, data, by_name), used + [data]
    return net, device_flops, [label(r) for r in used]


def fit_window(net: Network, device_flops: float, data: dict, by_name: dict[str, slices.Slice]) -> Network:
    """net with the TCP window that makes the model's step of `data` (Data on all VMs, across a
    delay) the measured one."""
    def with_window(w):
        return replace(net, window_bytes=w, initial_window_bytes=min(net.initial_window_bytes, w))

    return with_window(_solve(lambda w: _predict(data, with_window(w), device_flops, by_name).step_s,
                              data["timing"]["median_step_s"], 1e3, 1e9))


def label(r: dict) -> str:
    c = r["cluster"]
    rtt = c["network"]["rtt_ms"]
    everywhere = f"{c['hosts'] * c['devices_per_host']}gpu"
    return (f"{r['technique']}-{c['slice']}-{everywhere if c['hosts'] > 1 else c['vms_used'][0]}"
            + (f" at {rtt:.3g} ms" if c["hosts"] > 1 and rtt is not None else ""))


def _judged(r: dict) -> bool:
    return r["status"] == "ok" and bool(r["timing"]["median_step_s"]) and r["cluster"]["slice"] is not None


def check(recs: list[dict], by_name: dict[str, slices.Slice], per_tensor: bool = True,
          calibration: list[dict] | None = None) -> dict:
    """Predicted vs measured for every successful trial; rank agreement and errors, and each
    error beyond the noise of the trial and of the calibration. calibration: the run's own
    calibration trials (harness.experiments.calibration), so that every trial of recs is judged; without
    them, the trials of recs that calibrate are left out."""
    net, device_flops, used = calibrate(calibration or recs, by_name, per_tensor)
    left_out = [] if calibration else used
    floor = claims.drift(recs + (calibration or []))
    band = lambda r: max(noise.relative(claims.timed(r)), floor)
    calibrating = max(band(r) for r in (calibration or recs) if _judged(r) and label(r) in used)
    rows = []
    for r in filter(_judged, recs):
        p = _predict(r, net, device_flops, by_name)
        measured = r["timing"]["median_step_s"]
        error = p.step_s / measured - 1
        rows.append({"trial": label(r), "technique": r["technique"], "slice": r["cluster"]["slice"],
                     "all_vms": r["cluster"]["hosts"] > 1, "rtt_ms": r["cluster"]["network"]["rtt_ms"],
                     "measured_s": measured, "predicted_s": p.step_s, "error": error,
                     "measured_noise": band(r), "beyond_noise": max(0.0, abs(error) - band(r) - calibrating),
                     "terms_s": p.terms, "calibration": label(r) in left_out})
    judged = [x for x in rows if not x["calibration"]]
    per_slice = {}
    for s in sorted({x["slice"] for x in judged if x["all_vms"]}):
        xs = [x for x in judged if x["slice"] == s and x["all_vms"]]
        per_slice[s] = spearman([x["measured_s"] for x in xs], [x["predicted_s"] for x in xs])
    per_technique = {}
    for t in sorted({x["technique"] for x in judged if x["all_vms"]}):
        xs = [x for x in judged if x["technique"] == t and x["all_vms"]]
        per_technique[t] = spearman([x["measured_s"] for x in xs], [x["predicted_s"] for x in xs])
    every = [x for x in judged if x["all_vms"]]
    return {"calibration": {"device_tflops": device_flops / 1e12, "window_bytes": net.window_bytes,
                            "per_collective_s": net.per_collective_s,
                            "initial_window_bytes": net.initial_window_bytes,
                            "link_bytes_per_s": net.link_bytes_per_s, "from_trials": used,
                            "separate_trials": bool(calibration), "noise": calibrating},
            "drift": floor,
            "rows": rows,
            "spearman_per_slice": per_slice, "spearman_per_technique": per_technique,
            "spearman_all_vms": spearman([x["measured_s"] for x in every], [x["predicted_s"] for x in every]),
            "median_abs_error": statistics.median(abs(x["error"]) for x in judged) if judged else math.nan,
            "median_beyond_noise": statistics.median(x["beyond_noise"] for x in judged) if judged else math.nan}


def validated(result: dict) -> bool:
    """Whether the cost model predicted this run's trials as well as it must: a median error beyond
    the noise of at most MEDIAN_ERROR, and rank agreement of at least RANK_AGREEMENT."""
    return result["median_beyond_noise"] <= MEDIAN_ERROR and result["spearman_all_vms"] >= RANK_AGREEMENT


def extremes_missed(result: dict, slice_name: str) -> list[str]:
    """Where the model names another fastest or slowest technique on all VMs of the slice than was
    measured, and the two measured apart beyond their noise (each one's band, summed)."""
    rows = [x for x in result["rows"] if x["slice"] == slice_name and x["all_vms"]]
    if len(rows) < 2:  # crashed or missing trials are no rows: nothing to rank is no check passed
        return [f"{slice_name}: {len(rows)} trial(s) on all VMs judged, so the model's fastest and slowest "
                "are not checked"]
    missed = []
    for word, pick in (("fastest", min), ("slowest", max)):
        measured, predicted = pick(rows, key=lambda x: x["measured_s"]), pick(rows, key=lambda x: x["predicted_s"])
        apart = abs(predicted["measured_s"] / measured["measured_s"] - 1)
        if apart > measured["measured_noise"] + predicted["measured_noise"]:
            missed.append(f"{slice_name}: the model's {word} is {predicted['technique']}, measured "
                          f"{measured['technique']}, {100 * apart:.0f}% apart")
    return missed


def markdown(result: dict) -> str:
    c = result["calibration"]
    lines = ["# The cost model against the measured trials", "",
             f"Calibrated from {', '.join(c['from_trials'])} "
             + ("(the run's calibration trials, before the sweep; every trial below is judged): "
                if c.get("separate_trials") else "(marked below, left out of the error): ")
             + f"{c['device_tflops'] * 1e3:.3g} GFLOP/s per device, {c['per_collective_s'] * 1e3:.2g} ms per collective, "
             f"collectives at {c['link_bytes_per_s'] / 1e6:.3g} MB/s with no delay, "
             f"effective TCP window {c['window_bytes'] / 1e3:.0f} kB.", "",
             f"- rank agreement (Spearman) over every all-VM trial but the calibration ones: {result['spearman_all_vms']:.2f}",
             "- per slice, across techniques: " + ", ".join(f"{k} {v:.2f}" for k, v in result["spearman_per_slice"].items()),
             "- per technique, across RTTs: " + ", ".join(f"{k} {v:.2f}" for k, v in result["spearman_per_technique"].items()),
             f"- median absolute error of the predicted step time: {100 * result['median_abs_error']:.0f}%; "
             f"beyond the noise: {100 * result['median_beyond_noise']:.0f}% (each trial's noise at least the run's "
             f"drift between repeats, {100 * result['drift']:.1f}%, plus the calibration's, {100 * c['noise']:.1f}%)",
             f"- validation: {'holds' if validated(result) else 'FAILS'} (median error beyond the noise at most "
             f"{100 * MEDIAN_ERROR:.0f}%, rank agreement over the all-VM trials at least {RANK_AGREEMENT})", "",
             "| trial | RTT ms | measured s | noise | predicted s | error | beyond noise | compute | collectives | bubble | transfers |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in result["rows"]:
        t = x["terms_s"]
        rtt = f"{x['rtt_ms']:.1f}" if x["rtt_ms"] is not None else ""
        lines.append(f"| {x['trial']}{' (calibration)' if x['calibration'] else ''} | {rtt} | {x['measured_s']:.3g} | "
                     f"±{100 * x['measured_noise']:.0f}% | {x['predicted_s']:.3g} | {100 * x['error']:+.0f}% | "
                     f"{100 * x['beyond_noise']:.0f}% | {t['compute']:.3g} | {t['collectives']:.3g} | "
                     f"{t['pipeline_bubble']:.3g} | {t['pipeline_transfers']:.3g} |")
    return "\n".join(lines) + "\n"
