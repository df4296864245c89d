"""A link as measured, so that a prediction for a user's slice rests on it: the RTT between two
VMs and the steady rate of one TCP flow between them.

Read from the JSON of `python -m harness emulate --json` (an emulated slice), or from a file of the
same shape written from a live slice's measurements (ping for the RTT; one bulk TCP transfer, e.g.
`python -m harness.backends.emulation.probe send`, for the rate):
    {"pairs": [{"a": "vm1", "b": "vm2", "rtt_ms": 20.4, "throughput_bytes_per_s": 1.5e8}]}
With several pairs the one of largest RTT is used: it is the link the slice's collectives wait for.
"""
import json
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput


@dataclass(frozen=True)
class MeasuredLink:
    a: str
    b: str
    rtt_ms: float
    flow_bytes_per_s: float
    source: str

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "rtt_ms": self.rtt_ms, "flow_bytes_per_s": self.flow_bytes_per_s,
                "source": self.source}


def load(path: str | Path) -> MeasuredLink:
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise BadInput(f"measured link {path}: cannot read it ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"measured link {path}: not JSON ({e.msg} at line {e.lineno})") from None
    pairs = doc.get("pairs") if isinstance(doc, dict) else None
    if not isinstance(pairs, list) or not pairs:
        raise BadInput(f"measured link {path}: expected an object with a non-empty list 'pairs'")
    links = []
    for i, p in enumerate(pairs):
        where = f"measured link {path}: pairs[{i}]"
        if not isinstance(p, dict):
            raise BadInput(f"{where}: expected an object")
        for field in ("rtt_ms", "throughput_bytes_per_s"):
            value = p.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise BadInput(f"{where}: field {field!r} must be a positive number, got {value!r}")
        links.append(MeasuredLink(str(p.get("a", "?")), str(p.get("b", "?")), float(p["rtt_ms"]),
                                  float(p["throughput_bytes_per_s"]), str(path)))
    return max(links, key=lambda link: link.rtt_ms)
