"""Per-device memory of each technique at paper scale, without a GPU and without allocating.

Each technique's train step is compiled from shape structs (jax.ShapeDtypeStruct with the plan's
shardings), and XLA's memory analysis of the compiled program gives the bytes one device needs:
arguments (parameters, optimizer state, batch) + outputs not aliased to arguments + temporaries
(activations kept for the backward pass, gradients, workspace). A device whose GPU has less
memory than that is out of memory: the paper's x.

Pipeshard is analysed as Alpa runs it: one program per stage, each compiled for its own VM's GPUs
(techniques/pipeshard_stages.py), and each stage judged against the memory of the GPUs it runs on.

Caveat, stated in every result's source: by default the program is compiled by XLA's CPU
backend, whose buffer assignment and fusion differ from the GPU backend's, so absolute figures are
estimates; the comparison between techniques on the same compiler is what the memory claims rest
on. gpu_compiler.py compiles the same programs with XLA's GPU compiler for the slice's own GPUs,
without a GPU (docs/memory.md, "Which compiler", has the two side by side).

The paper does not state batch size, microbatches or precision; they are explicit assumptions
here (config.Setup), and `harness memory` shows how the verdicts move when they change.
"""
import copy
import dataclasses
import time

import jax

from harness.analysis import gpu_compiler
from harness.core import model, train
from harness.core.config import GPTConfig, Setup, TrainConfig
from harness.platform.hardware import GiB
from harness.platform.slices import Slice
from harness.runs import records
from harness.techniques import TECHNIQUES, ClusterShape, technique_class

SOURCE = "xla-cpu-memory-analysis (compile only)"
# The program is never run, so LLVM need not optimise its machine code: buffer assignment, which
# the memory analysis reads, happens before, on the HLO. Measured: the same bytes, 27% less time.
COMPILE_ONLY = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def provide_cpu_devices(slices) -> None:
    """The CPU compiler compiles a plan for all of a slice's GPUs at once, on as many CPU devices,
    whose number JAX fixes when its backend starts: ask for the largest slice's before that. Once
    started, a backend with too few makes the analysis fail naming both counts."""
    need = max(len(sl.vms) * sl.gpus_per_vm for sl in slices)
    if need > max(jax.config.jax_num_cpu_devices, 1):
        try:
            jax.config.update("jax_num_cpu_devices", need)
        except RuntimeError:  # already started
            pass


def placements(sl: Slice, gpus: int) -> list[tuple[list[str], ClusterShape]]:
    """Where a run of `gpus` GPUs goes on a slice: all VMs, or each single VM on its own."""
    per_vm = sl.gpus_per_vm
    if gpus == per_vm * len(sl.vms):
        return [([vm.name for vm in sl.vms], ClusterShape(len(sl.vms), per_vm))]
    if gpus == per_vm:
        return [([vm.name], ClusterShape(1, per_vm)) for vm in sl.vms]
    raise ValueError(f"slice {sl.name} has {len(sl.vms)} VMs of {per_vm} GPUs: use {per_vm} or {per_vm * len(sl.vms)} GPUs")


def compiled_bytes(tech, model_cfg: GPTConfig, shape: ClusterShape, a: Setup, row_gpus: list[str] | None = None,
                   devices_for=None) -> dict:
    """bytes_per_device is the fullest device's need; bytes_per_stage, for Pipeshard, each
    stage's (stage i runs on mesh row i). The CPU compiler by default; with devices_for(gpu, hosts,
    per_host) giving compile-only GPU devices (gpu_compiler.py), row i's program is compiled for
    row_gpus[i], and an SPMD plan on VMs of different GPUs once per GPU (bytes_per_row)."""
    batch = a.batch_per_gpu * shape.n_devices
    cfg = TrainConfig(batch_size=batch, seq_len=model_cfg.n_positions, steps=1)
    rows = row_gpus or [None] * shape.hosts
    # Without devices_for, the CPU's devices (JAX_NUM_CPU_DEVICES of them), also on a machine whose
    # default backend is a GPU: the CPU compiler is the CPU's, and its meshes need more devices than one GPU.
    devices = (lambda gpu, s: devices_for(gpu, s.hosts, s.devices_per_host)) if devices_for \
        else (lambda gpu, s: jax.devices("cpu"))
    start = time.perf_counter()
    stages = tech.stage_programs(model_cfg, shape, cfg)
    if stages:
        plan, programs = stages
        row = ClusterShape(1, shape.devices_per_host)
        needs = [_bytes(*program.build(row, cfg, 1, batch, model_cfg.n_positions, devices(gpu, row)), gpu is None)
                 for program, gpu in zip(programs, rows)]
        return {"bytes_per_device": max(needs), "bytes_per_stage": needs,
                "compile_s": time.perf_counter() - start, "plan": plan}
    _, abstract = model.abstract_init(model_cfg)
    need = {}
    for gpu in dict.fromkeys(rows):
        built = tech.build(model_cfg, shape, cfg, total_steps=1, devices=devices(gpu, shape))
        need[gpu] = _bytes(built.step, built.abstract_args(abstract, batch, model_cfg.n_positions), gpu is None)
    result = {"bytes_per_device": max(need.values()), "compile_s": time.perf_counter() - start,
              "plan": built.describe()}
    if len(need) > 1:
        result["bytes_per_row"] = [need[gpu] for gpu in rows]
    return result


def gpus_of_rows(gpus: list[str], hosts: int) -> list[str]:
    """The GPU each mesh row is compiled for, from the GPUs of the VMs used: row i is the i-th VM,
    or, where the rows are stages on one VM, that VM."""
    return list(gpus) if hosts == len(gpus) else list(gpus[:1]) * hosts


def compiled_with(compiler, tech, model_cfg: GPTConfig, shape: ClusterShape, a: Setup, rows: list[str]) -> dict:
    """compiled_bytes by a gpu_compiler.GpuCompiler for the rows' GPUs, or by XLA's CPU compiler (None)."""
    if compiler:
        return compiler.compiled_bytes(tech, model_cfg, shape, a, rows)
    return compiled_bytes(tech, model_cfg, shape, a)


def _bytes(step, args, on_cpu: bool = True) -> int:
    # LLVM's optimisation level is a CPU compiler option; the GPU compiler keeps its defaults.
    return train.needed_bytes(step.lower(*args).compile(COMPILE_ONLY if on_cpu else None))


# What XLA's CPU compiler said of each plan, by everything the plan depends on (the key in
# analyse): a plan is compiled once per process, however many slices, setups, claims and commands
# ask for it. A GpuCompiler keeps its own (GpuCompiler.compiled).
_COMPILED: dict = {}


def analyse(sl: Slice, model_cfg: GPTConfig, gpus: int, a: Setup, techniques=tuple(TECHNIQUES),
            compiler=None) -> list[dict]:
    """One trial record per technique and placement, status ok or oom, with the evidence in reason.
    compiler: None for XLA's CPU compiler, or a gpu_compiler.GpuCompiler to compile for the
    slice's own GPUs."""
    model_cfg = dataclasses.replace(model_cfg, dtype=a.precision)
    compiled = compiler.compiled if compiler else _COMPILED
    out = []
    for vms, shape in placements(sl, gpus):
        used = [vm for vm in sl.vms if vm.name in vms]
        for name in techniques:
            tech = technique_class(name).configured(a, sl, vms)
            mesh_shape = tech.mesh(shape)
            rows = gpus_of_rows([vm.gpu for vm in used], mesh_shape.hosts)
            # What the programs depend on: the technique as configured, and the batch it compiles for.
            key = (tech.name, model_cfg, mesh_shape, tech.memory_key(), a.batch_per_gpu,
                   tuple(rows) if compiler else None)
            try:
                if key not in compiled:
                    compiled[key] = compiled_with(compiler, tech, model_cfg, mesh_shape, a, rows)
                result = copy.deepcopy(compiled[key])  # records are the caller's to change
            except Exception as e:  # a plan that cannot be built is a failed trial, not a crash
                status, reason = records.failure(e)
                out.append(record(name, sl, vms, shape, model_cfg, a, None, status, reason, source(compiler)))
                continue
            short = [(vm, need) for vm, need in _needs(sl, vms, result) if need > vm.accelerator.usable_bytes]
            status = "oom" if short else "ok"
            reason = "; ".join(f"needs {need / GiB:.1f} GiB per GPU, {vm.name}'s {vm.gpu} has "
                               f"{vm.accelerator.describe_memory()}" for vm, need in short) or None
            out.append(record(name, sl, vms, shape, model_cfg, a, result, status, reason, source(compiler)))
    return out


def source(compiler) -> str:
    return gpu_compiler.SOURCE if compiler else SOURCE


def _needs(sl: Slice, vms, result: dict) -> list:
    """(VM, bytes each of its GPUs needs) for the VMs used. Pipeshard's stage i runs on the i-th VM
    used; on one VM all its stages share that VM's GPUs."""
    used = [vm for vm in sl.vms if vm.name in vms]
    rows = result.get("bytes_per_stage") or result.get("bytes_per_row")
    if rows and len(rows) == len(used):
        return list(zip(used, rows))
    return [(vm, result["bytes_per_device"]) for vm in used]


def record(name, sl: Slice, vms, shape: ClusterShape, model_cfg: GPTConfig, a: Setup, result, status, reason,
           source: str = SOURCE):
    cfg = TrainConfig(batch_size=a.batch_per_gpu * shape.n_devices, seq_len=model_cfg.n_positions, steps=1)
    where = records.Placement(name, a.micro_batches, result["plan"] if result else None, {
        "slice": sl.name, "vms_used": list(vms), "hosts": shape.hosts, "devices_per_host": shape.devices_per_host,
        "network": {"mechanism": None, "rtt_ms": sl.rtt_ms}})
    memory = {"bytes_per_device": result["bytes_per_device"] if result else None, "source": source}
    for kind in ("bytes_per_stage", "bytes_per_row"):
        if result and result.get(kind):
            memory[kind] = result[kind]
    return records.build(model_cfg, cfg, None, None, where, status, reason, memory=memory)
