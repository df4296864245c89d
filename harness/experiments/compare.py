"""Regression tracking: a run's records and verdicts against a baseline run's.

A trial (technique, slice, VMs, model) regresses when its median step time grows by more than
the threshold (default +50%: this suite runs on small, noisy, shared machines), when it failed
and did not before, and when it was in the baseline and is not in the run.
A claim part regresses when it is gone from the run, or when its outcome (the verdict with the
backend's declared limits, claims.Verdict.outcome) becomes contradicted or not shown; a
comparison (by its ID) regresses when it is gone or becomes contradicted beyond what a limit
excuses. Reported but not counted: a part or comparison that slips from holds to within noise
(nothing went against the paper beyond the noise, and such results flip between runs of the same
code), and one that becomes contradicted within a declared limit.

The verdicts compared are those each folder's records give (harness.experiments.rejudge), not its
claims.json as written: where the file says otherwise (stale, or edited), the comparison says so
and goes by the records. A hand-made or older claims.json without the run's context, from which
nothing can be judged again, is read as written.
"""
from pathlib import Path

from harness import schemas
from harness.experiments import rejudge, report
from harness.paper import claims
from harness.runs import records

THRESHOLD = 0.5
# How bad an outcome is, for telling worse from better.
RANK = {claims.HOLDS: 0, claims.NOISE: 1, claims.EXCUSED: 2, claims.NOT_SHOWN: 3, claims.CONTRADICTED: 4}


def key(r: dict) -> str:
    c = r["cluster"]
    return f"{r['technique']} {c['slice']} {'+'.join(c['vms_used'] or [])} {r['model']['name']}"


def _comparison_outcome(c: dict) -> str:
    if c["status"] == claims.CONTRADICTED and (c.get("excuse") or {}).get("excused"):
        return claims.EXCUSED
    return c["status"]


def load(run: Path) -> tuple[dict, dict, dict, list[str]]:
    """(trials by key, part -> outcome, comparison ID -> outcome, where the folder's files say
    otherwise than its records) of a run folder."""
    # Trials only: the compile-only memory records have no step times to compare.
    timed = {key(r): r for r in records.read(run / "results.jsonl")
             if "compile only" not in (r["memory"]["source"] or "")}
    verdicts_file = run / "claims.json"
    doc = schemas.read(verdicts_file, "claims") if verdicts_file.is_file() else {"verdicts": []}
    verdicts, apart = doc["verdicts"], []
    if "context" in doc:
        judged = rejudge.judge(run)
        verdicts, apart = [v.to_dict() for v in judged], rejudge.differences(run, judged)
    parts = {v["part"]: report.outcome(v) for v in verdicts}
    comparisons = {c["id"]: _comparison_outcome(c) for v in verdicts for c in v.get("comparisons", []) if "id" in c}
    return timed, parts, comparisons, apart


def _changes(base: dict, current: dict) -> tuple[dict, dict, dict, list]:
    """(worse, slipped to within noise, newly excused, gone) between two maps of outcomes."""
    worse, slipped, excused = {}, {}, {}
    for k in sorted(set(base) & set(current)):
        b, c = base[k], current[k]
        if RANK[c] <= RANK[b]:
            continue
        if c in (claims.CONTRADICTED, claims.NOT_SHOWN):
            worse[k] = [b, c]
        elif c == claims.NOISE:
            slipped[k] = [b, c]
        else:
            excused[k] = [b, c]
    return worse, slipped, excused, sorted(set(base) - set(current))


def compare(baseline: Path, current: Path, threshold: float = THRESHOLD) -> dict:
    base_trials, base_parts, base_ids, base_apart = load(baseline)
    cur_trials, cur_parts, cur_ids, cur_apart = load(current)
    slower, failed, rows = [], [], []
    for k in sorted(set(base_trials) & set(cur_trials)):
        b, c = base_trials[k], cur_trials[k]
        if claims.state(c) != "ok" and claims.state(b) == "ok":
            failed.append(k)
            continue
        tb, tc = b["timing"]["median_step_s"], c["timing"]["median_step_s"]
        if tb and tc:
            change = tc / tb - 1
            rows.append({"trial": k, "baseline_s": tb, "current_s": tc, "change": change})
            if change > threshold:
                slower.append(k)
    vanished = sorted(set(base_trials) - set(cur_trials))
    worse, weaker, declared, parts_gone = _changes(base_parts, cur_parts)
    worse_ids, weaker_ids, declared_ids, ids_gone = _changes(base_ids, cur_ids)
    return {"baseline": str(baseline), "threshold": threshold, "trials_compared": len(rows),
            "slower": slower, "newly_failed": failed, "vanished_trials": vanished, "vanished_parts": parts_gone,
            "worse_verdicts": worse, "weaker_verdicts": weaker, "worse_declared_limits": declared,
            "vanished_comparisons": ids_gone, "worse_comparisons": worse_ids, "weaker_comparisons": weaker_ids,
            "excused_comparisons": declared_ids, "rows": rows,
            "files_apart_from_records": {"baseline": base_apart, "run": cur_apart},
            "regressed": bool(slower or failed or vanished or parts_gone or worse or ids_gone or worse_ids)}


def summary(result: dict) -> str:
    head = (f"against {result['baseline']}: {result['trials_compared']} trials compared, "
            f"threshold +{result['threshold']:.0%}: " + ("REGRESSED" if result["regressed"] else "no regression"))
    lines = [head]
    lines += [f"  slower: {k}" for k in result["slower"]]
    lines += [f"  newly failed: {k}" for k in result["newly_failed"]]
    lines += [f"  in the baseline, not in the run: {k}" for k in result["vanished_trials"]]
    lines += [f"  claim part in the baseline, not in the run: {p}" for p in result["vanished_parts"]]
    lines += [f"  comparison in the baseline, not in the run: {c}" for c in result["vanished_comparisons"]]
    lines += [f"  verdict {p}: {a} -> {b}" for p, (a, b) in result["worse_verdicts"].items()]
    lines += [f"  comparison {c}: {a} -> {b}" for c, (a, b) in result["worse_comparisons"].items()]
    lines += [f"  verdict {p}: {a} -> {b} (slipped: nothing beyond the noise, not a regression)"
              for p, (a, b) in result["weaker_verdicts"].items()]
    lines += [f"  comparison {c}: {a} -> {b} (slipped: nothing beyond the noise, not a regression)"
              for c, (a, b) in result["weaker_comparisons"].items()]
    lines += [f"  verdict {p}: {a} -> {b} (within a declared limit of this backend: not a regression)"
              for p, (a, b) in result["worse_declared_limits"].items()]
    lines += [f"  comparison {c}: {a} -> {b} (within a declared limit of this backend: not a regression)"
              for c, (a, b) in result["excused_comparisons"].items()]
    for which, apart in result["files_apart_from_records"].items():
        if apart:
            lines.append(f"  the {which}'s claims.json or similarity.json says otherwise than its records in {len(apart)} "
                         f"places (compared by what the records give; `python -m harness judge` names them): {apart[0]}"
                         + (" ..." if len(apart) > 1 else ""))
    return "\n".join(lines)
