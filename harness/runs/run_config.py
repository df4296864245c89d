"""One run's settings: what a claims run trains, on which slices and links, and where it reports.

Every setting has one default, here. A run's configuration is that default, then a TOML file
(`--run-config FILE` to pytest, `--config FILE` to `reproduce`), then what the command line or the
environment gives. `python -m harness reproduce` writes the configuration it ran to
run.toml in the report and hands pytest that file, so the report says what the run was set by.

    slices = "quick"                # 'quick', 'all' (Table I), or Table I names / slice files, comma-separated
    model = "scale-small"           # the model every trial trains
    repeats = 5                     # timed steps per trial
    batch_per_gpu = 2               # optional: sequences per GPU (default: the model's, config.TRIAL_BATCH)
    micro_batches = 2               # optional: microbatches per step (default: the model's)
    precision = "float32"           # float32, float32-full, bfloat16, float16
    link_scaling = "similarity"     # similarity or literal (docs/claims.md, "Similarity scaling")
    gpu_speeds = false              # on CPU, each emulated VM computes at its GPU's speed
    shard = "Shard"                 # the registered technique the claims run as the paper's Shard
    memory_models = ["gpt2m", "gpt2L"]
    memory_compiler = "auto"        # auto, cpu or gpu
    report_dir = "reports/x"        # optional: results.jsonl, claims.md and figures go here
    slice_inventory = "slice.toml"  # optional: a live slice (tests_fabric/, the live backend)
    strict_link = false             # a live slice's pair more than 5% off its slice file's link stops the run

The slices, the live slice and the models are read once, when first asked for, and kept.
"""
import dataclasses
import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness import toml_text
from harness.core.config import PRECISIONS, Budget, model_config
from harness.errors import BadInput
from harness.platform import inventory, slices
from harness.platform.slices import Slice

QUICK_SLICES = ("TACC-TACC", "UTAH-GPN")  # one single-site slice and the nearest two-site one
LINK_SCALINGS = ("similarity", "literal")
MEMORY_COMPILERS = ("auto", "cpu", "gpu")
# The registered techniques that can play the paper's Shard (harness.techniques.contract.cast):
# this suite's planner, and Alpa's as it ran (docs/techniques.md). Named here, not read from the
# registry, so that the pytest plugin reads a configuration without loading JAX; a test checks
# that each is registered.
SHARDS = ("Shard", "Shard-alpa")
CLAIMS_ACROSS_VMS = "the claims compare runs on all of a slice's VMs with runs on one"


# What each setting holds, as a message says it; lists may come as TOML arrays or comma-separated text.
TYPES = {"slices": "a string or a list of strings", "memory_models": "a string or a list of strings",
         "repeats": "an integer", "batch_per_gpu": "an integer", "micro_batches": "an integer",
         "gpu_speeds": "true or false",
         "strict_link": "true or false"}


def _typed(key: str, value) -> bool:
    if key in ("slices", "memory_models") and isinstance(value, (list, tuple)):
        return all(isinstance(v, str) for v in value)
    return type(value) is {"repeats": int, "batch_per_gpu": int, "micro_batches": int, "gpu_speeds": bool,
                           "strict_link": bool}.get(key, str)


def _normal(key: str, value):
    """A list setting as the dataclass keeps it: slices as one comma-separated string, models as a tuple."""
    if key == "slices" and isinstance(value, (list, tuple)):
        return ",".join(value)
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class RunConfig:
    slices: str = "quick"
    model: str = Budget.model
    repeats: int = Budget.repeats
    batch_per_gpu: int | None = None  # None: the model's trial batch (config.TRIAL_BATCH)
    micro_batches: int | None = None
    precision: str = Budget.precision
    link_scaling: str = "similarity"
    gpu_speeds: bool = False
    shard: str = SHARDS[0]
    memory_models: tuple[str, ...] = ("gpt2m", "gpt2L")
    memory_compiler: str = "auto"
    report_dir: str | None = None
    slice_inventory: str | None = None
    strict_link: bool = False
    # setting -> where its value came from (a file, an option), which a message about it names
    origin: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        for name, allowed in (("precision", PRECISIONS), ("link_scaling", LINK_SCALINGS),
                              ("memory_compiler", MEMORY_COMPILERS), ("shard", SHARDS)):
            if getattr(self, name) not in allowed:
                raise BadInput(f"{self.named(name)}: must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if not isinstance(self.slices, str) or not self.slices.strip():
            raise BadInput(f"{self.named('slices')}: must be 'quick', 'all' or a comma-separated list, got {self.slices!r}")
        if isinstance(self.memory_models, str):  # as the command line gives it
            object.__setattr__(self, "memory_models", tuple(m.strip() for m in self.memory_models.split(",")
                                                            if m.strip()))

    # -- where the values come from -----------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "RunConfig":
        """A TOML file's settings over the defaults; an unknown or mistyped key is named."""
        try:
            doc = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise BadInput(f"run configuration {path}: no such file") from None
        except tomllib.TOMLDecodeError as e:
            raise BadInput(f"run configuration {path}: not valid TOML ({e})") from None
        return cls().override({key: f"run configuration {path}: {key}" for key in doc}, **doc)

    def override(self, labels: dict[str, str], **given) -> "RunConfig":
        """These settings over this configuration's (a value of None is not given); labels: how a
        message names each one's source (an option, a file's key)."""
        known = [f.name for f in dataclasses.fields(self) if f.name != "origin"]
        for key, value in given.items():
            if key not in known:
                raise BadInput(f"{labels.get(key, key)}: no such setting; expected one of {', '.join(known)}")
            if value is not None and not _typed(key, value):
                raise BadInput(f"{labels.get(key, key)}: must be {TYPES.get(key, 'a string')}, got {value!r}")
        values = {k: _normal(k, v) for k, v in given.items() if v is not None}
        if not values:
            return self
        origin = {**self.origin, **{k: labels.get(k, k) for k in values}}
        return dataclasses.replace(self, origin=origin, **values)

    def named(self, setting: str) -> str:
        """How a message names a setting: where its value came from, or the setting itself."""
        return self.origin.get(setting, f"run configuration: {setting}")

    def to_toml(self) -> str:
        return toml_text.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "origin"})

    # -- what the values mean, read once ------------------------------------------------------
    @functools.cached_property
    def claim_slices(self) -> list[Slice]:
        """The slices the trials run on, parsed once: a bad name or file fails here, named."""
        if self.slices == "quick":
            return [slices.load(n) for n in QUICK_SLICES]
        if self.slices == "all":
            return slices.table_i()
        return slices.one_shape([slices.across_vms(slices.load(n.strip()), CLAIMS_ACROSS_VMS)
                                 for n in self.slices.split(",") if n.strip()])

    @functools.cached_property
    def live(self) -> inventory.Inventory | None:
        """The live slice's inventory (its slice checked to have VMs to compare across), or None
        when none is given."""
        if not self.slice_inventory:
            return None
        inv = inventory.load(self.slice_inventory)
        return dataclasses.replace(inv, slice=slices.across_vms(inv.slice, CLAIMS_ACROSS_VMS))

    @functools.cached_property
    def memory_model_configs(self) -> list:
        return [model_config(m) for m in self.memory_models]

    def budget(self, **overrides) -> Budget:
        """What every trial trains (overrides: Budget's fields, for one backend's module)."""
        try:
            return Budget(**{"model": self.model, "repeats": self.repeats, "precision": self.precision,
                             "batch_per_gpu": self.batch_per_gpu, "micro_batches": self.micro_batches, **overrides})
        except TypeError as e:
            raise BadInput(f"budget: {e}") from None

    def check(self) -> "RunConfig":
        """Reads everything it names, so that a bad value stops the run before any work, in one
        line that names where the value came from."""
        for setting, read in (("slices", lambda: self.claim_slices), ("model", lambda: model_config(self.model)),
                              ("budget", self.budget), ("memory_models", lambda: self.memory_model_configs),
                              ("slice_inventory", lambda: self.live)):
            try:
                read()
            except BadInput as e:
                if setting == "budget":  # the budget's message names the field that is wrong
                    setting = next((k for k in ("batch_per_gpu", "micro_batches") if k in str(e)), "repeats")
                raise BadInput(f"{self.named(setting)}: {e}") from None
        return self
