"""Trials: one technique on one slice, on all its VMs or on one, trained for a short budget and timed.

A trial runs real training steps on a cluster (harness.backends.contract.Cluster): worker
processes, one per VM, that bring up jax.distributed and keep each technique's compiled step
alive. The slices of one run differ only in their links and GPU types (Table I: two VMs of two
GPUs each), so one cluster serves them all: before a slice's trials the cluster is given that
slice's links (an emulated one sets them; a live one has its own) and its RTT is measured, and
every compiled step is reused across the sweep. Where the clusters come from: harness.suite.backends.

Per trial: `warmup_steps` untimed steps, then `repeats` timed steps, one at a time (Runner.step), so
that a caller (pytest-benchmark's pedantic mode) can time each round. The record keeps every step time; its
median is the trial's step time, its spread the noise the claims weigh differences against. A
trial that cannot be built or fails mid-way is a record with status oom or error (the paper's x).
"""
import contextlib
import dataclasses
from dataclasses import dataclass, field

from harness.analysis import gpu_compiler, memory
from harness.backends.contract import Cluster, Failed, GroupLost
from harness.core import data, train
from harness.core.config import Budget, Setup, Technique, TrainConfig
from harness.errors import BadInput
from harness.platform.slices import Slice, one_shape
from harness.runs import jobs, records
from harness.runs.jobs import Job
from harness.techniques import ClusterShape, mesh_shape, technique_class
from harness.techniques.contract import player

ALL_VMS = "all"


@dataclass(frozen=True)
class Trial:
    technique: str
    slice: str
    vms: str  # ALL_VMS, or the name of the one VM used
    gpus: int  # how many it trains on, which the label of a trial on all VMs names, as the paper does

    @classmethod
    def on(cls, sl: Slice, technique: str, vm: str = ALL_VMS) -> "Trial":
        used = [v for v in sl.vms if vm in (ALL_VMS, v.name)]
        if not used:
            raise BadInput(f"trial {technique}-{sl.name}-{vm}: the slice has no VM {vm!r} "
                           f"(it has {', '.join(v.name for v in sl.vms)})")
        return cls(technique, sl.name, vm, sum(v.gpus for v in used))

    @property
    def label(self) -> str:
        return f"{self.technique}-{self.slice}-{f'{self.gpus}gpu' if self.vms == ALL_VMS else self.vms}"


def trials_for(sl: Slice, one_vm: list[str] | None = None) -> list[Trial]:
    """Every technique on all VMs, and on each VM of one_vm alone (default: every VM)."""
    one_vm = [vm.name for vm in sl.vms] if one_vm is None else one_vm
    return ([Trial.on(sl, t) for t in Technique]
            + [Trial.on(sl, t, vm) for vm in one_vm for t in Technique])


@dataclass
class TrialResult:
    """What a trial has done so far, as plain data: Runner.prepare() makes it, Runner.step() adds
    a timed step to it, Runner.record() turns it into a trial record."""
    trial: Trial
    info: dict = field(default_factory=dict)  # compile time, plan, bytes from the build
    losses: list = field(default_factory=list)
    step_times_s: list = field(default_factory=list)
    status: str = "ok"
    reason: str | None = None
    packets: dict | None = None  # what the emulated link did during the timed steps (its counters)
    peak_bytes: int | None = None  # the allocator's peak on the fullest device of the trial's processes
    peak_own: bool = False  # whether this trial's steps set that peak (not an earlier trial of the group)

    def fail(self, status: str, reason: str) -> "TrialResult":
        self.status, self.reason = status, reason
        return self


def _difference(after: dict | None, before: dict | None) -> dict | None:
    return None if after is None or before is None else {k: n - before.get(k, 0) for k, n in after.items()}


class Runner:
    """The books of a sweep of trials on one cluster (harness.backends.contract.Cluster): what each
    trial is made of, what was built and on which VMs, the losses of every compiled step, the RTT
    of each slice, and the trials' records. The cluster does the work."""

    def __init__(self, cluster: Cluster | None, slices: list[Slice], budget: Budget, calibration_trials: int = 0,
                 held_out: float | None = None, schedule_steps: int | None = None, options: dict | None = None,
                 memory_compiler: str = "auto"):
        """cluster: None for a runner that only makes trials' configurations and records (tests).
        calibration_trials: trials some technique runs before the sweep (harness.experiments.calibration),
        which the optimizer schedule spans. held_out: the fraction of the corpus every step keeps
        apart, never training on it, for held_out_loss (None: it trains on all of it).
        schedule_steps: the optimizer schedule's length where a caller trains longer than the
        sweep's trials (harness.experiments.time_to_loss). options: technique -> its options beyond
        the budget's (DiLoCo's sync_every, say). memory_compiler: what compiles the paper's
        program where a trial runs out of memory (papers_program): auto, cpu or gpu."""
        if memory_compiler not in gpu_compiler.COMPILERS:
            raise BadInput(f"memory_compiler must be one of {', '.join(gpu_compiler.COMPILERS)}, got {memory_compiler!r}")
        self.options = options or {}
        self.memory_compiler = memory_compiler
        self.cluster, self.budget, self.held_out = cluster, budget, held_out
        self.slices = {sl.name: sl for sl in slices}  # the links the trials run on (set_slice changes them)
        self.paper_slices = dict(self.slices)  # the slices as given: the paper's links
        self.scaling: dict[str, dict] = {}  # slice -> how its link was scaled (harness.experiments.calibration)
        self.devices_per_host = one_shape(slices)[0].gpus_per_vm
        self.model_cfg = budget.model_cfg
        self.built: dict[tuple, dict | Failed] = {}  # (VMs, technique) -> build answer or failure
        self.rtt_ms: dict[str, float] = {}  # measured, per slice
        # The optimizer schedule spans the whole sweep (each slice's warm-up and timed steps, and
        # a calibration trial before them), so the losses of every compiled step, warm-up included
        # (history), are a prefix of a plain run of that length: the single-device reference
        # checks them.
        self.schedule_steps = schedule_steps or (budget.warmup_steps + budget.repeats) * (len(slices) + calibration_trials)
        self.history: dict[tuple, list[float]] = {}  # (VMs, technique) -> every loss, in order
        self.peaks: dict[tuple, int | None] = {}  # VMs -> the allocator's peak their processes last reported
        self._references: dict[int, list[float]] = {}  # VMs used -> the single-device losses
        self.current_slice: str | None = None
        self.corpus = data.load_corpus()

    # -- what a trial is made of --------------------------------------------------------------
    def vms_of(self, trial: Trial) -> list[str]:
        sl = self.slices[trial.slice]
        return [vm.name for vm in sl.vms] if trial.vms == ALL_VMS else [trial.vms]

    def shape(self, trial: Trial) -> tuple[int, int]:
        """(hosts, devices per host) of the technique's mesh (techniques.mesh_shape)."""
        shape = mesh_shape(trial.technique, len(self.vms_of(trial)), self.devices_per_host)
        return shape.hosts, shape.devices_per_host

    def train_config(self, trial: Trial) -> TrainConfig:
        return self.train_config_for(len(self.vms_of(trial)))

    def train_config_for(self, n_vms: int) -> TrainConfig:
        return TrainConfig(batch_size=self.budget.batch_per_gpu * n_vms * self.devices_per_host)

    def reference_losses(self, n_vms: int) -> list[float]:
        """The single-device trainer's losses over the whole schedule on the batch of n_vms VMs:
        the history of every compiled step on that many VMs is a prefix of them."""
        if n_vms not in self._references:
            cfg = dataclasses.replace(self.train_config_for(n_vms), steps=self.schedule_steps)
            self._references[n_vms] = train.train(self.model_cfg, cfg, self.training_data(cfg)).losses
        return self._references[n_vms]

    def training_data(self, cfg: TrainConfig) -> data.PackedCorpus:
        """What a step of batch cfg.batch_size trains on: the corpus, less what is held out."""
        packed = data.prepare(self.model_cfg.vocab_size, cfg.resolved_seq_len(self.model_cfg), cfg.batch_size,
                              self.corpus)
        return data.held_out(packed, self.held_out, cfg.batch_size)[0] if self.held_out is not None else packed

    def job(self, trial: Trial) -> Job:
        hosts, devices = self.shape(trial)
        options = {"micro_batches": self.budget.micro_batches}
        if technique_class(trial.technique).combines:
            options["combine"] = self.budget.combine
        options.update(self.options.get(trial.technique, {}))
        return Job(player(trial.technique), dataclasses.asdict(self.model_cfg), hosts, devices,
                   train=dataclasses.asdict(self.train_config(trial)), options=options,
                   full_fp32=self.budget.precision == "float32-full", held_out=self.held_out)

    def method(self, trial: Trial):
        """The technique as this runner builds the trial's step, its options included."""
        return jobs.method(self.job(trial))

    # -- running ------------------------------------------------------------------------------
    def prepare(self, trial: Trial, fresh: bool = False) -> TrialResult:
        """Compile (once per technique and set of VMs), set the network for this trial's slice and
        run the warm-up steps; a trial that cannot be built or warmed up comes back failed.
        fresh: a step that has trained starts over from its untrained state (its compile kept)."""
        if trial.slice not in self.slices:
            raise BadInput(f"trial {trial.label}: slice {trial.slice!r} is not one of this run's "
                           f"({', '.join(self.slices)})")
        vms, key = tuple(self.vms_of(trial)), trial.technique
        result = TrialResult(trial)
        self._hold(vms)
        result.peak_bytes = self.peaks.get(vms)  # before this trial: what its group's earlier trials set
        if (vms, key) not in self.built:
            try:
                self.built[(vms, key)] = self.cluster.build(vms, key, self.job(trial).to_dict(), self.schedule_steps)
            except GroupLost as e:
                self._forget(vms)
                return result.fail(e.status, e.reason)
            except Failed as e:
                self.built[(vms, key)] = e
        built = self.built[(vms, key)]
        if isinstance(built, Failed):
            return result.fail(built.status, built.reason)
        result.info = built
        try:
            if fresh and self.history.get((vms, key)):
                self._restart(vms, key)
            if len(vms) > 1:
                self._use_slice(trial.slice)
            self._steps(trial, self.budget.warmup_steps)  # after a change of RTT too: TCP settles first
        except Failed as e:
            result.fail(e.status, e.reason)
        return result

    def step(self, result: TrialResult) -> float:
        """One timed step of a prepared trial, added to its result: its time."""
        losses, times = self._steps(result.trial, 1)
        result.losses += losses
        result.step_times_s += times
        return times[0]

    def _restart(self, vms: tuple, key: str) -> None:
        try:
            self.cluster.restart(vms, key)
        except GroupLost:
            self._forget(vms)
            raise
        self.history[(vms, key)] = []

    def _steps(self, trial: Trial, n: int) -> tuple[list[float], list[float]]:
        vms = tuple(self.vms_of(trial))
        self._hold(vms)
        try:
            first = self.cluster.steps(vms, trial.technique, n)
        except GroupLost:
            self._forget(vms)
            raise
        self.history.setdefault((vms, trial.technique), []).extend(first["losses"])
        self.peaks[vms] = first.get("peak_bytes")
        return first["losses"], first["step_times_s"]

    def measure(self, trial: Trial, keep, time_steps=None) -> dict:
        """Prepare the trial and time its steps (time_steps(result); by default `repeats` calls of
        step). Its record goes to keep(record) and is returned, also when the trial fails; when the
        user interrupts it, the record so far goes to keep and the interrupt goes on."""
        result, interrupted = TrialResult(trial), None
        try:
            result = self.prepare(trial)
            if result.status == "ok":
                before = self.counters(trial)
                (time_steps or self._repeat)(result)
                result.packets = _difference(self.counters(trial), before)
                self._peak(result)
        except Failed as e:
            result.fail(e.status, e.reason)
        except KeyboardInterrupt as e:
            interrupted = e
            result.fail(*records.failure(e))
        try:
            record = self.record(result)
        except KeyboardInterrupt as e:  # while an out of memory compiled the paper's program (papers_program)
            interrupted = e
            record = self.record(result.fail(*records.failure(e)))
        keep(record)
        if interrupted is not None:
            raise interrupted
        return record

    def held_out_loss(self, trial: Trial) -> float:
        """The loss on the held-out blocks of the model the trial's step has trained so far (the
        runner's held_out must be set). Raises Failed."""
        vms = tuple(self.vms_of(trial))
        self._hold(vms)
        try:
            return self.cluster.held_out_loss(vms, trial.technique)
        except GroupLost:
            self._forget(vms)
            raise

    def _peak(self, result: TrialResult) -> None:
        """The allocator keeps one peak for a process's life: it is this trial's own where its
        steps raised it above what the group's earlier trials left (or the group is new)."""
        before, after = result.peak_bytes, self.peaks.get(tuple(self.vms_of(result.trial)))
        result.peak_bytes, result.peak_own = after, after is not None and (before is None or after > before)

    def counters(self, trial: Trial) -> dict | None:
        """The link's packet counters between the trial's VMs (Cluster.counters); None: not counted."""
        return self.cluster.counters(tuple(self.vms_of(trial)))

    def _repeat(self, result: TrialResult) -> None:
        for _ in range(self.budget.repeats):
            self.step(result)

    def _hold(self, vms: tuple) -> None:
        """Where the cluster's groups cannot share its GPUs, release every other group first; what
        was built on them is built again when they come back."""
        if self.cluster is None or not self.cluster.one_group_at_a_time:
            return
        for other in {k[0] for k in self.built} - {vms}:
            self.cluster.release(other)
            self._forget(other)

    def _forget(self, vms: tuple) -> None:
        """The cluster lost the group of vms: its next use builds anew, and its new workers start over."""
        self.built = {k: v for k, v in self.built.items() if k[0] != vms}
        self.history = {k: v for k, v in self.history.items() if k[0] != vms}
        self.peaks.pop(vms, None)

    def set_slice(self, sl: Slice) -> None:
        """Run the trials of slice sl.name on this link from now on (same VMs)."""
        if sl.name not in self.slices or [vm.name for vm in sl.vms] != [vm.name for vm in self.slices[sl.name].vms]:
            raise ValueError(f"slice {sl.name} is not one of this run's, or has other VMs")
        self.slices[sl.name] = sl
        if self.current_slice == sl.name:
            self.current_slice = None  # applied again, and its RTT measured again, before the next trial

    def _use_slice(self, name: str) -> None:
        if self.current_slice == name:
            return
        sl = self.slices[name]
        self.cluster.use_slice(sl)
        first, last = sl.farthest_pair  # the RTT the slice is known by
        self.rtt_ms[name] = self.cluster.rtt_ms(first, last)
        self.current_slice = name

    def papers_program(self, trial: Trial) -> dict | None:
        """Where the trial's timed step is not the program the paper's stack compiled (its
        technique's memory programs: Pipeshard's one per stage, as Alpa's), what that program needs
        per GPU, compiled, not run, for the GPUs the trial's VMs stand for, by this run's memory
        compiler (gpu_compiler.choose); None where the timed step is that program. Asked only of a
        trial out of memory, whose x it decides (records.not_the_papers_x)."""
        tech, shape = self.method(trial), ClusterShape(*self.shape(trial))
        if tech.stage_programs(self.model_cfg, shape, self.train_config(trial)) is None:
            return None
        used = [vm.gpu for vm in self.paper_slices[trial.slice].vms if vm.name in self.vms_of(trial)]
        gpus = memory.gpus_of_rows(used, shape.hosts)
        setup = Setup(batch_per_gpu=self.budget.batch_per_gpu, micro_batches=self.budget.micro_batches)
        try:
            with gpu_compiler.choose(self.memory_compiler) or contextlib.nullcontext() as compiler:
                need = memory.compiled_with(compiler, tech, self.model_cfg, shape, setup, gpus)
        except Exception as e:  # not known is not the paper's x: the trial is then a harness error
            return {"bytes_per_row": None, "gpus": gpus, "source": None, "reason": records.failure(e)[1]}
        rows = need.get("bytes_per_stage") or [need["bytes_per_device"]] * shape.hosts
        by = "XLA's GPU compiler" if compiler else "XLA's CPU compiler (an estimate of a GPU's need)"
        program = need["plan"].splitlines()[0].rstrip(":")
        return {"bytes_per_row": rows, "gpus": gpus, "source": f"{by}, {program}", "reason": None}

    def compute_shares(self, name: str) -> dict[str, float]:
        """Each VM's share of its cores on slice `name`: its GPU's speed (harness.backends.emulation.compute);
        empty where every VM computes at full speed."""
        return self.cluster.compute_shares.get(name, {}) if self.cluster is not None else {}

    # -- the record -----------------------------------------------------------------------------
    def record(self, result: TrialResult) -> dict:
        trial = result.trial
        vms = self.vms_of(trial)
        cfg = self.train_config(trial)
        packed = self.training_data(cfg)
        run = train.TrainRun(len(result.step_times_s), losses=result.losses, step_times_s=result.step_times_s,
                             compile_s=result.info.get("compile_s"), excluded_steps=0)  # warm-up already dropped
        facts = self.cluster.facts(tuple(vms)) if self.cluster is not None else {"network": {"mechanism": None}}
        network = {"mechanism": None, "rtt_ms": None}
        if len(vms) > 1:  # the cluster's link, where the trial crossed it
            network.update({k: v for k, v in facts["network"].items() if v is not None},
                           rtt_ms=self.rtt_ms.get(trial.slice))
            if "links" in network:  # an emulated link, which counted the trial's packets
                network["packets"] = result.packets
        if trial.slice in self.scaling:
            network["scaling"] = self.scaling[trial.slice]
        cluster = {"slice": trial.slice, "vms_used": vms, "hosts": len(vms), "devices_per_host": self.devices_per_host,
                   "gpu_types": {vm.name: vm.gpu for vm in self.paper_slices[trial.slice].vms if vm.name in vms},
                   "network": network, **{k: v for k, v in facts.items() if k != "network"}}
        where = records.Placement(trial.technique, self.budget.micro_batches, result.info.get("description"), cluster)
        record = records.build(self.model_cfg, cfg, packed, run if result.step_times_s else None, where,
                               result.status, result.reason, full_fp32=self.budget.precision == "float32-full",
                               memory={"bytes_per_device": result.info.get("bytes_per_device"),
                                       "source": "xla-memory-analysis of the compiled step" if result.info else None,
                                       **({"allocator_peak_bytes": result.peak_bytes, "allocator_peak_own": result.peak_own}
                                          if result.peak_bytes is not None else {})})
        if record["status"] == "oom":
            # Only the allocator's out of memory on the GPU the VM stands for is the paper's x.
            paper = self.paper_slices[trial.slice]
            usable = min(vm.accelerator.usable_bytes for vm in paper.vms if vm.name in vms)
            program = self.papers_program(trial)
            if program is not None:
                record = records.validate({**record, "memory": {**record["memory"], "papers_program": program}})
            why = records.not_the_papers_x(record, usable)
            if why:
                record = records.validate({**record, "status": "error", "reason": f"{why}: {record['reason']}"})
        return record
