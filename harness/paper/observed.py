"""What the paper observed, as data the claims check against (docs/paper.md, "Runs that ran and failed").

RUNS holds each outcome the paper states: (slice, placement, model, technique) -> ran (True) or
failed (False), where placement is "4 GPUs" (both VMs) or "1 VM" (the first VM's 2 GPUs alone).
Where the text names only some techniques, only those are here: a technique the paper does not
name is not an observation.

The paper's own observations disagree in places: the same model, technique and GPU memory ran on
one slice and failed on another. `conflicts()` finds them; no memory model that depends only on
the model, the technique and the GPUs' memory can reproduce both, so the claims report them
instead of counting them for or against an analysis.
"""
import functools

from harness.platform import slices

FOUR_GPUS, ONE_VM = "4 GPUs", "1 VM"
ALL4 = ("Data", "ZeRO2", "Shard", "Pipeshard")


def _runs() -> dict[tuple[str, str, str, str], bool]:
    out = {}

    def say(slice_name, placement, model, ran=(), failed=()):
        for t in ran:
            out[(slice_name, placement, model, t)] = True
        for t in failed:
            out[(slice_name, placement, model, t)] = False

    # Table II has all four times for gpt2m on 4 GPUs on every slice: all ran.
    for s in ("TACC-TACC", "UTAH-GPN", "UTAH-MASS", "BRIS-STAR", "GAT-AMST"):
        say(s, FOUR_GPUS, "gpt2m", ran=ALL4)
    say("TACC-TACC", FOUR_GPUS, "gpt2l", ran=("Pipeshard", "Data", "Shard"))
    say("TACC-TACC", FOUR_GPUS, "gpt2L", ran=("ZeRO2",), failed=("Data", "Shard", "Pipeshard"))
    say("TACC-TACC", ONE_VM, "gpt2m", ran=("Data", "ZeRO2"))
    say("TACC-TACC", ONE_VM, "gpt2L", failed=ALL4)
    say("UTAH-GPN", FOUR_GPUS, "gpt2L", ran=("ZeRO2",), failed=("Data", "Shard", "Pipeshard"))
    say("UTAH-GPN", ONE_VM, "gpt2m", ran=ALL4)
    say("UTAH-GPN", ONE_VM, "gpt2L", ran=("Data", "ZeRO2", "Shard"), failed=("Pipeshard",))
    say("UTAH-MASS", FOUR_GPUS, "gpt2L", ran=("Pipeshard", "Data", "Shard"))
    say("UTAH-MASS", ONE_VM, "gpt2m", ran=ALL4)
    say("UTAH-MASS", ONE_VM, "gpt2L", ran=("Data", "ZeRO2", "Shard"), failed=("Pipeshard",))
    say("BRIS-STAR", FOUR_GPUS, "gpt2L", ran=("Pipeshard",), failed=("Data", "ZeRO2", "Shard"))
    say("BRIS-STAR", ONE_VM, "gpt2m", ran=ALL4)
    say("BRIS-STAR", ONE_VM, "gpt2L", failed=ALL4)
    say("GAT-AMST", FOUR_GPUS, "gpt2L", ran=("Pipeshard",), failed=("Data", "ZeRO2", "Shard"))
    say("GAT-AMST", ONE_VM, "gpt2m", ran=ALL4)
    say("GAT-AMST", ONE_VM, "gpt2l", ran=ALL4)
    say("GAT-AMST", ONE_VM, "gpt2L", failed=ALL4)
    return out


RUNS = _runs()

# C5 as the paper makes it: gpt2m with Data on the 2 RTX of TACC-TACC's first VM beat Pipeshard on
# all 4 GPUs of that slice.
MORE_GPUS_SLICES = ("TACC-TACC",)

# C3: of the paper's 8 single-VM experiments (5 slices with gpt2m, GAT-AMST with gpt2l, UTAH-GPN
# and UTAH-MASS with gpt2L) Data won 6 and Shard 2 (on A30s).
SINGLE_VM_WINS = {"Data": 6, "Shard": 2}


@functools.cache  # asked for every memory record a claim reads; Table I is package data
def gpu_memory(slice_name: str, placement: str) -> tuple[int, ...]:
    """The memory of every GPU a placement uses on a Table I slice, in bytes, sorted: the hardware
    a memory model can tell apart."""
    sl = slices.load(slice_name)
    vms = sl.vms if placement == FOUR_GPUS else sl.vms[:1]
    return tuple(sorted(vm.accelerator.memory_bytes for vm in vms for _ in range(vm.gpus)))


def conflicts() -> dict[tuple, list[tuple[str, bool]]]:
    """(model, technique, GPU memory) -> [(where, ran)] for every such hardware where the paper saw
    the same run both succeed and fail."""
    seen: dict[tuple, list[tuple[str, bool]]] = {}
    for (s, placement, model, technique), ran in RUNS.items():
        seen.setdefault((model, technique, gpu_memory(s, placement)), []).append((f"{s} {placement}", ran))
    return {k: v for k, v in seen.items() if len({ran for _, ran in v}) > 1}
