"""A run judged again, from its report folder, by today's code: what a reviewer does with a run
someone else made, and what keeps the shipped baselines honest (tests_cpu/test_baselines.py).

The folder holds everything a verdict follows from: results.jsonl (the trials and the memory
analyses), claims.json (the slices, and which declared limits the backend had), similarity.json
(the links the trials ran on, which some limits' mechanisms read). Nothing else is consulted.
"""
import json
from pathlib import Path

from harness import schemas
from harness.analysis import similarity
from harness.core.config import Technique
from harness.errors import BadInput
from harness.experiments import report
from harness.paper import claims, deviations, limits
from harness.platform import slices
from harness.runs import records
from harness.runs.run_config import SHARDS
from harness.techniques import contract


def is_memory(r: dict) -> bool:
    """A compile-only memory analysis, not a timed trial."""
    return "compile only" in (r["memory"]["source"] or "")


def claims_doc(folder: Path) -> dict:
    """claims.json, with what judging reads: the context, and each verdict's comparisons."""
    path = folder / "claims.json"
    doc = schemas.read(path, "claims")
    if "context" not in doc:
        raise BadInput(f"{path}: missing field 'context' (the run's slices and declared limits are read from it)")
    old = next((i for i, v in enumerate(doc["verdicts"]) if "comparisons" not in v), None)
    if old is not None:
        raise BadInput(f"{path}: verdicts[{old}]: missing field 'comparisons' (a run written before comparisons "
                       "had IDs cannot be judged again)")
    return doc


def links_doc(folder: Path) -> dict | None:
    """similarity.json, or None where the run wrote none. The parts judging reads as numbers must
    be finite; elsewhere the writer keeps infinities (a ratio to a group of nothing)."""
    path = folder / "similarity.json"
    return schemas.read(path, "links", finite=("slices", "calibration", "tolerance")) if path.is_file() else None


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
    context = claims_doc(folder)["context"]
    links = links_doc(folder)
    run = limits.Run(trials, memory, links)
    given = run_slices(context)
    shard = context.get("Shard played by", Technique.SHARD)
    if shard not in SHARDS:
        raise BadInput(f"{folder / 'claims.json'}: context 'Shard played by' is {shard!r}; expected one of "
                       + ", ".join(SHARDS))
    # A run judges the timed parts on its trials and C4 on its memory analyses: one that made none
    # of either did not judge those parts. Some limits' figures come from the cost model, which
    # prices the technique the run cast as the paper's Shard (a run before the setting: its own).
    with contract.cast({Technique.SHARD: shard}):
        timed = claims.judge(trials, given) if trials else []
        limits.apply(timed, deviations.declared(context.get("declared limits", deviations.NONE)), run)
        mem = claims.judge_memory(memory, given) if memory else []
        limits.apply(mem, deviations.MEMORY_ANALYSIS, run)
    return timed + mem


def judge_links(folder: Path) -> dict | None:
    """The folder's links document (similarity.json) with its groups beyond the tolerance judged
    again against the declared limits of similarity scaling; None where the run wrote none."""
    doc = links_doc(Path(folder))
    if doc is None:
        return None
    trials = [r for r in records.read(results_file(folder)) if not is_memory(r)]
    misses = similarity.misses(doc, doc.get("tolerance", similarity.TOLERANCE))
    return {**doc, "misses": limits.judge_misses(misses, deviations.SIMILARITY_GROUPS, limits.Run(trials, [], doc))}


def write(folder: Path, verdicts: list[claims.Verdict]) -> None:
    """claims.json and claims.md of the folder, and its similarity.json's judged groups, from
    today's judgement of its records (the same measurements: a baseline refreshed after a change
    to the judging, not to the trials)."""
    folder = Path(folder)
    doc = claims_doc(folder)
    recs = records.read(results_file(folder))
    dicts = [v.to_dict() for v in verdicts]
    (folder / "claims.json").write_text(json.dumps({"context": doc["context"], "verdicts": dicts}, indent=1))
    figures = sorted(folder.glob("*.png"))
    (folder / "claims.md").write_text(report.markdown([r for r in recs if not is_memory(r)],
                                                      [r for r in recs if is_memory(r)], dicts, doc["context"], figures))
    links = judge_links(folder)
    if links is not None:
        (folder / "similarity.json").write_text(json.dumps(links, indent=1))
        (folder / "similarity.md").write_text(similarity.markdown(links))


def differences(folder: Path) -> list[str]:
    """Where the folder's claims.json says other than today's judgement of its records: per part,
    its outcome and, per comparison ID, its status and whether a limit excused it."""
    folder = Path(folder)
    recorded = {v["part"]: v for v in claims_doc(folder)["verdicts"]}
    now = {v.part: v.to_dict() for v in judge(folder)}
    out = []
    for part, was in recorded.items():
        if part not in now:
            out.append(f"{part}: in claims.json, not judged today")
            continue
        if str(was.get("outcome")) != str(now[part]["outcome"]):
            out.append(f"{part}: claims.json says {was.get('outcome')}, today {now[part]['outcome']}")

        before, after = _by_id(was), _by_id(now[part])
        for cid in sorted(set(before) | set(after), key=str):
            if before.get(cid) != after.get(cid):
                out.append(f"{cid}: claims.json says {before.get(cid, 'not made')}, today {after.get(cid, 'not made')}")
    links = judge_links(folder)
    if links is not None:
        def by_group(misses):
            return {(m.get("slice"), m.get("technique"), m.get("group")): (m.get("excuse") or {}).get("reason")
                    for m in misses}

        before = by_group(links_doc(folder).get("misses", []))
        after = by_group(links["misses"])
        for key in sorted(set(before) | set(after), key=str):
            if key not in after:
                out.append(f"similarity {' '.join(map(str, key))}: similarity.json has it beyond the tolerance, today within it")
            elif key not in before:
                out.append(f"similarity {' '.join(map(str, key))}: similarity.json has it within the tolerance, today beyond it")
            elif before[key] != after[key]:
                out.append(f"similarity {' '.join(map(str, key))}: similarity.json says {before[key]}, today {after[key]}")
    return out


def _by_id(verdict: dict) -> dict[str, str]:
    """comparison ID -> its status, and a declared limit's judgement of it with its reason, in words:
    a reason that no longer follows from the records is a difference too."""
    def said(c):
        excuse = c.get("excuse")
        return str(c["status"]) + (f" ({'excused' if excuse['excused'] else 'not excused'}: {excuse['reason']})"
                                   if excuse else "")

    return {c.get("id"): said(c) for c in verdict["comparisons"]}
