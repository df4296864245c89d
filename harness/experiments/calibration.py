"""The links a run's trials go through: the paper's own (literal) or links made similar to them.

Similarity scaling (similarity.py) sets each slice's emulated RTT and rate so that the scale model
splits its steps as gpt2m did on the paper's GPUs, on VMs whose TCP buffers give its gradients as
many windows to cross as gpt2m's had (tcp_buffer_bytes: set when the VMs are made, for the whole
run). That needs what this machine does, not what it is assumed to do, so before the sweep four
calibration trials run on the first slice's VMs, each
pinning mostly one figure of the cost model (costmodel_check.calibrate reads them):
- Data on the first VM alone: a device's FLOP/s;
- ZeRO2 on all VMs with no delay added: the rate at which a collective moves bytes between VMs
  (gloo on one core per VM moves them far slower than one TCP flow carries them);
- Shard on all VMs with no delay added (a hundred small collectives a step): the fixed cost of one;
- Data on all VMs at CALIBRATION_RTT_MS: the TCP window one flow of the collectives keeps;
then, on each two-site slice, Data on the link solved so far, until the link settles (at most
REFINE_ROUNDS times; see there).
Their compiled steps are the sweep's, so they cost a few steps each. Their records are kept apart
from the claims' trials (calibration.jsonl in the report) and every trial record carries its
slice's paper link and the link it ran on (network.scaling).
"""
import dataclasses
from dataclasses import dataclass

from harness.analysis import costmodel, costmodel_check, similarity
from harness.analysis.netmodel import TCP_ADV_WIN_SCALE, Network
from harness.core import flops
from harness.core.config import GPTConfig, Setup, Technique, compute_dtype, model_config
from harness.errors import BadInput
from harness.platform.slices import Slice
from harness.runs import records
from harness.runs.trials import ALL_VMS, Runner, Trial

LITERAL, SIMILARITY = "literal", "similarity"
MODES = (SIMILARITY, LITERAL)
# The first window is measured near Table I's nearest two-site slice (UTAH-GPN's RTT, resources/slices).
CALIBRATION_RTT_MS = 20.0
# What a flow keeps in flight depends on the RTT it runs at (with the kernel's buffers it grows with
# the RTT; scaled buffers cap it; similarity.json records the window). So a two-site slice's link
# is found in a closed loop: Data runs on the link solved so far, the window is refit there, and the link
# is solved again.
REFINE_ROUNDS = 2
SETTLED = 0.05  # the loop stops once a round moves the RTT by less than this share
TWO_SITE_MS = 1.0  # a slice whose VMs are this far apart in the paper is at two sites (claims.two_site)
# The paper's side of the groups: gpt2m, the model of the paper's timing tables, at the claims' setup.
PAPER_MODEL = "gpt2m"
# Bounds of the emulated link: the delay link's rate shaping is exact from 1 MB/s, and an RTT over
# a second would make Shard's trial (hundreds of round trips a step) take hours.
RTT_BOUNDS_MS = (0.05, 1000.0)
LOWEST_RATE = 1e6
# Four segments of the emulated link's MTU: below it a window holds too few segments for TCP's ACK
# clock (delayed ACKs would set the pace, not the window).
MIN_TCP_BUFFER = 2 * 4 * 9000


class CalibrationFailed(RuntimeError):
    pass


@dataclass
class Scaling:
    mode: str
    scaled: list  # similarity.Scaled per slice (empty when literal)
    calibration: dict | None = None  # the cost model's figures and the trials they came from
    network: object = None  # netmodel.Network of those figures

    def to_dict(self) -> dict:
        return {"mode": self.mode, "calibration": self.calibration, "slices": [s.to_dict() for s in self.scaled]}


def tcp_buffer_bytes(cfg, sl: Slice) -> int:
    """The VMs' TCP buffers at which the scale model `cfg`'s gradients cross a ring edge in as many
    TCP windows as gpt2m's did on the paper's stack (NCCL's ring over every GPU, the stock
    window): the group that sets how many round trips a step's gradients take. A window is half
    the buffer (tcp_adv_win_scale); the buffer is at least MIN_TCP_BUFFER."""
    def per_edge(model, ranks: int) -> float:
        return 2 * (ranks - 1) / ranks * 4 * flops.param_count(model)

    windows = per_edge(model_config(PAPER_MODEL), len(sl.vms) * sl.gpus_per_vm) / Network().peer_window_bytes
    window = per_edge(cfg, len(sl.vms)) / windows  # gloo: one ring rank per VM
    return max(MIN_TCP_BUFFER, round(2**TCP_ADV_WIN_SCALE * window))


def extra_trials(slices: list[Slice]) -> int:
    """The most calibration trials one technique runs on one set of VMs (Data on all VMs: one,
    and one per round on each two-site slice): the optimizer schedule spans them."""
    return 1 + REFINE_ROUNDS * sum(sl.rtt_ms >= TWO_SITE_MS for sl in slices)


def calibration_trials(sl: Slice) -> list[tuple[Slice, Trial]]:
    """(the link it runs on, the trial), in the order they run."""
    return [(sl.with_rtt(0.0), Trial.on(sl, Technique.DATA, sl.vms[0].name)),
            (sl.with_rtt(0.0), Trial.on(sl, Technique.ZERO2)),
            (sl.with_rtt(0.0), Trial.on(sl, Technique.SHARD)),
            (sl.with_rtt(CALIBRATION_RTT_MS), Trial.on(sl, Technique.DATA))]


@dataclass(frozen=True)
class ScaleModel:
    """The run's trials as the cost model describes them: the scale model, its setup, whether each
    gradient tensor crossed as a collective of its own, and each slice's VMs' shares of their
    cores (harness.backends.emulation.compute). Made from the runner as a run goes, or from the
    run's records when it is judged again (harness.experiments.rejudge)."""
    cfg: GPTConfig
    setup: Setup
    per_tensor: bool
    shares: dict  # slice name -> {vm: share}; a VM not named computes at full speed

    @classmethod
    def of_runner(cls, runner: Runner) -> "ScaleModel":
        b = runner.budget
        return cls.of(runner.model_cfg, b.batch_per_gpu, b.micro_batches, b.combine,
                      {name: runner.compute_shares(name) for name in runner.paper_slices})

    @classmethod
    def of_records(cls, trials: list[dict], budget: dict) -> "ScaleModel":
        """From the run's trial records and its budget's fields (claims.json's context)."""
        shares = {}
        for r in trials:
            shares.setdefault(r["cluster"]["slice"], {}).update(r["cluster"].get("compute_shares") or {})
        cfg = dataclasses.replace(model_config(budget["model"]), dtype=compute_dtype(budget["precision"]))
        return cls.of(cfg, budget["batch_per_gpu"], budget["micro_batches"], budget["combine"], shares)

    @classmethod
    def of(cls, cfg: GPTConfig, batch_per_gpu: int, micro_batches: int, combine: bool, shares: dict) -> "ScaleModel":
        return cls(cfg, Setup(batch_per_gpu=batch_per_gpu, micro_batches=micro_batches, precision=cfg.dtype,
                              seq_len=cfg.n_positions), not combine, shares)

    def devices(self, sl: Slice, device_flops: float) -> costmodel.Devices:
        """The slice's VMs, each computing at device_flops times its share, as the run's VMs do."""
        shares = self.shares.get(sl.name, {})
        return costmodel.Devices(tuple(device_flops * shares.get(vm.name, 1.0) for vm in sl.vms),
                                 (1e15,) * len(sl.vms), sl.gpus_per_vm)


def literal_link(sl: Slice) -> dict:
    return {"mode": LITERAL, "paper_rtt_ms": sl.rtt_ms, "paper_bandwidth_gbps": sl.bandwidth_gbps,
            "rtt_ms": sl.rtt_ms, "bandwidth_gbps": sl.bandwidth_gbps}


def scaled_slice(sl: Slice, s: similarity.Scaled, net: Network) -> Slice:
    """The paper's slice on the scaled link: its RTT (every pair's in proportion), and its rate
    unless the collectives carry about that anyway (similarity.shaped), on every link: a [[link]]
    table's own rate is the paper's NIC, which the scaled rate stands for."""
    rate = similarity.shaped(net, s.link_bytes_per_s)
    at = sl.scaled_to(s.rtt_ms)
    directions = tuple((x, y, tuple((k, v) for k, v in given if k != "bandwidth_gbps"))
                       for x, y, given in at.directions)
    return dataclasses.replace(at, bandwidth_gbps=rate * 8 / 1e9 if rate else None, directions=directions)


def apply(runner: Runner, mode: str, keep) -> Scaling:
    """Put the runner's slices on their links: literal leaves the paper's; similarity runs the
    calibration trials (their records to keep(record)) and scales every slice's link."""
    if mode not in MODES:
        raise BadInput(f"link scaling: expected one of {', '.join(MODES)}, got {mode!r}")
    if mode == LITERAL:
        for sl in runner.paper_slices.values():
            runner.scaling[sl.name] = literal_link(sl)
        return Scaling(LITERAL, [])
    base = next(iter(runner.paper_slices.values()))
    recs = []
    for link, trial in calibration_trials(base):
        runner.set_slice(link)
        recs.append(runner.measure(trial, keep))
    runner.set_slice(base)
    failed = [f"{r['technique']} on {'+'.join(r['cluster']['vms_used'])}: {r['status']} ({r['reason']})"
              for r in recs if r["status"] != "ok"]
    if failed:
        raise CalibrationFailed("a calibration trial failed, so no link can be scaled: " + "; ".join(failed))
    model = ScaleModel.of_runner(runner)
    scaling = from_records(model, recs, runner.paper_slices, SIMILARITY, getattr(runner.cluster, "tcp_buffer_bytes", None))
    net, device_flops = scaling.network, scaling.calibration["device_flops"]
    for i, sl in enumerate(runner.paper_slices.values()):
        s, here = scaling.scaled[i], net
        for _ in range(REFINE_ROUNDS if sl.rtt_ms >= TWO_SITE_MS else 0):
            runner.set_slice(scaled_slice(sl, s, net))
            record = runner.measure(Trial.on(sl, Technique.DATA), keep)
            if record["status"] != "ok":
                raise CalibrationFailed(f"Data on {sl.name}'s scaled link failed, so it cannot be refined: "
                                        f"{record['status']} ({record['reason']})")
            here = costmodel_check.fit_window(net, device_flops, record, runner.paper_slices)
            before, s = s, scale_one(model, sl, here, device_flops)
            scaling.calibration["from_trials"].append(costmodel_check.label(record))
            scaling.calibration["window_bytes_on"][sl.name] = here.window_bytes
            if abs(s.rtt_ms / before.rtt_ms - 1) < SETTLED:
                break
        at = scaled_slice(sl, s, net)
        scaling.scaled[i] = ran_on(model, sl, here, device_flops, at.rtt_ms, at.bandwidth_gbps)
        runner.set_slice(at)
        runner.scaling[sl.name] = {"mode": SIMILARITY, "paper_rtt_ms": sl.rtt_ms,
                                   "paper_bandwidth_gbps": sl.bandwidth_gbps, "rtt_ms": at.rtt_ms,
                                   "bandwidth_gbps": at.bandwidth_gbps,
                                   "tcp_buffer_bytes": scaling.calibration["tcp_buffer_bytes"]}
    return scaling


def scale_one(model: ScaleModel, sl: Slice, net, device_flops: float) -> similarity.Scaled:
    """The link on which the scale model has sl's groups."""
    return similarity.scale(sl, model_config(PAPER_MODEL), Setup(), model.cfg, model.setup, net,
                            model.devices(sl, device_flops), rtt_ms=RTT_BOUNDS_MS, rate=(LOWEST_RATE, net.link_bytes_per_s))


def ran_on(model: ScaleModel, sl: Slice, net, device_flops: float, rtt_ms: float,
           bandwidth_gbps: float | None) -> similarity.Scaled:
    """The groups on the link the trials ran on: its RTT, and its rate where it was shaped; a link
    left unshaped (scaled_slice) carried its own rate, as calibrated (net), not the one the solver
    came near. A rate the records give was set on the link, so its windows queue for it whatever
    the rate, as costmodel_check prices the trials on it."""
    rate = bandwidth_gbps * 1e9 / 8 if bandwidth_gbps else net.link_bytes_per_s
    return similarity.on_link(sl, model_config(PAPER_MODEL), Setup(), model.cfg, model.setup, net,
                              model.devices(sl, device_flops), rtt_ms, rate, shaped_to=bool(bandwidth_gbps))


def from_records(model: ScaleModel, recs: list[dict], paper_slices: dict[str, Slice], mode: str,
                 tcp_buffer_bytes: int | None = None) -> Scaling:
    """The links similarity scaling gives the slices, from the cost model calibrated on recs (the
    calibration trials, or a literal run's own: costmodel_check.calibrate picks the same four), in
    one pass: with the window measured at one RTT."""
    net, device_flops, used = costmodel_check.calibrate(recs, paper_slices, per_tensor=model.per_tensor)
    scaled = [scale_one(model, sl, net, device_flops) for sl in paper_slices.values()]
    return Scaling(mode, scaled, _figures(net, device_flops, used, tcp_buffer_bytes), net)


def _figures(net: Network, device_flops: float, used: list[str], tcp_buffer_bytes: int | None) -> dict:
    """The links document's calibration: the cost model's figures and the trials they came from."""
    return {"device_flops": device_flops, "per_collective_s": net.per_collective_s,
            "tcp_buffer_bytes": tcp_buffer_bytes, "window_bytes": net.window_bytes,
            "link_bytes_per_s": net.link_bytes_per_s, "per_tensor": net.per_tensor, "from_trials": used,
            "window_bytes_on": {}}  # slice -> the window refit on its scaled link


def check_calibration(recs: list[dict], paper_slices: dict[str, Slice]) -> None:
    """Raises ValueError, naming the record, unless recs are the calibration trials as apply runs
    them: the four of calibration_trials on the first slice, then at most REFINE_ROUNDS of Data on
    all VMs per two-site slice, every one of them ok."""
    base = next(iter(paper_slices.values()))
    planned = calibration_trials(base)
    if len(recs) < len(planned):
        raise ValueError(f"a run on similarity-scaled links has at least {len(planned)} calibration trials, got {len(recs)}")
    refined: dict[str, int] = {}
    for i, r in enumerate(recs):
        c = r["cluster"]
        where = f"calibration trial {i + 1} ({r['technique']} on {c['hosts']} VMs of {c['slice']}, {r['status']})"
        if i < len(planned):
            _, trial = planned[i]
            want = (trial.technique, len(base.vms) if trial.vms == ALL_VMS else 1, base.name)
        else:
            n = refined[c["slice"]] = refined.get(c["slice"], 0) + 1
            sl = paper_slices.get(c["slice"])
            if sl is None or sl.rtt_ms < TWO_SITE_MS or n > REFINE_ROUNDS:
                raise ValueError(f"{where}: a run refines only a two-site slice's link, at most {REFINE_ROUNDS} times")
            want = (Technique.DATA, len(base.vms), c["slice"])
        if (r["technique"], c["hosts"], c["slice"]) != want or r["status"] != "ok":
            raise ValueError(f"{where}: a run's is {want[0]} on {want[1]} VMs of {want[2]}, ok")


def set_to_its_rate(r: dict, scaling: dict, sl: Slice | None) -> None:
    """Raise ValueError where a trial across VMs names a direction of its link set to another rate
    than its scaling sets there. The groups are read from the scaling, the trials' cost from the
    rates the links were set to (costmodel_check): a scaled link is set to its scaled rate in every
    direction, a literal one to its slice's own. A direction whose settings are gone is priced on
    no rate, so it counts as set to none."""
    vms = r["cluster"]["vms_used"] or []
    links = r["cluster"]["network"].get("links") or {}
    for a, b in [(a, b) for a in vms for b in vms if a != b] if r["cluster"]["hosts"] > 1 else []:
        if scaling["mode"] == SIMILARITY:
            expected = scaling.get("bandwidth_gbps")
        elif sl is not None:
            expected = sl.shape(a, b).bandwidth_gbps
        else:
            return  # a slice the run does not name: refused where the trials are judged
        got = (links.get(f"{a}>{b}") or {}).get("bandwidth_gbps")
        if got != expected:
            raise ValueError(f"a trial on {r['cluster']['slice']} names its {scaling['mode']} link {a}>{b} set to "
                             f"{got} Gbit/s where its scaling sets {expected} Gbit/s; a run sets every direction "
                             "to the rate its link was made with")


def from_run(model: ScaleModel, trials: list[dict], calibration_recs: list[dict],
             paper_slices: dict[str, Slice]) -> Scaling | None:
    """A finished run's links document worked out again from its records alone: what a declared
    limit's mechanism reads when the run is judged again, so that no figure of it rests on a
    similarity.json that its records do not give. None for a run whose trials name no scaled or
    literal emulated link (a GPU or a live slice).

    On literal links, as the run worked it out (from_records on its trials). On similarity-scaled
    links, the cost model calibrated on the first calibration trials, each two-site slice's window
    refit on the last of its refining trials (apply), and each slice's groups on the link its trials
    ran on, as their records give it: its RTT, and its rate where the link was shaped (else the
    link's own, as calibrated). Raises ValueError where the records cannot give them."""
    links = {}  # slice -> the scaling its trials' records name
    for r in trials:
        scaling = r["cluster"]["network"].get("scaling")
        if scaling:
            if links.setdefault(r["cluster"]["slice"], scaling) != scaling:
                raise ValueError(f"the trials on {r['cluster']['slice']} name different links: "
                                 f"{links[r['cluster']['slice']]} and {scaling}")
            set_to_its_rate(r, scaling, paper_slices.get(r["cluster"]["slice"]))
    if not links:
        return None
    modes = {s["mode"] for s in links.values()}
    if len(modes) > 1 or set(links) != set(paper_slices):
        raise ValueError(f"expected every slice's trials on one kind of link, got {sorted(modes)} "
                         f"on {sorted(links)} of {sorted(paper_slices)}")
    (mode,) = modes
    buffers = next(iter(links.values())).get("tcp_buffer_bytes")
    if mode == LITERAL:
        return from_records(model, trials, paper_slices, LITERAL, buffers)
    first = len(calibration_trials(next(iter(paper_slices.values()))))
    check_calibration(calibration_recs, paper_slices)
    # The calibration prices the trials' model: a calibration trial of another one would misprice it.
    records.one_experiment([*trials[:1], *calibration_recs])
    net, device_flops, used = costmodel_check.calibrate(calibration_recs[:first], paper_slices, per_tensor=model.per_tensor)
    calibration = _figures(net, device_flops, used, buffers)
    scaled = []
    for sl in paper_slices.values():
        here, refined = net, [r for r in calibration_recs[first:] if r["cluster"]["slice"] == sl.name]
        if refined:
            here = costmodel_check.fit_window(net, device_flops, refined[-1], paper_slices)
            calibration["from_trials"] += [costmodel_check.label(r) for r in refined]
            calibration["window_bytes_on"][sl.name] = here.window_bytes
        scaled.append(ran_on(model, sl, here, device_flops, links[sl.name]["rtt_ms"], links[sl.name].get("bandwidth_gbps")))
    return Scaling(SIMILARITY, scaled, calibration, net)
