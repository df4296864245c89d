"""TOML out: the standard library reads TOML and does not write it. Enough for the documents the
harness writes (run.toml, a live slice's inventory): scalars, lists, tables and arrays of tables."""


def value(v) -> str:
    if hasattr(v, "__fspath__"):
        v = str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def dumps(doc: dict) -> str:
    """doc's scalars first, then its tables, then its arrays of tables (lists of dicts)."""
    def is_table_array(v):
        return isinstance(v, list) and v and all(isinstance(x, dict) for x in v)

    def pairs(d: dict) -> str:
        return "".join(f"{k} = {value(v)}\n" for k, v in d.items() if v is not None)

    out = pairs({k: v for k, v in doc.items() if not isinstance(v, dict) and not is_table_array(v)})
    out += "".join(f"\n[{k}]\n{pairs(v)}" for k, v in doc.items() if isinstance(v, dict))
    out += "".join(f"\n[[{k}]]\n{pairs(item)}" for k, v in doc.items() if is_table_array(v) for item in v)
    return out
