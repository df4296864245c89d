"""The claims' pytest options and what they select. Each option overrides one setting of the run's
configuration (harness.runs.run_config.RunConfig: its defaults, then --run-config FILE, then these
options); the configuration is made once per session and kept, with its slices read once."""
import os

import pytest

from harness.core.config import PRECISIONS, Setup, Technique
from harness.runs.run_config import LINK_SCALINGS, MEMORY_COMPILERS, QUICK_SLICES, SHARDS, RunConfig

# The memory claims' setup: the paper states no batch, microbatches or precision (see Setup's defaults).
MEMORY_ASSUMPTIONS = Setup()

REPORT_ENV = "HARNESS_REPORT_DIR"
INVENTORY_ENV = "HARNESS_SLICE_INVENTORY"
_RUN = pytest.StashKey[RunConfig]()
# option -> the setting it overrides
SETTINGS = {"--claims-slices": "slices", "--trial-model": "model", "--trial-repeats": "repeats",
            "--trial-batch-per-gpu": "batch_per_gpu", "--trial-micro-batches": "micro_batches",
            "--trial-precision": "precision", "--link-scaling": "link_scaling", "--gpu-speeds": "gpu_speeds",
            "--shard": "shard", "--memory-models": "memory_models", "--memory-compiler": "memory_compiler",
            "--report-dir": "report_dir", "--slice-inventory": "slice_inventory",
            "--strict-link": "strict_link"}


def add_options(parser) -> None:
    d = RunConfig()
    g = parser.getgroup("claims", "the paper's claims")
    g.addoption("--run-config", default=None, metavar="FILE",
                help="TOML file of the run's settings (harness/runs/run_config.py); the options below override it")
    g.addoption("--claims-slices", default=None, metavar="LIST",
                help=f"slices the trials run on: 'quick' ({', '.join(QUICK_SLICES)}), 'all' (Table I), or "
                     f"comma-separated Table I names or slice files (default: {d.slices})")
    g.addoption("--trial-model", default=None, metavar="NAME",
                help=f"model every trial trains (default: {d.model}, the CPU scale model)")
    g.addoption("--trial-repeats", type=int, default=None, metavar="N",
                help=f"timed steps per trial, at least 5 (default: {d.repeats})")
    g.addoption("--trial-batch-per-gpu", type=int, default=None, metavar="N",
                help="sequences per GPU of every trial (default: the model's; gpt2m 2, which in float32 fits an "
                     "H200's quarter but not an H100's: `python -m harness memory --compiler gpu` forecasts it)")
    g.addoption("--trial-micro-batches", type=int, default=None, metavar="N",
                help="microbatches per step of every trial (default: the model's; at most the sequences per GPU)")
    g.addoption("--trial-precision", default=None, choices=PRECISIONS,
                help="arithmetic of every trial: float32 (XLA's default: TF32 matmuls on GPUs that have it), "
                     "float32-full (no TF32, as the paper's T4 and RTX 6000 ran), bfloat16 or float16 (16-bit "
                     f"compute, float32 parameters and optimizer state; default: {d.precision})")
    g.addoption("--link-scaling", default=None, choices=LINK_SCALINGS,
                help="the links the emulated trials run on: 'similarity', each slice's RTT and rate (and the VMs' "
                     "TCP buffers) scaled so that the scale model has the paper's latency and bandwidth groups, "
                     "with the collectives combined as on GPUs; 'literal', the paper's RTTs with the kernel's "
                     "buffers and the collectives as XLA's CPU runtime runs them, one per tensor "
                     f"(`python -m harness reproduce --literal`; default: {d.link_scaling})")
    g.addoption("--gpu-speeds", action="store_true", default=None,
                help="on CPU, each emulated VM computes at its GPU's speed against the run's fastest (a CPU quota per "
                     "VM, harness/backends/emulation/compute.py: a T4 VM at half an RTX VM's); default: every VM at "
                     "its cores' full speed (see docs/claims.md, 'The scale model on CPU', for what the quota also "
                     "slows)")
    g.addoption("--shard", default=None, choices=SHARDS,
                help="the registered technique the claims run as the paper's Shard: 'Shard', this suite's planner, "
                     "or 'Shard-alpa', Alpa's ShardParallel as it ran (docs/techniques.md; "
                     f"default: {d.shard})")
    g.addoption("--memory-models", default=None, metavar="LIST",
                help=f"paper-scale models for the memory claims (default: {','.join(d.memory_models)})")
    g.addoption("--memory-compiler", default=None, choices=MEMORY_COMPILERS,
                help="the compiler whose memory analysis judges C4, and whether a trial's out of memory in a step that is not "
                     "the paper's program (Pipeshard's) is the paper's x: cpu, XLA's CPU compiler; gpu, XLA's GPU compiler "
                     "for each slice's own GPUs, no GPU needed (python -m harness.analysis.gpu_compiler install); "
                     f"auto: gpu on a machine with a GPU, cpu elsewhere (default: {d.memory_compiler})")
    g.addoption("--report-dir", default=os.environ.get(REPORT_ENV), metavar="DIR",
                help=f"write results.jsonl, claims.md and figures here when the session ends (or set {REPORT_ENV})")
    g.addoption("--slice-inventory", default=os.environ.get(INVENTORY_ENV), metavar="FILE",
                help=f"TOML inventory of a live slice for the fabric tests (or set {INVENTORY_ENV})")
    g.addoption("--strict-link", action="store_true", default=None,
                help="on a live slice, stop before any trial if a pair of VMs is more than 5%% off its slice "
                     "file's RTT or rate (default: flag it in every record and in claims.md, and go on)")


def run_config(config) -> RunConfig:
    """The session's configuration, made on first use and kept (BadInput names a bad value)."""
    if _RUN not in config.stash:
        path = config.getoption("--run-config")
        base = RunConfig.load(path) if path else RunConfig()
        config.stash[_RUN] = base.override({s: o for o, s in SETTINGS.items()},
                                           **{s: config.getoption(o) for o, s in SETTINGS.items()})
    return config.stash[_RUN]


def claim_slices(config) -> list:
    return run_config(config).claim_slices


def link_scaling(config) -> str:
    return run_config(config).link_scaling


def gpu_speeds(config) -> bool:
    return run_config(config).gpu_speeds


def budget(config, **overrides):
    """What every trial trains (overrides: Budget's fields, for one backend's module); the
    emulated CPU backend combines the collectives where it scales the links (harness.suite.backends)."""
    return run_config(config).budget(**overrides)


def memory_models(config) -> list:
    return run_config(config).memory_model_configs


def emulated_trials(config) -> list:
    """Every technique on all VMs of each slice and on the first VM alone (the paper's single-VM
    runs: C3, C5); Data and Shard on each other VM alone (Algorithm 1, C7). Emulated VMs are
    identical shares of one machine; a live slice runs every technique on every VM instead."""
    from harness.runs import trials  # deferred: pytest loads the plugin before conftest configures JAX

    out = []
    for sl in claim_slices(config):
        out += [trials.Trial.on(sl, t) for t in Technique]
        out += [trials.Trial.on(sl, t, sl.vms[0].name) for t in Technique]
        out += [trials.Trial.on(sl, t, vm.name) for vm in sl.vms[1:] for t in (Technique.DATA, Technique.SHARD)]
    return out


def emulated_gpu_trials(config) -> list:
    """emulated_trials in the order of the VMs they train on: on GPUs shared by the emulated ones
    one group of VMs holds them at a time, and a group that comes back compiles its steps again
    (harness.backends.layout). All VMs of every slice first, then each VM alone across the slices:
    a VM's group is the same on every slice, so each is built once."""
    trials = emulated_trials(config)
    groups = list(dict.fromkeys(t.vms for t in trials))  # "all" first, then the VMs in slice order
    return sorted(trials, key=lambda t: groups.index(t.vms))
