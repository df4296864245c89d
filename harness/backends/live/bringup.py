"""`live up`, `live status` and `live down`: a live slice's VMs made into the suite's cluster over SSH.

up, on every VM at once (each step done on all before the next starts):
  1. check   Python 3.11+, the harness's dependencies, the GPUs the slice file gives;
  2. install the harness into a venv in the VM's workdir, from a wheel built here and copied
             over (the VMs need no package index; the venv sees the interpreter's packages);
  3. measure every pair's RTT and one TCP flow (harness.backends.live.links);
  4. Ray     the head on the first VM, a worker on the others, each with its VM's custom resource,
             one token (kept in the workdirs, never in the inventory), timeouts scaled to the RTT;
then writes the inventory (harness.platform.inventory) with the measured links.

A failure at any step stops what was started and removes the workdirs; a bad host fails the
check, before anything is started. down stops the trees rooted in each workdir and removes it.
"""
import asyncio
import contextlib
import importlib.metadata
import json
import re
import secrets
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import harness
from harness.backends.live import host_check, links, ssh
from harness.backends.live.hosts import Host, Hosts
from harness.backends.ray_nodes import OBJECT_STORE_BYTES
from harness.errors import BadInput
from harness.platform import hardware
from harness.progress import say

RAY_PORT = 6379
MIN_PYTHON = (3, 11)
MARK = ".made-by-live-up"  # a workdir without it is not up's to replace or remove


# The VMs run the Ray driver, the workers and the link probes; these serve only the machine that
# runs the commands and pytest (the plugin, the figures, SSH, the emulator's netem).
USER_SIDE_ONLY = {"pytest", "pytest-benchmark", "matplotlib", "asyncssh", "pyroute2"}
# What the VMs' processes import, checked in the venv once the harness is in it.
VM_MODULES = ("harness.backends.ray_driver", "harness.backends.worker", "harness.runs.jobs",
              "harness.backends.emulation.probe", "harness.backends.live.remote")


def requirements() -> list[str]:
    """The distributions a VM needs, by name (the harness's wheel goes in without them), and pip."""
    out = []
    for req in importlib.metadata.requires("fabric-harness") or []:
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0)
        if "extra ==" not in req and name not in USER_SIDE_ONLY:
            out.append(name)
    return ["pip", *out]


def build_wheel(into: str) -> str:
    """The harness as a wheel, built from the checkout it is imported from."""
    root = Path(harness.__file__).resolve().parents[1]
    if not (root / "pyproject.toml").is_file():
        raise BadInput(f"the harness at {root} is installed, not checked out: pass --wheel FILE")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", into, str(root)],
                            capture_output=True, text=True)
    if result.returncode:
        said = result.stderr.strip().splitlines()
        raise RuntimeError(f"building the harness's wheel failed: {said[-1] if said else f'exit status {result.returncode}'}")
    [wheel] = Path(into).glob("fabric_harness-*.whl")
    return str(wheel)


def venv_python(host: Host) -> str:
    return f"{host.workdir}/venv/bin/python"


# 1. check ---------------------------------------------------------------------------------------

async def check(s: ssh.Session, hosts: Hosts, platform: str) -> dict:
    """What the VM has; HostError naming what it lacks."""
    script = Path(host_check.__file__).read_text()
    python = shlex.quote(s.host.python)
    found = await s.run(f"command -v {python} >/dev/null || {{ echo 'no {s.host.python} on the PATH' >&2; exit 127; }}; "
                        f"{python} - {' '.join(map(shlex.quote, requirements()))}",
                        f"running {s.host.python}", input=script, timeout=120, check=False)
    if found.exit_status != 0 or not found.stdout.strip():
        said = (found.stderr or "").strip().splitlines()
        raise ssh.HostError(s.host, f"cannot run Python as {s.host.python!r}: {said[-1] if said else 'no output'}")
    facts = json.loads(found.stdout.strip().splitlines()[-1])
    w = shlex.quote(s.host.workdir)
    taken = await s.run(f"test -e {w} && ! test -e {w}/{MARK}", "looking at the workdir", check=False)
    if taken.exit_status == 0:  # never removed by up or down: it holds something of someone else's
        raise ssh.HostError(s.host, f"workdir {s.host.workdir} exists and was not made by `live up` "
                                    "(name another with workdir = ... in the hosts file)")
    want = hosts.slice.vms[hosts.hosts.index(s.host)].gpus if hosts.slice else None
    problem = lacking(facts, platform, want, hosts.slice.name if hosts.slice else None)
    if problem:
        raise ssh.HostError(s.host, problem)
    return facts


def lacking(facts: dict, platform: str, gpus: int | None, slice_name: str | None) -> str | None:
    """What a VM (as host_check saw it) lacks for the harness, in words; None if nothing.
    gpus: the slice file's count for it, None without a slice file."""
    version = tuple(int(x) for x in facts["python"].split(".")[:2])
    if version < MIN_PYTHON:
        return (f"Python {facts['python']} at {facts['executable']}; the harness needs "
                f"{'.'.join(map(str, MIN_PYTHON))}+ (name another with python = ... in the hosts file)")
    if facts["missing"]:
        return (f"{facts['executable']} lacks {', '.join(facts['missing'])} "
                "(install them for it, or name another python in the hosts file)")
    if platform != "gpu":
        return None
    what = f"{facts['gpus']} GPUs" + (f" ({', '.join(facts['gpu_names'])})" if facts["gpu_names"] else
                                       f" ({facts['gpu_problem']})" if facts["gpu_problem"] else "")
    if gpus is not None and facts["gpus"] != gpus:
        return f"{what}, but slice {slice_name} gives it {gpus}"
    if facts["gpus"] == 0:
        return f"{what}, and the platform is gpu (use --platform cpu to run on its CPU)"
    return None


# 2. install -------------------------------------------------------------------------------------

async def install(s: ssh.Session, wheel: str, facts: dict, token: str) -> None:
    w = shlex.quote(s.host.workdir)
    await s.run(f"rm -rf {w} && mkdir -p {w} && touch {w}/{MARK}", "making the workdir")
    remote_wheel = f"{s.host.workdir}/{Path(wheel).name}"
    await s.put(wheel, remote_wheel)
    # The venv sees the packages of the interpreter it is made from (JAX, Ray: the VM's own), which
    # may itself be a venv, where --system-site-packages would reach past it: a .pth lists them.
    base = "\n".join(facts["site_packages"]) + "\n"
    purelib = "$(" + shlex.quote(venv_python(s.host)) + " -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')"
    await s.run(f"{shlex.quote(s.host.python)} -m venv --without-pip {w}/venv && cat > {purelib}/harness-base.pth",
                "making the venv", input=base)
    await s.run(f"{shlex.quote(venv_python(s.host))} -m pip install --quiet --no-deps --no-index "
                f"{shlex.quote(remote_wheel)}", "installing the harness", timeout=600)
    where = await s.run(f"cd / && {shlex.quote(venv_python(s.host))} -c "
                        + shlex.quote(f"import harness, {', '.join(VM_MODULES)}; print(harness.__file__)"),
                        "importing the installed harness")
    if not where.stdout.strip().startswith(s.host.workdir + "/"):
        raise ssh.HostError(s.host, f"the venv imports another harness ({where.stdout.strip()})")
    await s.run(f"umask 077 && cat > {w}/ray_token", "keeping the Ray token", input=token)


# 4. Ray -----------------------------------------------------------------------------------------

def ray_command(host: Host, head: Host, platform: str, gpus: int, timeouts: dict) -> str:
    env = {"RAY_AUTH_MODE": "token", **links.ray_environment(timeouts)}
    role = ["--head", "--port", str(RAY_PORT), "--include-dashboard=false"] if host is head else \
        ["--address", f"{head.data_address}:{RAY_PORT}"]
    argv = [venv_python(host), "-m", "ray.scripts.scripts", "start", *role, "--node-ip-address", host.data_address,
            "--temp-dir", f"{host.workdir}/ray", "--disable-usage-stats", "--include-log-monitor=false",
            "--num-gpus", str(gpus if platform == "gpu" else 0), "--resources", json.dumps({host.name: 1}),
            "--object-store-memory", str(OBJECT_STORE_BYTES)]
    w = shlex.quote(host.workdir)
    # Ray's daemons must not hold the SSH channel open: their output goes to a file.
    return (f"{' '.join(f'{k}={shlex.quote(v)}' for k, v in env.items())} RAY_AUTH_TOKEN=$(cat {w}/ray_token) "
            f"{shlex.join(argv)} </dev/null >{w}/ray_start.log 2>&1 || {{ tail -n 3 {w}/ray_start.log >&2; exit 1; }}")


async def start_ray(opened: list[ssh.Session], platform: str, facts: list[dict], timeouts: dict) -> None:
    head = opened[0].host
    await opened[0].run(ray_command(head, head, platform, facts[0]["gpus"], timeouts), "starting Ray's head",
                        timeout=180)
    say(f"{head.name}: Ray head at {head.data_address}:{RAY_PORT}")
    await ssh.each(opened[1:], "Ray worker", lambda s: s.run(
        ray_command(s.host, head, platform, facts[opened.index(s)]["gpus"], timeouts), "starting a Ray worker",
        timeout=180))


# down -------------------------------------------------------------------------------------------

async def stop_host(s: ssh.Session) -> int:
    """Stops what up started on the VM and removes its workdir; how many processes were running."""
    w = shlex.quote(s.host.workdir)
    stopped = await s.run(f"if [ -e {w}/{MARK} ] && [ -x {w}/venv/bin/python ]; then {w}/venv/bin/python -m harness.backends.live.remote "
                          f"stop {w}; else echo 0; fi", "stopping the harness's processes", timeout=120)
    await s.run(f"if test -e {w}/{MARK}; then rm -rf {w}; fi", "removing the workdir")
    return int(stopped.stdout.strip().splitlines()[-1])


async def _down(opened: list[ssh.Session]) -> list[int]:
    return await ssh.each(opened, "stopped and removed", stop_host)


# up ---------------------------------------------------------------------------------------------

async def _up(hosts: Hosts, platform: str, wheel: str | None) -> dict:
    opened = await ssh.sessions(hosts)
    try:
        facts = await ssh.each(opened, "checked", lambda s: check(s, hosts, platform))
        started = False
        try:
            with tempfile.TemporaryDirectory() as tmp:
                wheel = wheel or build_wheel(tmp)
                token = secrets.token_hex(32)
                started = True
                await ssh.each(opened, "installed", lambda s: install(s, wheel, facts[opened.index(s)], token))
            measured = await _measured(opened, hosts)
            timeouts = links.timeouts(measured)
            await start_ray(opened, platform, facts, timeouts)
        except BaseException:
            if started:
                with contextlib.suppress(Exception):
                    await asyncio.shield(_down(opened))
            raise
        return inventory_document(hosts, platform, facts, measured, timeouts)
    finally:
        await ssh.close_all(opened)


def inventory_document(hosts: Hosts, platform: str, facts: list[dict], measured: list, timeouts: dict) -> dict:
    vms = []
    for i, (h, f) in enumerate(zip(hosts.hosts, facts)):
        if hosts.slice:
            vm = hosts.slice.vms[i]
            site, gpus, gpu = vm.site, vm.gpus, vm.gpu
        else:
            # Without a slice file the VMs say what they have; where they cannot, the user must.
            known = hardware.identify(f["gpu_names"][0]) if f["gpu_names"] else None
            if known is None or platform != "gpu":
                raise BadInput(f"{h}: {f['gpu_names'] or 'no GPU'} is no GPU the harness knows "
                               f"({', '.join(hardware.ACCELERATORS)}): name a slice file (slice = ...) in {hosts.path}")
            site, gpus, gpu = "UNKNOWN", f["gpus"], known.name
        vms.append({"name": h.name, "site": site, "gpus": gpus, "gpu": gpu, "workdir": h.workdir,
                    "gpu_names": f["gpu_names"], "python": f["python"]})
    head = hosts.hosts[0]
    return {"name": hosts.slice.name if hosts.slice else Path(hosts.path).stem,
            "ray_address": f"{head.data_address}:{RAY_PORT}", "platform": platform, "hosts": hosts.path,
            "timeouts": timeouts, "vm": vms, "link": [link.to_dict() for link in measured]}


def up(hosts: Hosts, platform: str = "gpu", wheel: str | None = None) -> dict:
    return asyncio.run(_up(hosts, platform, wheel))


def down(hosts: Hosts) -> list[int]:
    async def run():
        opened = await ssh.sessions(hosts)
        try:
            return await _down(opened)
        finally:
            await ssh.close_all(opened)
    return asyncio.run(run())


async def _measured(opened: list[ssh.Session], hosts: Hosts) -> list:
    """Every pair, measured by the harness up installed, held against the hosts' slice file."""
    return links.held_against(await links.measure(opened, lambda s: venv_python(s.host)), hosts.slice)


def measure_links(hosts: Hosts) -> list:
    """Every pair of the hosts' VMs, measured now by the harness `live up` installed, and held
    against their slice file."""
    async def run():
        opened = await ssh.sessions(hosts)
        try:
            return await _measured(opened, hosts)
        finally:
            await ssh.close_all(opened)
    return asyncio.run(run())
