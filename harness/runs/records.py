"""Trial result records: JSON objects with a schema version, validated whenever written or read.

The schema (record.schema.json, beside this file) is the contract between every producer (the
single-device trainer, the techniques, the Alpa runner, live slices, the cost model) and every
consumer (claims, reports, regression comparison). Records are stored one per line (JSONL).
"""
import datetime
import json
import math
import re
import statistics
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

from harness import schemas
from harness.core import flops
from harness.errors import BadInput
from harness.platform import hardware
from harness.runs import environment

SCHEMA_VERSION = 1
WARMUP_STEPS_EXCLUDED = 1  # the first executed step still pays for buffer allocation


class InvalidRecord(BadInput):
    """A record that is not as a run writes it: bad input where a file of records is handed in."""


def validate(record: dict) -> dict:
    error = jsonschema.exceptions.best_match(schemas.validator("record").iter_errors(record))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "<record>"
        raise InvalidRecord(f"trial record field {where}: {error.message}")
    return record


def new_record(**fields) -> dict:
    """A record with identity and timestamp filled in; the caller supplies the rest."""
    record = {
        "schema_version": SCHEMA_VERSION,
        "record_id": uuid.uuid4().hex,
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **fields,
    }
    return validate(record)


# What a device allocator says when a step does not fit: XLA's BFC allocator ("Out of memory while
# trying to allocate 7.53GiB with allocator GPU_0_bfc"), its older wording, and CUDA's own. Not
# every RESOURCE_EXHAUSTED is memory: gRPC says it of a message larger than its maximum.
ALLOCATOR_OOM = re.compile(r"RESOURCE_EXHAUSTED:\s*(?:Out of memory|Failed to allocate)"
                           r"|ran out of memory trying to allocate|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation",
                           re.IGNORECASE)


def failure(exc: BaseException) -> tuple[str, str]:
    """(status, reason) of a trial that raised: the device allocator's out of memory is a result
    (the paper's x), anything else a crash."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if isinstance(exc, KeyboardInterrupt):
        return "error", "interrupted by the user"
    if ALLOCATOR_OOM.search(text):
        return "oom", text
    return "error", text


def not_the_papers_x(record: dict, usable_bytes: int | None) -> str | None:
    """Why a trial's out of memory is not the paper's x, or None when it is. It must be the device
    allocator's. Where the timed step is not the program the paper's stack compiled
    (memory.papers_program), it is the paper's x only if that program needs more than some GPU's
    usable memory: otherwise the paper's stack would have run where this step did not. And where
    emulated GPUs share a real one (cluster.gpu_sharing), or the CPU stands in for them, each ran
    in a share of that, so running out there is the paper's x only if the step needs more than the
    modelled GPU's usable bytes (usable_bytes; None: the modelled GPU is unknown). A compile-only
    analysis (no timing) says out of memory by that comparison itself."""
    if record["status"] != "oom":
        return "not out of memory"
    if "compile only" in (record["memory"]["source"] or ""):
        return None
    if not ALLOCATOR_OOM.search(record["reason"] or ""):
        return f"not the device allocator's out of memory ({record['reason']})"
    if "papers_program" in record["memory"]:
        why = _papers_program_fits(record)
        if why:
            return why
    if record["cluster"].get("gpu_sharing"):
        share = "its share of a shared GPU"
    elif record["environment"]["platform"] == "cpu":
        share = "this machine's memory, where the CPU stands in for a GPU"
    else:
        return None
    need = record["memory"]["bytes_per_device"]
    if usable_bytes is None:
        return f"ran out of {share}, and the GPU it stands for is unknown"
    if need is None:
        return f"ran out of {share} before its need was known"
    if need <= usable_bytes:
        return (f"ran out of {share}, needing {need / 2**30:.1f} GiB where the GPU it stands for "
                f"has {usable_bytes / 2**30:.1f} GiB usable: a harness error")
    return None


def _papers_program_fits(record: dict) -> str | None:
    """Why the program the paper's stack compiled would have run where the record's step ran out
    (each mesh row within its GPU's usable memory), or why that is not known; None where it too
    runs out."""
    program, what = record["memory"]["papers_program"], "the program the paper's stack compiled"
    if program["bytes_per_row"] is None:
        return f"ran out of memory in a step that is not {what}, and that program's need is unknown ({program['reason']})"
    if len(program["gpus"]) != len(program["bytes_per_row"]):
        return (f"ran out of memory in a step that is not {what}, whose need names {len(program['bytes_per_row'])} "
                f"mesh rows and {len(program['gpus'])} GPUs")
    rows = []
    for need, gpu in zip(program["bytes_per_row"], program["gpus"]):
        if gpu not in hardware.ACCELERATORS:
            return f"ran out of memory in a step that is not {what}, compiled for an unknown GPU {gpu!r}"
        usable = hardware.accelerator(gpu).usable_bytes
        if need > usable:
            return None
        rows.append(f"{_size(need)} on the {gpu} ({usable / hardware.GiB:.1f} GiB usable)")
    timed = record["memory"]["bytes_per_device"]
    return (f"ran out of memory in its timed step{f' ({_size(timed)} per GPU)' if timed is not None else ''}, which is "
            f"not {what}: that program ({program['source']}) needs per GPU {', '.join(rows)}, and would have run, "
            "so this is a harness error")


def _size(nbytes: int) -> str:
    return f"{nbytes / hardware.GiB:.1f} GiB" if nbytes >= hardware.GiB / 10 else f"{nbytes / 2**20:.1f} MiB"


class MixedRecords(BadInput):
    pass


# What every trial of one run shares. The paper compares techniques and slices training one model
# on one batch shape over one corpus; a trial of another model beside them would be judged as if it
# were the same experiment (nothing else in a verdict reads the model), so a run mixing them is
# refused instead. An epoch is the corpus's blocks in batches of the sequences per GPU times the
# GPUs: a trial that names another corpus or batch per GPU has another epoch to time.
SHARED = {"model": lambda r: r["model"], "sequence length": lambda r: r["batch"]["seq_len"],
          "microbatches": lambda r: r["batch"]["micro_batches"], "precision": lambda r: r["precision"],
          "sequences per GPU": lambda r: r["batch"]["global_batch"] / (r["cluster"]["hosts"]
                                                                      * r["cluster"]["devices_per_host"]),
          "corpus": lambda r: {k: r["data"].get(k) for k in ("corpus", "tokenizer", "blocks")},
          "with its VMs at their GPUs' speeds": lambda r: "compute_shares" in r["cluster"]}


def one_experiment(recs: list[dict]) -> None:
    """Refuse, in one line, trial records that did not all train one model on one batch shape and
    one corpus."""
    for r in recs[1:]:
        for what, of in SHARED.items():
            mine, theirs = of(r), of(recs[0])
            if mine == theirs:
                continue
            if isinstance(mine, dict):
                key = next(k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k))
                what, mine, theirs = f"{what} {key}", mine.get(key), theirs.get(key)
            raise MixedRecords(f"the trial {label(r)} (record_id {r['record_id']}) trained {what} {mine!r} where "
                               f"{label(recs[0])} (record_id {recs[0]['record_id']}) trained {theirs!r}: a run's "
                               f"trials train one model on one batch shape over one corpus")


def label(r: dict) -> str:
    """A trial as a message names it: "Data on UTAH-GPN vm1+vm2"."""
    c = r["cluster"]
    return f"{r['technique']} on {c['slice']} {'+'.join(c['vms_used'] or [])}"


def dumps(record: dict) -> str:
    return json.dumps(validate(record), separators=(",", ":"), allow_nan=False)


def loads(line: str, where: str = "<string>") -> dict:
    """A record from a file: refused in one line where it is not as a run writes it. Beyond the
    schema, a run writes no NaN or infinity (dumps), and the fields it derives follow from what it
    derived them from (underived())."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise InvalidRecord(f"{where}: not JSON ({e})") from None
    try:
        validate(record)
    except InvalidRecord as e:
        raise InvalidRecord(f"{where}: {e}") from None
    found = schemas.first_non_finite(record)
    if found:
        raise InvalidRecord(f"{where}: trial record field {'/'.join(map(str, found[0]))}: {found[1]} is not a finite "
                            "number, and a run writes no NaN or infinity")
    why = underived(record) or sooner_than_its_links(record)
    if why:
        raise InvalidRecord(f"{where}: trial record field {why}")
    return record


def median_step_s(step_times_s: list[float], excluded_steps: int) -> float | None:
    """The median of the timed steps: those after the excluded warm-up, or all where none is left."""
    timed = step_times_s[excluded_steps:] or step_times_s
    return statistics.median(timed) if timed else None


def underived(r: dict) -> str | None:
    """The first field that build() derives from others and that does not follow from them, in
    words, or None. The verdicts read the derived fields (epoch_time_s, median_step_s, TFLOP/s):
    in a record whose step times say otherwise, one of the two was changed after the run."""
    t, th, cluster = r["timing"], r["throughput"], r["cluster"]
    median = median_step_s(t["step_times_s"], t["excluded_warmup_steps"])
    per_epoch, devices = r["data"]["steps_per_epoch"], cluster["hosts"] * cluster["devices_per_host"]
    derived = {  # field: (what the run derived it from, its value from those)
        "steps": ("its losses", len(r["losses"])),
        "tokens": ("steps x batch/global_batch x batch/seq_len",
                   r["steps"] * r["batch"]["global_batch"] * r["batch"]["seq_len"]),
        "timing/median_step_s": ("timing/step_times_s after timing/excluded_warmup_steps", median),
    }
    if r["data"].get("blocks") is not None:  # an epoch is the corpus's blocks in whole batches
        derived["data/steps_per_epoch"] = ("data/blocks // batch/global_batch",
                                           r["data"]["blocks"] // r["batch"]["global_batch"])
    derived["timing/epoch_time_s"] = ("timing/median_step_s x data/steps_per_epoch",
                                      median * per_epoch if median and per_epoch else None)
    for rule in ("alpa", "rule"):  # records made before a rule was kept have neither field
        if f"flops_per_step_{rule}" in th and f"tflops_{rule}" in th:
            derived[f"throughput/tflops_{rule}"] = (
                f"throughput/flops_per_step_{rule}, the median step and the devices",
                flops.tflops(th[f"flops_per_step_{rule}"], median, devices) if median else None)
    for name, (source, expected) in derived.items():
        section, _, key = name.rpartition("/")
        value = (r[section] if section else r)[key]
        if not same(value, expected):
            return f"{name}: {value!r}, where {source} give {expected!r}: changed after the run"
    return None


# netem takes its delay in whole microseconds, one rounding per direction; the userspace relay
# holds a packet its exact delay. Nothing else lets a probe back sooner than its link holds it.
ROUNDING_MS = 0.002


def sooner_than_its_links(r: dict) -> str | None:
    """The measured RTT, in words, where it is shorter than the round trip the record's emulated
    links hold a packet, or None. The RTT is a probe's through those links (emulation.network.
    measure_rtt), which cannot come back sooner: one of the two was changed after the run. A
    direction whose link was down, or whose jitter has no floor, holds a packet for no known time."""
    network, vms = r["cluster"]["network"], r["cluster"]["vms_used"] or []
    rtt, links = network.get("rtt_ms"), network.get("links") or {}
    if rtt is None or not links:
        return None
    trips = [(held(links.get(f"{a}>{b}")) + held(links.get(f"{b}>{a}")), a, b)
             for i, a in enumerate(vms) for b in vms[i + 1:]]
    if not trips:
        return None
    least, a, b = min(trips)
    if rtt >= least - ROUNDING_MS:
        return None
    return (f"cluster/network/rtt_ms: {rtt:.4g} ms, shorter than the {least:.4g} ms its links hold a round trip "
            f"({a}>{b} and back): a probe through them cannot come back sooner, so one was changed after the run")


def held(direction: dict | None) -> float:
    """The least time, in ms, one direction of an emulated link holds a packet (0 where unknown)."""
    if not isinstance(direction, dict) or direction.get("up") is False:
        return 0.0
    delay, jitter = direction.get("delay_ms"), direction.get("jitter_ms") or 0.0
    if not isinstance(delay, (int, float)) or not isinstance(jitter, (int, float)):
        return 0.0
    if jitter and direction.get("jitter_distribution", "normal") != "uniform":
        return 0.0  # normal and pareto jitter can take the whole delay away
    return max(0.0, delay - jitter)


def same(value, expected) -> bool:
    """One figure written twice, as JSON reads it back: the same arithmetic (or both None)."""
    if value is None or expected is None:
        return value is None and expected is None
    return math.isclose(value, expected, rel_tol=1e-9)  # the same arithmetic, read back from JSON


def append(path: str | Path, record: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(dumps(record) + "\n")


def read(path: str | Path) -> list[dict]:
    path = Path(path)
    lines = path.read_text().splitlines()
    return [loads(line, f"{path}:{n}") for n, line in enumerate(lines, 1) if line.strip()]


# -- building a record from a run -----------------------------------------------------------------
SINGLE_DEVICE = {"slice": None, "vms_used": None, "hosts": 1, "devices_per_host": 1,
                 "network": {"mechanism": None, "rtt_ms": None}}


@dataclass(frozen=True)
class Placement:
    """What ran where: the technique as configured, and the cluster section of the record."""
    technique: str = "Single"  # the single-device reference trainer
    micro_batches: int = 1
    plan: str | None = None  # the technique's own description of its plan
    cluster: dict = field(default_factory=lambda: SINGLE_DEVICE)


def build(model_cfg, cfg, data, run, where: Placement = Placement(), status: str = "ok", reason: str | None = None,
          memory: dict | None = None, peak: float | None = None, full_fp32: bool | None = None) -> dict:
    """The record of a training run: model_cfg and cfg (config.GPTConfig, TrainConfig), the packed
    corpus and the train.TrainRun (either may be None: a compile-only analysis, a run that failed
    before its first step); peak TFLOP/s for MFU defaults to the device's own, for the arithmetic
    that ran (full_fp32: float32 matmuls without TF32; None: as this process's JAX is set)."""
    cluster = where.cluster
    n_devices = cluster["hosts"] * cluster["devices_per_host"]
    seq_len = data.seq_len if data else cfg.resolved_seq_len(model_cfg)
    losses = run.losses if run else []
    steps = len(losses)
    median = run.median_step_s if run else None
    diverged = next((i for i, loss in enumerate(losses) if not math.isfinite(loss)), None)
    if diverged is not None and status == "ok":  # no measurement of training, and JSON has no NaN
        status, reason = "error", (f"training diverged: the loss of recorded step {diverged + 1} of {steps} is "
                                   f"{losses[diverged]}, not a finite number")
    alpa = flops.alpa_step_flops(model_cfg, cfg.batch_size, seq_len)
    rule = flops.rule_step_flops(model_cfg, cfg.batch_size, seq_len)
    per_epoch = data.steps_per_epoch(cfg.batch_size) if data else None
    peak, arithmetic = (peak, "given") if peak is not None else environment.peak(model_cfg.dtype, full_fp32)
    return new_record(
        technique=where.technique,
        backend="jax",
        cluster=cluster,
        model={"name": model_cfg.name, "n_layer": model_cfg.n_layer, "n_head": model_cfg.n_head,
               "n_embd": model_cfg.n_embd, "vocab_size": model_cfg.vocab_size,
               "n_positions": model_cfg.n_positions, "tie_embeddings": model_cfg.tie_embeddings,
               "params": flops.param_count(model_cfg), "attention": model_cfg.attention,
               "remat": model_cfg.remat, "remat_saves": model_cfg.remat_saves,
               "vocab_multiple": model_cfg.vocab_multiple, "loss_chunks": model_cfg.loss_chunks,
               "scan_unroll": model_cfg.scan_unroll},
        data={"corpus": data.corpus.description if data else None,
              "tokenizer": data.tokenizer.description if data else None,
              "tokenizer_vocab": data.tokenizer.vocab_size if data else None,
              "blocks": len(data.blocks) if data else None,
              "steps_per_epoch": per_epoch},
        batch={"global_batch": cfg.batch_size, "seq_len": seq_len, "micro_batches": where.micro_batches},
        plan=where.plan,
        precision=model_cfg.dtype,
        steps=steps,
        tokens=steps * cfg.batch_size * seq_len,
        losses=[loss if math.isfinite(loss) else None for loss in losses],
        timing={"compile_s": run.compile_s if run else None,
                "step_times_s": run.step_times_s if run else [],
                "excluded_warmup_steps": run.excluded_steps if run else WARMUP_STEPS_EXCLUDED,
                "median_step_s": median,
                "epoch_time_s": median * per_epoch if median and per_epoch else None},
        throughput={"tflops_alpa": flops.tflops(alpa, median, n_devices) if median else None,
                    "tflops_rule": flops.tflops(rule, median, n_devices) if median else None,
                    "mfu": flops.tflops(rule, median, n_devices) / peak if median and peak else None,
                    "peak_tflops": peak,
                    "peak_arithmetic": arithmetic,
                    "flops_per_step_alpa": alpa,
                    "flops_per_step_rule": rule},
        memory=memory or {"bytes_per_device": None, "source": None},
        status=status,
        reason=reason,
        environment=environment.describe(),
    )
