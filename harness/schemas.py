"""The JSON Schemas of what the harness reads and writes: trial records, slice files, live
slice inventories, and a run folder's claims.json and similarity.json (<name>.schema.json beside
this module). A document that does not conform is
rejected with one line naming the file and the field."""
import json
import math
from functools import cache
from pathlib import Path

import jsonschema

from harness.errors import BadInput
from harness.platform import hardware

TYPES = {"integer": "an integer", "number": "a number", "string": "a string", "object": "a table",
         "array": "a list", "boolean": "true or false"}


@cache
def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads(Path(__file__).with_name(f"{name}.schema.json").read_text())
    if name in ("slice", "inventory"):  # the GPU types are hardware.py's, listed once
        for key in ("gpu", "gpu_type"):
            if key in schema["$defs"]["vm"]["properties"]:
                schema["$defs"]["vm"]["properties"][key]["enum"] = list(hardware.ACCELERATORS)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def field_name(path) -> str:
    """vm[0].gpus for the path ('vm', 0, 'gpus')."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def problem(doc, name: str) -> str | None:
    """The most relevant way doc breaks schema `name`, in words that name the field; None if it conforms."""
    error = jsonschema.exceptions.best_match(validator(name).iter_errors(doc))
    if error is None:
        return None
    where = field_name(error.absolute_path)
    kind, expected = error.validator, error.validator_value
    if kind == "required":
        missing = next(k for k in expected if k not in error.instance)
        return f"{where + ': ' if where else ''}missing field {missing!r}"
    if kind == "additionalProperties" and expected is False:
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"{where + ': ' if where else ''}unknown field {extra[0]!r}"
    if kind in ("oneOf", "anyOf") and all("required" in s for s in expected):
        return (f"{where}: needs {'exactly ' if kind == 'oneOf' else ''}one of the fields "
                f"{' or '.join(repr(s['required'][0]) for s in expected)}")
    described = {"type": lambda: " or ".join(TYPES[t] for t in ([expected] if isinstance(expected, str) else expected)),
                 "minimum": lambda: f">= {expected}", "exclusiveMinimum": lambda: f"> {expected}",
                 "maximum": lambda: f"<= {expected}", "exclusiveMaximum": lambda: f"< {expected}",
                 "maxItems": lambda: f"a list of at most {expected}",
                 "maxLength": lambda: f"a string of at most {expected} characters",
                 "enum": lambda: "one of " + ", ".join(map(str, expected)),
                 "minItems": lambda: f"a list of at least {expected}", "minLength": lambda: "a non-empty string",
                 "pattern": lambda: f"of the form {error.schema.get('description', expected)}"}.get(kind)
    if described is None:
        return f"field {where!r}: {error.message}"
    return f"{f'field {where!r}' if where else 'the document'} must be {described()}, got {shown(error.instance)}"


def shown(value, width: int = 60) -> str:
    """A value as the error line quotes it: repr, cut to width (a 10 kB name stays one short line)."""
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def first_non_finite(doc, path=()) -> tuple[tuple, float] | None:
    """(its path, the value) of the first NaN or infinity in doc, or None (TOML has both, and
    Python's JSON reader takes both; a schema's bounds do not catch NaN)."""
    if isinstance(doc, float) and not math.isfinite(doc):
        return path, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    return next((found for key, value in items if (found := first_non_finite(value, (*path, key)))), None)


def non_finite(doc, path=()) -> str | None:
    """The first NaN or infinity in doc, in words."""
    found = first_non_finite(doc, path)
    return None if found is None else f"field {field_name(found[0])!r} must be a finite number, got {found[1]}"


def check(doc, name: str, source: str) -> None:
    """Raises BadInput ("SOURCE: field 'vm[0].gpus' must be >= 1, got 0") unless doc conforms."""
    why = non_finite(doc) or problem(doc, name)
    if why:
        raise BadInput(f"{source}: {why}")


def read(path, name: str, finite=()) -> dict:
    """The JSON document at path, refused in one line naming the file and the field where it is not
    JSON or breaks schema `name`; the top-level fields named in finite must hold finite numbers
    only (Python's writer lets NaN and infinity through, and a schema's bounds do not catch NaN)."""
    try:
        doc = json.loads(Path(path).read_text())
    except ValueError as e:
        raise BadInput(f"{path}: not JSON ({e})") from None
    why = problem(doc, name) or next((w for key in finite if (w := non_finite(doc.get(key), (key,)))), None)
    if why:
        raise BadInput(f"{path}: {why}")
    return doc
