"""What the four techniques share: the cluster's mesh, placing arrays on it, microbatching, the Plan.

The mesh has a slow axis and a fast one, as Alpa's 2-D device meshes and MaxText's dcn/ici split:
"hosts" (one per VM; traffic on it crosses the network between VMs) and "devices" (the
accelerators inside a VM). In a multi-process run each process is one VM and owns one row.
"""
from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.errors import BadInput

HOSTS, DEVICES = "hosts", "devices"
ALL = (HOSTS, DEVICES)


@dataclass(frozen=True)
class ClusterShape:
    hosts: int  # VMs
    devices_per_host: int  # GPUs per VM (CPU devices in the scale model)

    def __post_init__(self):
        if self.hosts < 1 or self.devices_per_host < 1:
            raise BadInput(f"cluster shape {self}: hosts and devices per host must be positive")

    @property
    def n_devices(self) -> int:
        return self.hosts * self.devices_per_host

    def __str__(self) -> str:
        return f"{self.hosts}x{self.devices_per_host}"


def make_mesh(shape: ClusterShape, devices=None) -> Mesh:
    devices = list(devices if devices is not None else jax.devices())
    if len(devices) < shape.n_devices:
        raise BadInput(f"cluster {shape} needs {shape.n_devices} devices, JAX sees {len(devices)}")
    # Processes are numbered VM by VM, each VM with as many (one, or one per shared GPU:
    # harness.backends.layout), so sorting by process first makes each mesh row one VM.
    devices = sorted(devices, key=lambda d: (d.process_index, d.id))[: shape.n_devices]
    grid = np.array(devices, dtype=object).reshape(shape.hosts, shape.devices_per_host)
    per_vm = max(1, jax.process_count() // shape.hosts)
    if jax.process_count() > 1 and any(len({d.process_index // per_vm for d in row}) != 1 for row in grid):
        raise BadInput(f"cluster {shape}: each VM must be whole processes with {shape.devices_per_host} devices "
                       f"together")
    return Mesh(grid, ALL)


def place(tree, mesh: Mesh, specs):
    """Put host arrays (the same on every process) onto the mesh, each device taking its shard."""
    def put(x, spec):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, NamedSharding(mesh, spec), lambda idx: x[idx])

    return jax.tree.map(put, tree, specs)


def shardings(mesh: Mesh, specs):
    return jax.tree.map(lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda x: isinstance(x, P))


def local_scalar(x) -> float:
    """A replicated (or per-device) scalar, read from this process's first shard without a collective."""
    return float(np.asarray(x.addressable_shards[0].data).reshape(-1)[0])


def microbatches(x, m: int):
    """[B, ...] -> [m, B/m, ...], microbatch i holding rows i, i+m, i+2m, ...

    Interleaving keeps every microbatch spread evenly over the devices that hold slices of the
    batch, so splitting into microbatches moves no data between devices.
    """
    return x.reshape(x.shape[0] // m, m, *x.shape[1:]).swapaxes(0, 1)


def accumulate(loss_and_grad: Callable, params, inputs, targets, m: int):
    """Mean loss and gradient over m microbatches, one at a time (gradient accumulation)."""
    if m == 1:
        return loss_and_grad(params, inputs, targets)

    def one(carry, batch):
        loss, grads = loss_and_grad(params, *batch)
        return jax.tree.map(jnp.add, carry, (loss, grads)), None

    xs, ys = microbatches(inputs, m), microbatches(targets, m)
    # The first microbatch seeds the sum, so the carry has exactly the type (and, inside
    # shard_map, the device-variance) of a gradient.
    first = loss_and_grad(params, xs[0], ys[0])
    (loss, grads), _ = jax.lax.scan(one, first, (xs[1:], ys[1:]))
    return loss / m, jax.tree.map(lambda g: g / m, grads)


def dict_path(path) -> tuple[str, ...]:
    """A parameter's path in the model's nested dict (tree_map_with_path's keys) as names."""
    return tuple(k.key for k in path if isinstance(k, jax.tree_util.DictKey))


def check_divisible(what: str, total: int, parts: int, into: str) -> None:
    if parts < 1 or total % parts:
        raise BadInput(f"{what} {total} is not divisible by {into} {parts}")


@dataclass
class Plan:
    """A technique applied to one model on one cluster: layout, shardings and the train step.

    step(params, opt_state, inputs, targets) -> (params, opt_state, loss), with params and
    opt_state in the technique's layout and sharding, inputs/targets as placed by place_batch().
    """
    technique: str
    mesh: Mesh
    micro_batches: int
    layout: Callable  # canonical params (model.init) -> the technique's parameter tree
    param_specs: object
    opt_init: Callable  # layout params -> optimizer state
    opt_specs: object
    batch_layout: Callable  # [B, T] -> what step expects (Pipeshard: microbatches first)
    batch_spec: P
    step: Callable  # jitted, donating params and optimizer state
    details: dict = field(default_factory=dict)
    # (params, opt_state) in the technique's layout -> the model's own parameter tree (model.init's),
    # the inverse of layout; None where the layout is that tree. DiLoCo's model is its outer one.
    canonical: Callable | None = None

    def describe(self) -> str:
        lines = [f"{self.technique} on mesh {dict(self.mesh.shape)} (hosts = VMs, devices = GPUs per VM), "
                 f"{self.micro_batches} microbatch(es)"]
        lines += [f"  {k}: {v}" for k, v in self.details.items()]
        return "\n".join(lines)

    def init_state(self, canonical_params):
        params = place(jax.device_get(self.layout(canonical_params)), self.mesh, self.param_specs)
        opt_state = jax.jit(self.opt_init, out_shardings=shardings(self.mesh, self.opt_specs))(params)
        return params, opt_state

    def model_params(self, params, opt_state):
        """The model the technique has trained so far, in the model's own tree, whole on every
        device (every process of a run calls this in step): what a held-out loss is computed on."""
        canonical = self.canonical or (lambda p, _: p)
        return jax.jit(canonical, out_shardings=NamedSharding(self.mesh, P()))(params, opt_state)

    def place_batch(self, inputs, targets):
        return tuple(place(self.batch_layout(np.asarray(x)), self.mesh, self.batch_spec) for x in (inputs, targets))

    def abstract_args(self, abstract_params, batch: int, seq_len: int):
        """ShapeDtypeStructs with shardings for compiling the step without allocating anything."""
        def struct(tree, specs):
            return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(self.mesh, s)),
                                tree, specs)

        params = jax.eval_shape(self.layout, abstract_params)
        opt_state = jax.eval_shape(self.opt_init, params)
        tokens = jax.eval_shape(self.batch_layout, jax.ShapeDtypeStruct((batch, seq_len), jnp.int32))
        return (struct(params, self.param_specs), struct(opt_state, self.opt_specs),
                struct(tokens, self.batch_spec), struct(tokens, self.batch_spec))
