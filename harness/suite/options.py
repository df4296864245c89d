"""What the claims options select, read from a pytest config: the slices, the trial budget, the
trials and the paper-scale models of the memory claims."""
import os

from harness.core.config import PRECISIONS, Budget, Setup, Technique, model_config
from harness.errors import BadInput
from harness.platform import slices

# The memory claims' setup: the paper states no batch, microbatches or precision (see Setup's defaults).
MEMORY_ASSUMPTIONS = Setup()

QUICK_SLICES = ("TACC-TACC", "UTAH-GPN")  # one single-site slice and the nearest two-site one
REPORT_ENV = "HARNESS_REPORT_DIR"
INVENTORY_ENV = "HARNESS_SLICE_INVENTORY"


def add_options(parser) -> None:
    g = parser.getgroup("claims", "the paper's claims")
    g.addoption("--claims-slices", default="quick", metavar="LIST",
                help=f"slices the trials run on: 'quick' ({', '.join(QUICK_SLICES)}), 'all' (Table I), or "
                     "comma-separated Table I names or slice files (default: quick)")
    g.addoption("--trial-model", default=Budget.model, metavar="NAME",
                help="model every trial trains (default: %(default)s, the CPU scale model)")
    g.addoption("--trial-repeats", type=int, default=Budget.repeats, metavar="N",
                help="timed steps per trial, at least 5 (default: %(default)s)")
    g.addoption("--trial-precision", default=Budget.precision, choices=PRECISIONS,
                help="arithmetic of every trial: float32 (XLA's default: TF32 matmuls on GPUs that have it), "
                     "float32-full (no TF32, as the paper's T4 and RTX 6000 ran), bfloat16 or float16 (16-bit "
                     "compute, float32 parameters and optimizer state; default: %(default)s)")
    g.addoption("--link-scaling", default="similarity", choices=("similarity", "literal"),
                help="the links the emulated trials run on: 'similarity', each slice's RTT and rate (and the VMs' "
                     "TCP buffers) scaled so that the scale model has the paper's latency and bandwidth groups, "
                     "with the collectives combined as on GPUs; 'literal', the paper's RTTs with the kernel's "
                     "buffers and the collectives as XLA's CPU runtime runs them, one per tensor "
                     "(`python -m harness reproduce --literal`; default: %(default)s)")
    g.addoption("--gpu-speeds", action="store_true",
                help="on CPU, each emulated VM computes at its GPU's speed against the run's fastest (a CPU quota per "
                     "VM, harness/backends/emulation/compute.py: a T4 VM at half an RTX VM's); default: every VM at its "
                     "cores' full speed (see docs/claims.md, 'The scale model on CPU', for what the quota also slows)")
    g.addoption("--memory-models", default="gpt2m,gpt2L", metavar="LIST",
                help="paper-scale models for the memory claims (default: %(default)s)")
    g.addoption("--memory-compiler", default="auto", choices=("auto", "cpu", "gpu"),
                help="the compiler whose memory analysis judges C4: cpu, XLA's CPU compiler; gpu, XLA's GPU compiler "
                     "for each slice's own GPUs, no GPU needed (python -m harness.analysis.gpu_compiler install); auto: gpu "
                     "on a machine with a GPU, cpu elsewhere (default: %(default)s)")
    g.addoption("--report-dir", default=os.environ.get(REPORT_ENV), metavar="DIR",
                help=f"write results.jsonl, claims.md and figures here when the session ends (or set {REPORT_ENV})")
    g.addoption("--slice-inventory", default=os.environ.get(INVENTORY_ENV), metavar="FILE",
                help=f"TOML inventory of a live slice for the fabric tests (or set {INVENTORY_ENV})")


def claim_slices(config) -> list[slices.Slice]:
    value = config.getoption("--claims-slices")
    if value == "quick":
        return [slices.load(n) for n in QUICK_SLICES]
    if value == "all":
        return slices.table_i()
    return slices.one_shape([slices.across_vms(slices.load(n.strip()), CLAIMS_ACROSS_VMS)
                             for n in value.split(",") if n.strip()])


CLAIMS_ACROSS_VMS = "the claims compare runs on all of a slice's VMs with runs on one"


def link_scaling(config) -> str:
    return config.getoption("--link-scaling")


def gpu_speeds(config) -> bool:
    return config.getoption("--gpu-speeds")


def trial_model(config):
    return model_config(config.getoption("--trial-model"))


def budget(config, **overrides) -> Budget:
    """What every trial trains (overrides: Budget's fields, for one backend's module); the
    emulated CPU backend combines the collectives where it scales the links (harness.suite.backends)."""
    try:
        return Budget(**{"model": config.getoption("--trial-model"), "repeats": config.getoption("--trial-repeats"),
                         "precision": config.getoption("--trial-precision"), **overrides})
    except TypeError as e:
        raise BadInput(f"budget: {e}") from None


def memory_models(config) -> list:
    return [model_config(m.strip()) for m in config.getoption("--memory-models").split(",") if m.strip()]


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
