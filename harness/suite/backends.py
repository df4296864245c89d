"""Where the claims' trials run. A test module that runs the claims names its backend with a marker,

    pytestmark = pytest.mark.claims_backend("emulated-cpu")

and its tests get, through the module-scoped `backend` fixture, a Backend: the runner that times
the trials, the slices and trials the claims judge, and the comparisons the backend declares it
cannot show. The cluster is torn down when the module's tests are done, not held (with its Ray
processes and workers) through the rest of the session, where it would disturb other timings.

A backend is registered under its name (register): which trials it runs, known when the tests
are collected, and how it opens its cluster (a harness.backends.contract.Cluster) and the runner
over it. A new one is a function here, or in a plugin of its own that calls register.
"""
import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from harness.backends import layout
from harness.backends.emulation import compute
from harness.core.config import Technique, model_config
from harness.suite import options
from harness.suite.privileges import require_emulation

if TYPE_CHECKING:  # the types only: the plugin loads before conftest configures JAX, which these import
    from harness.experiments.calibration import Scaling
    from harness.runs.trials import Runner, Trial

MARKER = "claims_backend"


@dataclass
class Backend:
    name: str
    runner: "Runner"
    slices: list  # the slices as given (the paper's links); runner.slices has the links the trials ran on
    trials: "list[Trial]"
    declared: str = "none"  # which declared limits apply (deviations.declared)
    scaling: "Scaling | None" = None  # the links of a run on the CPU scale model's emulated links
    _literal: object = field(default=None, repr=False)

    @property
    def limits(self) -> tuple:
        # deferred: pytest loads the plugin before conftest configures JAX
        from harness.paper import deviations

        return deviations.declared(self.declared)

    def links(self, recs: list[dict]) -> dict | None:
        """The links document of the run (similarity.json): the calibration and, per slice, the
        groups of the link the trials ran on and the paper's. On literal links, the links
        similarity scaling would pick from these trials (recs), worked out once."""
        # deferred: pytest loads the plugin before conftest configures JAX
        from harness.experiments import calibration

        if self.scaling is None:
            return None
        if self.scaling.mode == calibration.SIMILARITY:
            return self.scaling.to_dict()
        if self._literal is None:
            self._literal = calibration.from_records(calibration.ScaleModel.of_runner(self.runner), recs,
                                                     self.runner.paper_slices, calibration.LITERAL,
                                                     getattr(self.runner.cluster, "tcp_buffer_bytes", None))
        return self._literal.to_dict()


@dataclass(frozen=True)
class Registered:
    name: str
    about: str
    trials: Callable  # (pytest config) -> the trials it runs, which parametrize test_trial
    open: Callable  # (pytest config, ClaimsLog or None, Budget) -> a context manager that yields a Backend


REGISTRY: dict[str, Registered] = {}


def register(name: str, about: str, trials: Callable):
    """Decorates a generator function (config, log, budget) that yields the Backend it opened, and
    closes it after the yield, as the backend named `name`."""
    def add(opener):
        if name in REGISTRY:
            raise ValueError(f"backend {name!r} is registered twice")
        REGISTRY[name] = Registered(name, about, trials, contextlib.contextmanager(opener))
        return opener
    return add


def registered_of(node) -> Registered | None:
    marker = node.get_closest_marker(MARKER)
    if marker is None:
        return None
    name = marker.args[0] if len(marker.args) == 1 else None
    if name not in REGISTRY:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.{MARKER} needs one of "
                                f"{', '.join(REGISTRY)}, got {marker.args}")
    return REGISTRY[name]


def live_slice(config):
    """The live slice's inventory (harness.platform.inventory.Inventory) from --slice-inventory,
    or None when none is given."""
    return options.run_config(config).live


def _live_trials(config) -> list:
    from harness.runs import trials  # deferred: pytest loads the plugin before conftest configures JAX

    live = live_slice(config)
    return trials.trials_for(live.slice) if live else []  # every VM alone too: live VMs differ


@register("live", "the VMs of a running slice, described by --slice-inventory", _live_trials)
def _live(config, log, budget):
    # deferred: pytest loads the plugin before conftest configures JAX
    from harness.backends import ray_clusters
    from harness.runs import trials

    inv = live_slice(config)
    if inv is None:
        pytest.skip(f"no slice inventory: pass --slice-inventory FILE or set {options.INVENTORY_ENV}")
    with contextlib.ExitStack() as stack:
        try:
            cluster = stack.enter_context(ray_clusters.live(inv, strict_link=options.run_config(config).strict_link))
        except ray_clusters.LinkOff as e:
            pytest.exit(f"--strict-link: the slice's link is not its slice file's: {e}", returncode=3)
        runner = trials.Runner(cluster, [inv.slice], budget, memory_compiler=options.run_config(config).memory_compiler)
        yield Backend("live", runner, [inv.slice], _live_trials(config))


@register("emulated-cpu", "the Table I slices as network namespaces, the CPU scale model", options.emulated_trials)
def _emulated_cpu(config, log, budget):
    yield from _emulated(config, log, budget, "cpu")


@register("emulated-gpu", "the same on this machine's GPUs, shared where there are too few", options.emulated_gpu_trials)
def _emulated_gpu(config, log, budget):
    if not layout.visible_gpus():
        # With fewer GPUs than a slice has, the emulated VMs share them (harness.backends.layout).
        pytest.skip("no GPU: nvidia-smi lists none (or CUDA_VISIBLE_DEVICES hides them all)")
    yield from _emulated(config, log, budget, "gpu")


def _emulated(config, log, budget, platform: str):
    """log: the session's ClaimsLog, which keeps the calibration trials' records."""
    # deferred: pytest loads the plugin before conftest configures JAX
    from harness.backends import ray_clusters
    from harness.experiments import calibration
    from harness.runs import trials

    chosen = options.claim_slices(config)
    speeds = platform == "cpu" and options.gpu_speeds(config)
    require_emulation(mixed_gpus=speeds and compute.limited(compute.shares(chosen)))
    # Similarity scaling is for the CPU scale model; GPUs run the paper's models on the paper's links.
    mode = options.link_scaling(config) if platform == "cpu" else calibration.LITERAL
    declared = f"emulated-cpu/{mode}" if platform == "cpu" else "none"
    scaled = mode == calibration.SIMILARITY
    budget = dataclasses.replace(budget, combine=scaled)  # GPU-like collectives go with the scaling
    extra = calibration.extra_trials(chosen) if scaled else 0
    buffers = calibration.tcp_buffer_bytes(model_config(budget.model), chosen[0]) if scaled else None
    with ray_clusters.emulated(chosen, platform=platform, tcp_buffer_bytes=buffers, gpu_speeds=speeds) as cluster:
        runner = trials.Runner(cluster, chosen, budget, calibration_trials=extra,
                               memory_compiler=options.run_config(config).memory_compiler)
        keep = log.add_calibration if log is not None else (lambda record: None)
        scaling = calibration.apply(runner, mode, keep)
        if log is not None:
            log.scaling, log.budget = scaling, budget
        trials_of = options.emulated_trials if platform == "cpu" else options.emulated_gpu_trials
        yield Backend(f"emulated-{platform}", runner, chosen, trials_of(config), declared,
                      scaling if platform == "cpu" else None)


def local_trials(config) -> list:
    """Every technique on all VMs of the first claims slice and on its first VM alone."""
    from harness.runs import trials  # deferred: pytest loads the plugin before conftest configures JAX

    sl = options.claim_slices(config)[0]
    return [trials.Trial.on(sl, t, vms) for vms in (trials.ALL_VMS, sl.vms[0].name) for t in Technique]


@register("local", "the first claims slice's VMs as processes of this machine over loopback: no root, no "
                   "delay (the trial path as any user runs it)", local_trials)
def _local(config, log, budget):
    # deferred: pytest loads the plugin before conftest configures JAX
    from harness.backends import local
    from harness.runs import trials

    sl = options.claim_slices(config)[0]
    with local.local(sl) as cluster:
        runner = trials.Runner(cluster, [sl], budget, memory_compiler=options.run_config(config).memory_compiler)
        yield Backend("local", runner, [sl], local_trials(config))


@pytest.fixture(scope="module")
def backend(request):
    registered = registered_of(request.node)
    if registered is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses the backend fixture without @pytest.mark.{MARKER}")
    # The marker's keywords change the budget for its module alone (a smaller model, say).
    budget = options.budget(request.config, **request.node.get_closest_marker(MARKER).kwargs)
    with registered.open(request.config, request.getfixturevalue("claims_log"), budget) as b:
        yield b
