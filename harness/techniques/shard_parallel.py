"""Shard: intra-operator (SPMD) parallelism chosen automatically, as alpa.ShardParallel.

Alpa's auto-sharding solves an ILP over per-operator shardings. Here the search space is the
one that matters for a GPT: the N devices are factorised into a data axis and a tensor axis
(each of them made of a part of the VM axis and a part of the in-VM axis), and
- the tensor axis splits attention by heads and the MLP by its hidden units, Megatron-style
  (column split of qkv and fc, row split of the output projections), which costs two
  all-reduces of activations per layer forward and two backward;
- the data axis splits the batch, which costs an all-reduce of the gradients per step;
- optionally Adam's moments are also split over the data axis (ZeRO-1 within the plan).
Every plan is priced by an explicit cost model (compute + communication, each collective over
the links it really crosses) and the cheapest that fits in device memory wins. GSPMD (jax.jit
with these shardings) then inserts the collectives; the model code knows nothing of it.
"""
import itertools
from dataclasses import dataclass

import jax
import optax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from harness.analysis.netmodel import Links
from harness.core import flops, model, optim
from harness.core.config import GPTConfig, Technique, TrainConfig
from harness.errors import BadInput
from harness.techniques.common import ClusterShape, Plan, accumulate, check_divisible, dict_path, make_mesh, shardings
from harness.techniques.contract import ALL_REDUCE, Collective, Cost, ParallelMethod, Step, activations, register

AXES = ("hosts_data", "hosts_tensor", "devices_data", "devices_tensor")
DATA, TENSOR = ("hosts_data", "devices_data"), ("hosts_tensor", "devices_tensor")

# Megatron column/row splits, by parameter path inside a block. Block parameters carry a leading
# layer axis (None); qkv is [layer, embd, 3, heads, head_dim], the attention output [layer, heads,
# head_dim, embd]. Everything not listed (embeddings, LayerNorms, output biases) is replicated.
TENSOR_RULES = {
    ("attn", "qkv", "kernel"): P(None, None, None, TENSOR, None),
    ("attn", "qkv", "bias"): P(None, None, TENSOR, None),
    ("attn", "proj", "kernel"): P(None, TENSOR, None, None),
    ("mlp", "fc", "kernel"): P(None, None, TENSOR),
    ("mlp", "fc", "bias"): P(None, TENSOR),
    ("mlp", "proj", "kernel"): P(None, TENSOR, None),
}


@dataclass(frozen=True)
class IntraOpPlan:
    data: tuple[int, int]  # (part over VMs, part inside a VM)
    tensor: tuple[int, int]
    shard_optimizer: bool

    @property
    def data_size(self) -> int:
        return self.data[0] * self.data[1]

    @property
    def tensor_size(self) -> int:
        return self.tensor[0] * self.tensor[1]

    def __str__(self) -> str:
        def axis(name, size, hosts):
            where = "across VMs" if hosts > 1 else "inside VMs"
            return f"{name} {size}" + (f" ({where})" if size > 1 else "")

        text = f"{axis('data', self.data_size, self.data[0])} x {axis('tensor', self.tensor_size, self.tensor[0])}"
        return text + (", optimizer state split over data" if self.shard_optimizer else "")


def candidate_plans(shape: ClusterShape) -> list[IntraOpPlan]:
    """Every factorisation of hosts and of devices into data x tensor, with and without ZeRO-1."""
    def splits(n):
        return [(a, n // a) for a in range(1, n + 1) if n % a == 0]

    return [IntraOpPlan((hd, dd), (ht, dt), zero)
            for (hd, ht), (dd, dt), zero in itertools.product(splits(shape.hosts), splits(shape.devices_per_host),
                                                             (False, True))
            if not zero or hd * dd > 1]  # splitting the optimizer over a data axis of 1 is no plan


def plan_problem(plan: IntraOpPlan, model_cfg: GPTConfig, batch: int, micro_batches: int) -> str | None:
    t = plan.tensor_size
    if model_cfg.n_head % t:
        return f"tensor axis {t} does not divide n_head {model_cfg.n_head}"
    if batch % (plan.data_size * micro_batches):
        return f"data axis {plan.data_size} x microbatches {micro_batches} does not divide batch {batch}"
    return None


def estimate(plan: IntraOpPlan, model_cfg: GPTConfig, batch: int, seq_len: int, micro_batches: int,
             links: Links, device_flops: float, bytes_per_value: int = 4) -> dict:
    """Seconds per step (compute, tensor-parallel and data-parallel communication) and bytes per device."""
    d, t, layers, h = plan.data_size, plan.tensor_size, model_cfg.n_layer, model_cfg.n_embd
    total = flops.alpa_step_flops(model_cfg, batch, seq_len)
    head = flops.head_flops(model_cfg, batch, seq_len)  # replicated over the tensor axis
    compute = ((total - head) / (d * t) + head / d) / device_flops

    block = flops.block_params(model_cfg)
    other = flops.param_count(model_cfg) - layers * block
    local_params = layers * block / t + other  # what one device holds and must keep in sync

    activation = batch / d / micro_batches * seq_len * h * bytes_per_value
    tensor_comm = 4 * layers * micro_batches * links.all_reduce_s(activation, *plan.tensor)
    data_comm = links.all_reduce_s(local_params * bytes_per_value, *plan.data)

    opt = 2 * local_params * bytes_per_value / (d if plan.shard_optimizer else 1)
    b_local, heads = batch / d / micro_batches, model_cfg.n_head
    # Activations kept for backward per layer (Korthikanti et al. 2022, in values, split by tensor parallelism).
    acts = layers * seq_len * b_local * (5 * h + 12 * h / t) + layers * 2.5 * heads * seq_len**2 * b_local / t
    memory = (2 * local_params * bytes_per_value + opt + acts * bytes_per_value)
    return {"seconds": compute + tensor_comm + data_comm, "compute_s": compute, "tensor_comm_s": tensor_comm,
            "data_comm_s": data_comm, "bytes_per_device": memory}


def choose(shape: ClusterShape, model_cfg: GPTConfig, batch: int, seq_len: int, micro_batches: int,
           links: Links, device_flops: float, device_memory: float | None = None) -> tuple[IntraOpPlan, dict, list]:
    """The cheapest plan that fits, its estimate, and every plan considered with its estimate or problem.
    When none fits device_memory, the plan that needs the least: a planner cannot make the model
    fit, so the run (or the compile-only memory analysis) goes on to find it out of memory, as
    every other technique's does, rather than fail as if the input were wrong."""
    table = []
    for plan in candidate_plans(shape):
        problem = plan_problem(plan, model_cfg, batch, micro_batches)
        est = None if problem else estimate(plan, model_cfg, batch, seq_len, micro_batches, links, device_flops)
        if est and device_memory and est["bytes_per_device"] > device_memory:
            problem = f"needs {est['bytes_per_device'] / 1e9:.1f} GB per device > {device_memory / 1e9:.1f} GB"
        table.append((plan, est, problem))
    feasible = [(plan, est) for plan, est, problem in table if problem is None]
    if feasible:
        plan, est = min(feasible, key=lambda pe: pe[1]["seconds"])
        return plan, est, table
    too_big = [(plan, est) for plan, est, _ in table if est]
    if not too_big:
        raise BadInput(f"Shard: no intra-op plan for {model_cfg.name} on {shape}: " + "; ".join(
            f"{p}: {why}" for p, _, why in table))
    plan, est = min(too_big, key=lambda pe: pe[1]["bytes_per_device"])
    return plan, est, table


def param_spec(path: tuple[str, ...], shape: tuple[int, ...], plan: IntraOpPlan, moments: bool) -> P:
    spec = next((s for suffix, s in TENSOR_RULES.items() if path[-3:] == suffix and plan.tensor_size > 1), P())
    if moments and plan.shard_optimizer and plan.data_size > 1:
        # Split Adam's moments over the data axis too, along the first free dimension that divides.
        dims = list(spec) + [None] * (len(shape) - len(spec))
        for i, size in enumerate(shape):
            if dims[i] is None and size % plan.data_size == 0:
                dims[i] = DATA
                return P(*dims)
    return spec


@register
class ShardParallel(ParallelMethod):
    name = Technique.SHARD

    def __init__(self, micro_batches: int = 1, plan: IntraOpPlan | None = None, links: Links | None = None,
                 device_flops: float = 1e12, device_memory: float | None = None):
        self.micro_batches, self.plan, self.links = micro_batches, plan, links or Links()
        self.device_flops, self.device_memory = device_flops, device_memory

    @classmethod
    def configured(cls, setup, sl, vms) -> "ShardParallel":
        """As Alpa plans (setup.alpa_shard): the uniform mesh, no memory budget; otherwise this
        suite's planner, which sees the slice's RTT and its GPUs' speed and memory."""
        if setup.alpa_shard:
            return cls(micro_batches=setup.micro_batches)
        gpus = [vm.accelerator for vm in sl.vms if vm.name in vms]
        return cls(micro_batches=setup.micro_batches, links=Links.for_rtt(sl.rtt_ms),
                   device_flops=min(g.peak_tflops(setup.precision) for g in gpus) * 1e12,
                   device_memory=min(g.usable_bytes for g in gpus))

    def validate(self, model_cfg: GPTConfig, shape: ClusterShape, batch: int) -> None:
        check_divisible("batch", batch, self.micro_batches, "microbatches")
        if self.plan:
            problem = plan_problem(self.plan, model_cfg, batch, self.micro_batches)
            if problem:
                raise BadInput(f"Shard plan {self.plan}: {problem}")

    def build(self, model_cfg: GPTConfig, shape: ClusterShape, cfg: TrainConfig, total_steps: int,
              devices=None) -> Plan:
        self.validate(model_cfg, shape, cfg.batch_size)
        seq_len = cfg.resolved_seq_len(model_cfg)
        if self.plan:
            plan, considered, fits = self.plan, 1, True
            est = estimate(plan, model_cfg, cfg.batch_size, seq_len, self.micro_batches, self.links, self.device_flops)
        else:
            plan, est, table = choose(shape, model_cfg, cfg.batch_size, seq_len, self.micro_batches, self.links,
                                      self.device_flops, self.device_memory)
            considered = len(table)
            fits = not self.device_memory or est["bytes_per_device"] <= self.device_memory
        physical = make_mesh(shape, devices).devices
        mesh = Mesh(physical.reshape(plan.data[0], plan.tensor[0], plan.data[1], plan.tensor[1]), AXES)

        graphdef, abstract = model.abstract_init(model_cfg)
        optimizer = optim.make(cfg, total_steps, abstract)
        param_specs = jax.tree_util.tree_map_with_path(
            lambda path, x: param_spec(dict_path(path), x.shape, plan, moments=False), abstract)
        opt_specs = jax.tree_util.tree_map_with_path(
            lambda path, x: param_spec(dict_path(path), x.shape, plan, moments=True) if dict_path(path) else P(),
            jax.eval_shape(optimizer.init, abstract))
        batch_spec = P(DATA)

        def step(params, opt_state, inputs, targets):
            grad_fn = jax.value_and_grad(lambda p, x, y: model.loss_fn(graphdef, p, x, y))
            loss, grads = accumulate(grad_fn, params, inputs, targets, self.micro_batches)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        ps, os_, bs = shardings(mesh, param_specs), shardings(mesh, opt_specs), shardings(mesh, batch_spec)
        return Plan(
            technique=self.name, mesh=mesh, micro_batches=self.micro_batches,
            layout=lambda params: params, param_specs=param_specs,
            opt_init=optimizer.init, opt_specs=opt_specs,
            batch_layout=lambda x: x, batch_spec=batch_spec,
            step=jax.jit(step, in_shardings=(ps, os_, bs, bs), out_shardings=(ps, os_, shardings(mesh, P())),
                         donate_argnums=(0, 1)),
            details={"plan": str(plan) + (" (given)" if self.plan else " (cheapest by the cost model)" if fits
                                          else " (none fits the device's memory: the one that needs the least)"),
                     "estimated step": f"{est['seconds'] * 1e3:.2f} ms = compute {est['compute_s'] * 1e3:.2f} "
                                       f"+ tensor comm {est['tensor_comm_s'] * 1e3:.2f} "
                                       f"+ data comm {est['data_comm_s'] * 1e3:.2f}",
                     "plans considered": considered},
        )

    @staticmethod
    def cost(s: Step) -> Cost:
        """Planned as Alpa plans it (the mesh seen as uniform): activations all-reduced four times
        per layer and microbatch on the tensor axis, each parameter's gradient per layer and
        microbatch on the data axis (GSPMD puts them inside the loops)."""
        cfg, m = s.cfg, s.m
        plan, _, _ = choose(ClusterShape(s.hosts, s.d), cfg, s.batch, s.seq, m, Links(), 1e12)
        t, data = plan.tensor_size, plan.data_size
        head = flops.head_flops(cfg, s.batch, s.seq)
        compute = ((s.total_flops - head) / (data * t) + head / data) / s.slowest
        block = flops.block_params(cfg)
        other = s.params - cfg.n_layer * block
        act_local = s.batch / data / m * s.seq * cfg.n_embd * s.value
        # 12 tensors per block, and the embeddings' and final LayerNorm's 4, per microbatch.
        wire = [Collective(ALL_REDUCE, (act_local,), plan.tensor, times=4 * cfg.n_layer * m, per_microbatch=True,
                           what="activations on the tensor axis"),
                Collective(ALL_REDUCE, (4 * block / t / 12,), plan.data, times=12 * cfg.n_layer * m,
                           per_microbatch=True, what="the blocks' gradients on the data axis"),
                Collective(ALL_REDUCE, (4 * other / 4,), plan.data, times=4 * m, per_microbatch=True,
                           what="the embeddings' and final LayerNorm's gradients on the data axis")]
        local = cfg.n_layer * block / t + other
        memory = (8 * local + 8 * local / (data if plan.shard_optimizer else 1)
                  + activations(cfg, s.batch / data / m, s.seq, s.value, t))
        return Cost(compute, wire, memory, notes=[f"plan (Alpa's, mesh seen as uniform): {plan}"])
