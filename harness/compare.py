"""Regression tracking: a run's records and verdicts against a baseline run's.

A trial (technique, slice, VMs, model) regresses when its median step time grows by more than
the threshold (default +50%: this suite runs on small, noisy, shared machines, where repeated
runs of the same code differ by up to ~30%); it also regresses when it failed and did not before.
A claim part regresses when its verdict becomes contradicted or not shown, unless the part is a
declared limit of the backend (its verdict is reported, as it may flip between runs). A verdict
that only weakens from holds to within noise is reported, not counted: by definition nothing went
against the paper beyond the noise, and such parts flip between runs of the same code.
"""
import json
from pathlib import Path

from harness import claims, records

THRESHOLD = 0.5


def key(r: dict) -> str:
    c = r["cluster"]
    return f"{r['technique']} {c['slice']} {'+'.join(c['vms_used'] or [])} {r['model']['name']}"


def load(run: Path) -> tuple[dict, dict]:
    # Trials only: the compile-only memory records have no step times to compare.
    timed = {key(r): r for r in records.read(run / "results.jsonl")
             if "compile only" not in (r["memory"]["source"] or "")}
    verdicts_file = run / "claims.json"
    # Parts with a declared limit of the backend may flip between runs; they are compared but not
    # counted as regressions.
    verdicts = ({v["part"]: (v["status"], bool(v.get("deviation"))) for v in json.loads(verdicts_file.read_text())["verdicts"]}
                if verdicts_file.is_file() else {})
    return timed, verdicts


def compare(baseline: Path, current: Path, threshold: float = THRESHOLD) -> dict:
    base_trials, base_verdicts = load(baseline)
    cur_trials, cur_verdicts = load(current)
    slower, failed, rows = [], [], []
    for k in sorted(set(base_trials) & set(cur_trials)):
        b, c = base_trials[k], cur_trials[k]
        if c["status"] != "ok" and b["status"] == "ok":
            failed.append(k)
            continue
        tb, tc = b["timing"]["median_step_s"], c["timing"]["median_step_s"]
        if tb and tc:
            change = tc / tb - 1
            rows.append({"trial": k, "baseline_s": tb, "current_s": tc, "change": change})
            if change > threshold:
                slower.append(k)
    changed = {p: [base_verdicts[p][0], cur_verdicts[p][0]] for p in sorted(set(base_verdicts) & set(cur_verdicts))
               if claims.ORDER.index(cur_verdicts[p][0]) > claims.ORDER.index(base_verdicts[p][0])}
    worse = {p: v for p, v in changed.items() if not cur_verdicts[p][1] and v[1] != "within noise"}
    weaker = {p: v for p, v in changed.items() if not cur_verdicts[p][1] and v[1] == "within noise"}
    declared = {p: v for p, v in changed.items() if cur_verdicts[p][1]}
    return {"baseline": str(baseline), "threshold": threshold, "trials_compared": len(rows),
            "slower": slower, "newly_failed": failed, "worse_verdicts": worse, "weaker_verdicts": weaker,
            "worse_declared_limits": declared,
            "rows": rows, "regressed": bool(slower or failed or worse)}


def summary(result: dict) -> str:
    head = (f"against {result['baseline']}: {result['trials_compared']} trials compared, "
            f"threshold +{result['threshold']:.0%}: " + ("REGRESSED" if result["regressed"] else "no regression"))
    lines = [head]
    lines += [f"  slower: {k}" for k in result["slower"]]
    lines += [f"  newly failed: {k}" for k in result["newly_failed"]]
    lines += [f"  verdict {p}: {a} -> {b}" for p, (a, b) in result["worse_verdicts"].items()]
    lines += [f"  verdict {p}: {a} -> {b} (nothing beyond the noise: not a regression)"
              for p, (a, b) in result["weaker_verdicts"].items()]
    lines += [f"  verdict {p}: {a} -> {b} (a declared limit of this backend: not a regression)"
              for p, (a, b) in result["worse_declared_limits"].items()]
    return "\n".join(lines)
