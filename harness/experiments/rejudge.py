"""A run judged again, from its report folder, by today's code: what a reviewer does with a run
someone else made, and what keeps the shipped baselines honest (tests_cpu/test_baselines.py).

The folder holds everything a verdict follows from: results.jsonl (the trials and the memory
analyses), calibration.jsonl (the trials that set similarity-scaled links), claims.json (the
slices, the trial budget and which declared limits the backend had). The links document that some
limits' mechanisms read (the groups per slice, the calibration) is worked out again from those
records (calibration.from_run): similarity.json is checked against it, never read as a figure.
"""
import ast
import json
import math
from pathlib import Path

from harness import schemas
from harness.analysis import similarity
from harness.core.config import Technique
from harness.errors import BadInput
from harness.experiments import calibration, report
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
    """similarity.json as the run wrote it, or None where it wrote none. The parts judging reads as
    numbers must be finite; elsewhere the writer keeps infinities (a ratio to a group of nothing)."""
    path = folder / "similarity.json"
    return schemas.read(path, "links", finite=("slices", "calibration", "tolerance")) if path.is_file() else None


BUDGET_FIELDS = ("model", "batch_per_gpu", "micro_batches", "combine", "precision")  # what the cost model reads


def budget_of(folder: Path, context: dict) -> dict:
    """The trial budget claims.json's context records (a Budget as the run printed it), as its fields
    by name: not checked as a new run's budget is, since the rules for a new run's repeats have
    changed since some runs were made."""
    text = context.get("trial budget")
    try:
        call = ast.parse(str(text), mode="eval").body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "Budget"
                and not call.args):
            raise ValueError
        fields = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        if not set(BUDGET_FIELDS) <= set(fields):
            raise ValueError
        return fields
    except (SyntaxError, ValueError):
        raise BadInput(f"{folder / 'claims.json'}: context 'trial budget' is {text!r}; expected "
                       f"Budget({', '.join(f + '=...' for f in BUDGET_FIELDS)}) as a run writes it") from None


def links(folder: Path, trials: list[dict]) -> dict | None:
    """The run's links document worked out from its records (calibration.from_run), with today's
    tolerance; None for a run that wrote none (a run on GPUs or a live slice: nothing of the scale
    model's links to read; without it no mechanism that reads them shows, so no limit excuses more)."""
    if links_doc(folder) is None:
        return None
    context = claims_doc(folder)["context"]
    given = {sl.name: sl for sl in run_slices(context)}
    budget, shard = budget_of(folder, context), shard_of(folder, context)
    trained = sorted({r["model"]["name"] for r in trials})
    if trained and trained != [budget["model"]]:
        raise BadInput(f"{folder / 'claims.json'}: context 'trial budget' names model {budget['model']!r} where "
                       f"{results_file(folder).name}'s trials trained {', '.join(trained)}; the links are worked "
                       f"out for the model the trials trained")
    path = folder / "calibration.jsonl"
    calibrating = records.read(path) if path.is_file() else []
    try:
        with contract.cast({Technique.SHARD: shard}):
            scaling = calibration.from_run(calibration.ScaleModel.of_records(trials, budget), trials, calibrating, given)
    except (ValueError, KeyError, StopIteration, ZeroDivisionError) as e:
        raise BadInput(f"{folder}: the links its trials ran on cannot be worked out from results.jsonl and "
                       f"calibration.jsonl: {type(e).__name__} {e}") from None
    return None if scaling is None else {"tolerance": similarity.TOLERANCE, **scaling.to_dict()}


def shard_of(folder: Path, context: dict) -> str:
    """The technique the run cast as the paper's Shard (a run before the setting: Shard itself)."""
    shard = context.get("Shard played by", Technique.SHARD)
    if shard not in SHARDS:
        raise BadInput(f"{folder / 'claims.json'}: context 'Shard played by' is {shard!r}; expected one of "
                       + ", ".join(SHARDS))
    return shard


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
    if not recs:
        raise BadInput(f"{results_file(folder)}: no records; expected the run's trials and memory analyses, "
                       "one JSON record per line")
    trials = [r for r in recs if not is_memory(r)]
    memory = [r for r in recs if is_memory(r)]
    context = claims_doc(folder)["context"]
    run = limits.Run(trials, memory, links(folder, trials))
    given = run_slices(context)
    shard = shard_of(folder, context)
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
    """The run's links document, worked out from its records, with its groups beyond the tolerance
    judged against the declared limits of similarity scaling; None where `links` gives none."""
    folder = Path(folder)
    trials = [r for r in records.read(results_file(folder)) if not is_memory(r)]
    doc = links(folder, trials)
    if doc is None:
        return None
    misses = similarity.misses(doc, doc["tolerance"])
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


def differences(folder: Path, verdicts: list[claims.Verdict] | None = None) -> list[str]:
    """Where the folder's claims.json says other than today's judgement of its records (verdicts,
    where the caller has judged them already): per part, its outcome and, per comparison ID, its
    status and whether a limit excused it; and where its similarity.json says other than its records."""
    folder = Path(folder)
    recorded = {v["part"]: v for v in claims_doc(folder)["verdicts"]}
    now = {v.part: v.to_dict() for v in (judge(folder) if verdicts is None else verdicts)}
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
    worked_out, written = judge_links(folder), links_doc(folder)
    if worked_out is None and written is not None:
        out.append("similarity.json: written, though no trial ran on an emulated link")
    elif worked_out is not None:
        out += [f"similarity.json: {d}" for d in figures_apart(written, worked_out)]

        def by_group(misses):
            return {(m.get("slice"), m.get("technique"), m.get("group")): (m.get("excuse") or {}).get("reason")
                    for m in misses}

        before = by_group(written.get("misses", []))
        after = by_group(worked_out["misses"])
        for key in sorted(set(before) | set(after), key=str):
            if key not in after:
                out.append(f"similarity {' '.join(map(str, key))}: similarity.json has it beyond the tolerance, today within it")
            elif key not in before:
                out.append(f"similarity {' '.join(map(str, key))}: similarity.json has it within the tolerance, today beyond it")
            elif before[key] != after[key]:
                out.append(f"similarity {' '.join(map(str, key))}: similarity.json says {before[key]}, today {after[key]}")
    return out


SAME = 1e-9  # figures this near are the same computation's, rounded differently


def figures_apart(written: dict, worked_out: dict) -> list[str]:
    """Where the links document as written says other than its records give: the mode, the
    tolerance, every calibration figure and every slice's link and groups (slices by name)."""
    out = []

    def compare(path: str, a, b) -> None:
        if isinstance(b, dict) and not isinstance(a, dict):
            out.append(f"{path} is {a!r}, the records give a table")
        elif isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                compare(f"{path}.{k}" if path else str(k), a.get(k), b.get(k))
        elif isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, (int, float)):
            if not math.isclose(a, b, rel_tol=SAME, abs_tol=SAME):
                out.append(f"{path} is {a:.6g}, the records give {b:.6g}")
        elif a != b:
            out.append(f"{path} is {a!r}, the records give {b!r}")

    compare("", {k: written.get(k) for k in ("mode", "tolerance", "calibration")},
            {k: worked_out[k] for k in ("mode", "tolerance", "calibration")})
    have = {s.get("slice"): s for s in written.get("slices", [])}
    for s in worked_out["slices"]:
        ours = {k: v for k, v in s.items() if k != "worst_ratio"}
        compare(f"slices[{s['slice']}]", {k: have.get(s["slice"], {}).get(k) for k in ours}, ours)
    out += [f"slices[{name}] is not a slice of the run" for name in set(have) - {s["slice"] for s in worked_out["slices"]}]
    return out


def _by_id(verdict: dict) -> dict[str, str]:
    """comparison ID -> its status, and a declared limit's judgement of it with its reason, in words:
    a reason that no longer follows from the records is a difference too."""
    def said(c):
        excuse = c.get("excuse")
        return str(c["status"]) + (f" ({'excused' if excuse['excused'] else 'not excused'}: {excuse['reason']})"
                                   if excuse else "")

    return {c.get("id"): said(c) for c in verdict["comparisons"]}
