"""Where the claims' trials run. A test module that runs the claims names its backend with a marker,

    pytestmark = pytest.mark.claims_backend("emulated-cpu")

and its tests get, through the module-scoped `backend` fixture, a Backend: the runner that times
the trials, the slices and trials the claims judge, and the comparisons the backend declares it
cannot show. The cluster is torn down when the module's tests are done, not held (with its Ray
processes and workers) through the rest of the session, where it would disturb other timings.
"""
import contextlib
import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum

import pytest

from harness import inventory, slices
from harness.cluster import layout
from harness.config import model_config
from harness.emulation import compute
from harness.suite import options
from harness.suite.privileges import require_emulation

MARKER = "claims_backend"


class Kind(StrEnum):
    EMULATED_CPU = "emulated-cpu"  # the Table I slices as network namespaces, the CPU scale model
    EMULATED_GPU = "emulated-gpu"  # the same on this machine's GPUs, shared where there are too few
    LIVE = "live"  # the VMs of a running slice, described by --slice-inventory


@dataclass
class Backend:
    kind: Kind
    runner: object  # harness.trials.Runner
    slices: list  # the slices as given (the paper's links); runner.slices has the links the trials ran on
    trials: list
    declared: str = "none"  # which declared limits apply (deviations.declared)
    scaling: object = None  # harness.calibration.Scaling of an emulated run
    _literal: object = field(default=None, repr=False)

    @property
    def limits(self) -> tuple:
        # deferred: pytest loads the plugin before conftest configures JAX
        from harness.suite import deviations

        return deviations.declared(self.declared)

    def links(self, recs: list[dict]) -> dict | None:
        """The links document of the run (similarity.json): the calibration and, per slice, the
        groups of the link the trials ran on and the paper's. On literal links, the links
        similarity scaling would pick from these trials (recs), worked out once."""
        # deferred: pytest loads the plugin before conftest configures JAX
        from harness import calibration

        if self.kind is not Kind.EMULATED_CPU or self.scaling is None:
            return None
        if self.scaling.mode == calibration.SIMILARITY:
            return self.scaling.to_dict()
        if self._literal is None:
            self._literal = calibration.from_records(self.runner, recs, calibration.LITERAL)
        return self._literal.to_dict()


def kind_of(node) -> Kind | None:
    marker = node.get_closest_marker(MARKER)
    if marker is None:
        return None
    try:
        return Kind(marker.args[0])
    except (IndexError, ValueError):
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.{MARKER} needs one of "
                                f"{', '.join(Kind)}, got {marker.args}") from None


def live_slice(config):
    """(slice, Ray address, platform) from --slice-inventory, or None when none is given."""
    path = config.getoption("--slice-inventory")
    if not path:
        return None
    sl, address, platform = inventory.load(path)
    return slices.across_vms(sl, options.CLAIMS_ACROSS_VMS), address, platform


def wanted_trials(config, kind: Kind) -> list:
    """The trials a backend runs, known at collection time (they parametrize test_trial)."""
    from harness import trials  # deferred: pytest loads the plugin before conftest configures JAX

    if kind is Kind.LIVE:
        live = live_slice(config)
        return trials.trials_for(live[0]) if live else []  # every VM alone too: live VMs differ
    return options.emulated_trials(config)


@contextlib.contextmanager
def open_backend(config, kind: Kind, log=None):
    """log: the session's ClaimsLog, which keeps the calibration trials' records."""
    # deferred: pytest loads the plugin before conftest configures JAX
    from harness import calibration, trials

    wanted = wanted_trials(config, kind)
    if kind is Kind.LIVE:
        live = live_slice(config)
        if live is None:
            pytest.skip(f"no slice inventory: pass --slice-inventory FILE or set {options.INVENTORY_ENV}")
        sl, address, platform = live
        with trials.live(sl, address, options.budget(config), platform) as runner:
            yield Backend(kind, runner, [sl], wanted)
        return
    chosen = options.claim_slices(config)
    if kind is Kind.EMULATED_GPU and not layout.visible_gpus():
        # With fewer GPUs than a slice has, the emulated VMs share them (harness.cluster.layout).
        pytest.skip("no GPU: nvidia-smi lists none (or CUDA_VISIBLE_DEVICES hides them all)")
    speeds = kind is Kind.EMULATED_CPU and options.gpu_speeds(config)
    require_emulation(mixed_gpus=speeds and compute.limited(compute.shares(chosen)))
    # Similarity scaling is for the CPU scale model; GPUs run the paper's models on the paper's links.
    mode = options.link_scaling(config) if kind is Kind.EMULATED_CPU else calibration.LITERAL
    platform, declared = ("cpu", f"{kind}/{mode}") if kind is Kind.EMULATED_CPU else ("gpu", "none")
    scaled = mode == calibration.SIMILARITY
    budget = dataclasses.replace(options.budget(config), combine=scaled)  # GPU-like collectives go with the scaling
    extra = calibration.extra_trials(chosen) if scaled else 0
    buffers = calibration.tcp_buffer_bytes(model_config(budget.model), chosen[0]) if scaled else None
    with trials.emulated(chosen, budget, platform=platform, calibration_trials=extra,
                         tcp_buffer_bytes=buffers, gpu_speeds=speeds) as runner:
        keep = log.add_calibration if log is not None else (lambda record: None)
        scaling = calibration.apply(runner, mode, keep)
        if log is not None:
            log.scaling, log.budget = scaling, budget
        yield Backend(kind, runner, chosen, wanted, declared, scaling)


@pytest.fixture(scope="module")
def backend(request):
    kind = kind_of(request.node)
    if kind is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses the backend fixture without @pytest.mark.{MARKER}")
    with open_backend(request.config, kind, request.getfixturevalue("claims_log")) as b:
        yield b
