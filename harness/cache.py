"""Where the suite keeps what it computes once (tokenizers, token streams): $HARNESS_CACHE or ~/.cache/fabric-harness."""
import os
import tempfile
from pathlib import Path


def cache_dir(kind: str) -> Path:
    root = Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "fabric-harness")
    path = root / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write(path: Path, write) -> None:
    """Call write(tmp_path) then rename, so parallel test workers never read half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
