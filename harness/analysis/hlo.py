"""Reading a compiled step's HLO: which collectives it runs, over which devices, inside which loops.

Structural conformance tests use this to check that a technique communicates the way its
definition says (Data all-reduces gradients across VMs, Pipeshard only permutes between them,
...). Device numbers in replica groups are positions in the mesh's flattened device list, so
with a [hosts, devices] mesh, device i lives on VM i // devices_per_host.
"""
import math
import re
from dataclasses import dataclass

import numpy as np

from harness.analysis.memory import COMPILE_ONLY  # the HLO is read, never run: skip LLVM's optimisation

OPS = ("all-reduce", "reduce-scatter", "all-gather", "collective-permute", "all-to-all")
INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%(?P<name>\S+)\s*=\s*(?P<shape>.*?)\s(?P<op>" + "|".join(OPS) + r")(?:-start)?\(")
COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%(?P<name>[\w.\-]+)\s.*\{\s*$")
CALLEES = re.compile(r"(?:body|condition|calls|true_computation|false_computation)=%([\w.\-]+)")
ARMS = re.compile(r"(?:true_computation|false_computation)=%([\w.\-]+)")
BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
ARRAY = re.compile(r"\b[a-z]+\d*\[([\d,]*)\]")


@dataclass
class Collective:
    op: str
    groups: list[list[int]]  # replica groups; for permutes, the (source, target) pairs
    elements: int  # values in the result (all arrays of a combined collective)
    computation: str
    in_loop: bool  # inside a while loop's body (a scanned layer, a pipeline tick, a microbatch)
    in_branch: bool = False  # inside a conditional's branch: runs only on the steps that take it
    name: str = ""  # its instruction's

    def hosts(self, devices_per_host: int) -> list[set[int]]:
        return [{d // devices_per_host for d in g} for g in self.groups]

    def crosses_hosts(self, devices_per_host: int) -> bool:
        return any(len(h) > 1 for h in self.hosts(devices_per_host))


def _groups(line: str, n_devices: int) -> list[list[int]]:
    if m := re.search(r"source_target_pairs=\{(.*?)\}\}", line):
        return [list(map(int, p.split(","))) for p in re.findall(r"\{(\d+,\d+)", m.group(1) + "}")]
    if m := re.search(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", line):
        groups, size, dims, perm = m.groups()
        ids = np.arange(math.prod(map(int, dims.split(",")))).reshape([int(d) for d in dims.split(",")])
        if perm:
            ids = ids.transpose([int(p) for p in perm.split(",")])
        return ids.reshape(int(groups), int(size)).tolist()
    if m := re.search(r"replica_groups=\{(\{[\d,{}]*\})?\}", line):
        found = re.findall(r"\{([\d,]+)\}", m.group(0))
        return [list(map(int, g.split(","))) for g in found] or [list(range(n_devices))]
    return [list(range(n_devices))]


def collectives(hlo_text: str, n_devices: int) -> list[Collective]:
    calls: dict[str, set[str]] = {}
    found: list[tuple[str, re.Match, str]] = []
    current = None
    for line in hlo_text.splitlines():
        if m := COMPUTATION.match(line):
            current = m.group("name")
            calls.setdefault(current, set())
            continue
        if current is None:
            continue
        calls[current].update(CALLEES.findall(line))
        for group in BRANCHES.findall(line):
            calls[current].update(n.strip().lstrip("%") for n in group.split(","))
        if m := INSTRUCTION.match(line):
            found.append((current, m, line))

    loop_bodies, arms = set(), set()
    for text in hlo_text.splitlines():
        loop_bodies.update(re.findall(r"\swhile\(.*body=%([\w.\-]+)", text))
        arms.update(ARMS.findall(text))
        for group in BRANCHES.findall(text):
            arms.update(n.strip().lstrip("%") for n in group.split(","))
    inside, in_arms = _reached(loop_bodies, calls), _reached(arms, calls)

    result = []
    for computation, m, line in found:
        shape = m.group("shape").split(" all-", 1)[0]
        elements = sum(math.prod(int(d) for d in dims.split(",") if d) for dims in ARRAY.findall(shape))
        result.append(Collective(m.group("op"), _groups(line, n_devices), elements, computation,
                                 computation in inside, computation in in_arms, m.group("name")))
    return result


def _reached(roots: set[str], calls: dict[str, set[str]]) -> set[str]:
    """The computations in roots and everything they call."""
    reached, frontier = set(), list(roots)
    while frontier:
        name = frontier.pop()
        if name not in reached:
            reached.add(name)
            frontier.extend(calls.get(name, ()))
    return reached


def of(plan, *args) -> list[Collective]:
    """The collectives of a Plan's step compiled for the given (abstract) arguments."""
    text = plan.step.lower(*args).compile(COMPILE_ONLY).as_text()
    return collectives(text, plan.mesh.devices.size)



DEFINES = re.compile(r"^\s*(?:ROOT\s+)?%(?P<name>[\w.\-]+)\s*=\s*\S.*?\s(?P<op>[a-z][\w\-]*)\(")


def beside(hlo_text: str, c: Collective) -> list[str]:
    """The loops (a microbatch's forward and backward, a scan over layers) in c's own computation
    that c neither reads nor is read by: nothing orders them before or after it, so a runtime that
    runs independent work together may run them while c is in flight."""
    body: dict[str, tuple[str, list[str]]] = {}  # c's computation: instruction -> (op, operands)
    current = None
    for line in hlo_text.splitlines():
        if m := COMPUTATION.match(line):
            current = m.group("name")
        elif current == c.computation and (m := DEFINES.match(line)):
            body[m.group("name")] = (m.group("op"), re.findall(r"%([\w.\-]+)", line.split("=", 1)[1]))
    if c.name not in body:
        raise ValueError(f"no instruction {c.name} in computation {c.computation}")
    operands = {name: [o for o in ops if o in body] for name, (_, ops) in body.items()}
    users: dict[str, list[str]] = {name: [] for name in body}
    for name, ops in operands.items():
        for o in ops:
            users[o].append(name)

    def closure(start: str, edges: dict) -> set[str]:
        seen, frontier = set(), list(edges[start])
        while frontier:
            name = frontier.pop()
            if name not in seen:
                seen.add(name)
                frontier.extend(edges[name])
        return seen

    ordered = closure(c.name, operands) | closure(c.name, users)
    return [name for name, (op, _) in body.items() if op == "while" and name not in ordered]
