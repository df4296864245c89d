"""A stock Debian kernel, booted under qemu, that runs a shell script as root on this machine's own files.

The machine's kernel may lack sch_netem (this suite's CI machines do); Debian's stock kernel has it.
So the netem tests boot that kernel (`apt-get install qemu-system-x86 linux-image-amd64
busybox-static`, which .ci/run does) in a VM whose root is this machine's root, shared read-only
over 9p under a throwaway tmpfs overlay: the VM runs the same Python, venv and checkout as the host,
and can write nothing back but its results. /tmp too is the host's under the overlay, not a fresh
tmpfs: a venv or checkout kept there must be found in the VM.

    result = boot("ip -V; tc qdisc add dev lo root netem delay 10ms")
    result.returncode, result.output

Software emulation (TCG), not KVM: nested KVM hung at boot on these machines.
"""
import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

# What the initramfs loads before it can mount the root: 9p over virtio-pci, and overlayfs.
EARLY_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")

INIT = """#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc; $B mount -t sysfs sys /sys; $B mount -t devtmpfs dev /dev
for m in $($B cat /modules); do $B insmod /$m; done
$B mkdir -p /host /rw /newroot
$B mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=524288 hostroot /host
$B mount -t tmpfs -o size=512m rw /rw && $B mkdir /rw/upper /rw/work
$B mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /newroot
for d in proc sys dev; do $B mount --move /$d /newroot/$d; done
$B mount -t tmpfs run /newroot/run
$B mkdir -p /newroot/vm-out /newroot/dev/pts /newroot/dev/shm
$B mount -t devpts devpts /newroot/dev/pts; $B mount -t tmpfs shm /newroot/dev/shm
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 out /newroot/vm-out
exec $B switch_root /newroot /bin/busybox sh -c \
  'cd "$(cat /vm-out/cwd)"; /bin/sh /vm-out/script > /vm-out/output 2>&1; echo $? > /vm-out/rc; sync; poweroff -f'
"""


@dataclasses.dataclass
class Booted:
    returncode: int | None  # None: the script never finished (the VM hung or was stopped)
    output: str
    console: str
    seconds: float
    files: dict[str, str]  # what the script wrote into /vm-out, by name


def missing() -> str | None:
    """Why a stock kernel cannot be booted here, or None."""
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    if kernel() is None:
        return "no stock kernel with modules in /boot and /usr/lib/modules (apt-get install linux-image-amd64)"
    if not _static(Path("/bin/busybox")):
        return "/bin/busybox is missing or not statically linked (apt-get install busybox-static)"
    return None


def kernel() -> tuple[Path, Path] | None:
    """The newest kernel image in /boot whose modules are installed, and its modules directory."""
    for image in sorted(Path("/boot").glob("vmlinuz-*"), reverse=True):
        modules = Path("/usr/lib/modules") / image.name.removeprefix("vmlinuz-")
        if (modules / "modules.dep").exists():
            return image, modules
    return None


def _static(path: Path) -> bool:
    if not path.exists():
        return False
    result = subprocess.run(["ldd", str(path)], capture_output=True, text=True)
    return result.returncode != 0 or "not a dynamic executable" in result.stdout + result.stderr


def _with_dependencies(modules: Path, names: tuple[str, ...]) -> list[str]:
    """Module files (relative to the modules directory), each after the modules it needs."""
    deps = {}
    for line in (modules / "modules.dep").read_text().splitlines():
        path, _, needs = line.partition(":")
        deps[path] = needs.split()
    by_name = {Path(p).name.removesuffix(".ko"): p for p in deps}
    ordered: list[str] = []

    def add(path: str) -> None:
        if path not in ordered:
            for need in reversed(deps[path]):  # modules.dep lists the deepest dependency last
                add(need)
            ordered.append(path)

    for name in names:
        add(by_name[name])
    return ordered


def _initramfs(directory: Path, modules: Path) -> Path:
    root = directory / "initramfs"
    (root / "bin").mkdir(parents=True)
    for d in ("proc", "sys", "dev"):
        (root / d).mkdir()
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    files = _with_dependencies(modules, EARLY_MODULES)
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(modules / f, root / f)
    (root / "modules").write_text("\n".join(files) + "\n")
    (root / "init").write_text(INIT)
    (root / "init").chmod(0o755)
    image = directory / "initramfs.cpio"
    listing = subprocess.run(["find", "."], cwd=root, capture_output=True, text=True, check=True).stdout
    with image.open("wb") as out:
        subprocess.run(["cpio", "--quiet", "-o", "-H", "newc"], cwd=root, input=listing.encode(), stdout=out,
                       check=True)
    return image


def boot(script: str, cwd: str | os.PathLike = ".", timeout_s: float = 600, memory_mb: int = 2048) -> Booted:
    """Boot the stock kernel, run `script` with /bin/sh as root in `cwd`, power off; the VM is gone
    when this returns, whether the script finished, failed or ran out of time."""
    found = kernel()
    assert found is not None, missing()
    image, modules = found
    with tempfile.TemporaryDirectory(prefix="fh-vm-") as tmp:
        tmp = Path(tmp)
        out = tmp / "out"
        out.mkdir()
        (out / "script").write_text(script)
        (out / "cwd").write_text(str(Path(cwd).resolve()))
        initramfs = _initramfs(tmp, modules)
        # One vCPU: the checks mostly wait on delays, and two TCG vCPUs on a machine with a busy
        # core took 170 s where one took 76 (83 s and 91 s when quiet).
        argv = ["qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-smp", "1",
                "-m", str(memory_mb), "-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
                "-kernel", str(image), "-initrd", str(initramfs),
                "-append", "console=ttyS0 quiet loglevel=3 panic=-1",
                "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
                "-virtfs", f"local,path={out},mount_tag=out,security_model=none"]
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            console, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            console, _ = proc.communicate()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        rc = (out / "rc").read_text().strip() if (out / "rc").exists() else ""
        output = (out / "output").read_text(errors="replace") if (out / "output").exists() else ""
        files = {f.name: f.read_text(errors="replace") for f in out.iterdir()
                 if f.is_file() and f.name not in ("script", "cwd", "rc", "output")}
        return Booted(int(rc) if rc else None, output, console.decode(errors="replace"), time.monotonic() - start,
                      files)
