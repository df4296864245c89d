"""A run judged again, from its report folder, by today's code: what a reviewer does with a run
someone else made, and what keeps the shipped baselines honest (tests_cpu/test_baselines.py).

The folder holds everything a verdict follows from: results.jsonl (the trials and the memory
analyses), claims.json (the slices, and which declared limits the backend had), similarity.json
(the links the trials ran on, which some limits' mechanisms read). Nothing else is consulted.
"""
import json
from pathlib import Path

from harness import claims, limits, records, slices
from harness.suite import deviations


def is_memory(r: dict) -> bool:
    """A compile-only memory analysis, not a timed trial."""
    return "compile only" in (r["memory"]["source"] or "")


def run_slices(context: dict) -> list:
    """The run's slices, from its claims.json context: by their files where recorded, else by name."""
    sources = context.get("slice sources") or [s.strip() for s in context["slices"].split(",") if s.strip()]
    return [slices.load(source) for source in sources]


RESULTS = ("results.jsonl", "claims-results.jsonl")  # a run's own; the GPU device session's claims phase


def results_file(folder: Path) -> Path:
    return next((folder / name for name in RESULTS if (folder / name).is_file()), folder / RESULTS[0])


def judge(folder: Path) -> list[claims.Verdict]:
    """Every part the run judged, judged again from its folder."""
    folder = Path(folder)
    recs = records.read(results_file(folder))
    trials = [r for r in recs if not is_memory(r)]
    memory = [r for r in recs if is_memory(r)]
    context = json.loads((folder / "claims.json").read_text())["context"]
    links_file = folder / "similarity.json"
    links = json.loads(links_file.read_text()) if links_file.is_file() else None
    run = limits.Run(trials, memory, links)
    given = run_slices(context)
    timed = claims.judge(trials, given)
    limits.apply(timed, deviations.declared(context.get("declared limits", deviations.NONE)), run)
    mem = claims.judge_memory(memory, given)
    limits.apply(mem, deviations.MEMORY_ANALYSIS, run)
    return timed + mem


def differences(folder: Path) -> list[str]:
    """Where the folder's claims.json says other than today's judgement of its records: per part,
    its outcome and, per comparison ID, its status and whether a limit excused it."""
    folder = Path(folder)
    recorded = {v["part"]: v for v in json.loads((folder / "claims.json").read_text())["verdicts"]}
    now = {v.part: v.to_dict() for v in judge(folder)}
    out = []
    for part, was in recorded.items():
        if part not in now:
            out.append(f"{part}: in claims.json, not judged today")
            continue
        if was.get("outcome") != now[part]["outcome"]:
            out.append(f"{part}: claims.json says {was.get('outcome')}, today {now[part]['outcome']}")

        def by_id(v):
            return {c.get("id"): (c["status"], bool((c.get("excuse") or {}).get("excused"))) for c in v["comparisons"]}

        before, after = by_id(was), by_id(now[part])
        for cid in sorted(set(before) | set(after), key=str):
            if before.get(cid) != after.get(cid):
                out.append(f"{cid}: claims.json says {before.get(cid)}, today {after.get(cid)}")
    return out
