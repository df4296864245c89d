"""Trial result records: JSON objects with a schema version, validated whenever written or read.

The schema (record.schema.json, beside this file) is the contract between every producer (the
single-device trainer, the techniques, the Alpa runner, live slices, the cost model) and every
consumer (claims, reports, regression comparison). Records are stored one per line (JSONL).
"""
import datetime
import json
import uuid
from pathlib import Path

import jsonschema

from harness import schemas

SCHEMA_VERSION = 1


class InvalidRecord(ValueError):
    pass


def validate(record: dict) -> dict:
    error = jsonschema.exceptions.best_match(schemas.validator("record").iter_errors(record))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "<record>"
        raise InvalidRecord(f"trial record field {where}: {error.message}")
    return record


def new_record(**fields) -> dict:
    """A record with identity and timestamp filled in; the caller supplies the rest."""
    record = {
        "schema_version": SCHEMA_VERSION,
        "record_id": uuid.uuid4().hex,
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **fields,
    }
    return validate(record)


def failure(exc: BaseException) -> tuple[str, str]:
    """(status, reason) of a trial that raised: out of memory is a result (the paper's x), not a crash."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if isinstance(exc, KeyboardInterrupt):
        return "error", "interrupted by the user"
    if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
        return "oom", text
    return "error", text


def dumps(record: dict) -> str:
    return json.dumps(validate(record), separators=(",", ":"), allow_nan=False)


def loads(line: str, where: str = "<string>") -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise InvalidRecord(f"{where}: not JSON ({e})") from None
    try:
        return validate(record)
    except InvalidRecord as e:
        raise InvalidRecord(f"{where}: {e}") from None


def append(path: str | Path, record: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(dumps(record) + "\n")


def read(path: str | Path) -> list[dict]:
    path = Path(path)
    lines = path.read_text().splitlines()
    return [loads(line, f"{path}:{n}") for n, line in enumerate(lines, 1) if line.strip()]
