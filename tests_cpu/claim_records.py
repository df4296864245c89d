"""Hand-made trial and memory records for the claims' tests: valid records (the schema checks them)
whose only real content is what the claims read."""
from harness.core import train
from harness.core.config import Technique, TrainConfig, model_config
from harness.runs import records

CORPUS_SEQUENCES = 80  # an epoch: 10 steps of the 4-GPU batch, 20 of one VM's


ALLOCATOR_OOM = "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7.53GiB with allocator GPU_0_bfc"


def trial(technique: str, slice_name: str, step_times, vms=("vm1", "vm2"), rtt: float = 20.0, status: str = "ok",
          mechanism: str = "userspace", gpus_per_vm: int = 2, reason: str | None = None, link_bytes: int | None = None,
          shared: bool = False, need_gib: float | None = None, platform: str = "gpu") -> dict:
    """A trial on `vms` (2 GPUs each unless told, 2 sequences per GPU) with these timed step times;
    status ok, oom (the paper's x: the allocator's, unless `reason` says otherwise) or error (a
    crash). link_bytes: what the emulated link carried over its timed steps; shared: its VMs' GPUs
    emulated on shares of one (need_gib: its step's need); platform: what JAX ran the step on, as
    a run records it (the record is built here, on whatever this machine has)."""
    batch = 2 * gpus_per_vm * len(vms)
    run = train.TrainRun(len(step_times), losses=[1.0] * len(step_times), step_times_s=list(step_times),
                         excluded_steps=0) if status == "ok" else None
    crosses = len(vms) > 1
    network = {"mechanism": mechanism if crosses else None, "rtt_ms": rtt if crosses else None}
    if link_bytes is not None:
        network["packets"] = {"packets": 1000, "delivered": 1000, "delivered_bytes": link_bytes}
    cluster = {"slice": slice_name, "vms_used": list(vms), "hosts": len(vms), "devices_per_host": gpus_per_vm,
               "network": network}
    if shared:
        cluster["gpu_sharing"] = {"physical_gpus": 1}
    where = records.Placement(technique, cluster=cluster)
    r = records.build(model_config("scale-tiny"), TrainConfig(batch_size=batch), None, run, where, status,
                      reason or {"ok": None, "oom": ALLOCATOR_OOM, "error": "RuntimeError: worker died"}[status],
                      memory={"bytes_per_device": None if need_gib is None else int(need_gib * 2**30),
                              "source": "xla-memory-analysis of the compiled step"})
    r["data"]["steps_per_epoch"] = CORPUS_SEQUENCES // batch
    r["environment"]["platform"] = platform
    if status == "ok":
        r["timing"]["epoch_time_s"] = r["timing"]["median_step_s"] * r["data"]["steps_per_epoch"]
    return records.validate(r)


def memory(model: str, technique: str, slice_name: str, vms, gib: float | None, status: str = "ok",
           gpus_per_vm: int = 2) -> dict:
    """A compile-only memory record: `gib` GiB per GPU, status ok, oom or error."""
    cfg = model_config(model)
    where = records.Placement(technique, cluster={"slice": slice_name, "vms_used": list(vms), "hosts": len(vms),
                                                  "devices_per_host": gpus_per_vm, "network": {"mechanism": None, "rtt_ms": None}})
    return records.validate(records.build(
        cfg, TrainConfig(batch_size=4 * gpus_per_vm * len(vms), seq_len=cfg.n_positions, steps=1), None, None, where, status,
        None if status == "ok" else "too big" if status == "oom" else "ValueError: cannot build",
        memory={"bytes_per_device": int(gib * 2**30) if gib is not None else None,
                "source": "xla-cpu-memory-analysis (compile only)"}))


def links_doc(slice_name: str, pipeshard_here: float, pipeshard_paper: float, mode: str = "similarity") -> dict:
    """A links document (similarity.json) in which Pipeshard's bubble and communication on the
    slice's link weigh `pipeshard_here` of its compute in the run, and `pipeshard_paper` in the paper."""
    def groups(total):
        return {t: {"latency": 0.0, "bandwidth": 0.0, "bubble": 0.0} for t in Technique} | {
            "Pipeshard": {"latency": total / 2, "bandwidth": total / 4, "bubble": total / 4}}

    entry = {"slice": slice_name, "paper_rtt_ms": 0.1, "rtt_ms": 0.4, "link_bytes_per_s": 9e7,
             "target": groups(pipeshard_paper), "model": groups(pipeshard_here), "literal": groups(pipeshard_here)}
    return {"mode": mode, "calibration": {}, "slices": [entry]}
