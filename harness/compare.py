"""Regression tracking: a run's records and verdicts against a baseline run's.

A trial (technique, slice, VMs, model) regresses when its median step time grows by more than
the threshold (default +50%: this suite runs on small, noisy, shared machines), when it failed
and did not before, and when it was in the baseline and is not in the run.
A claim part regresses when it is gone from the run, or when the verdict of its comparisons that
the backend has not declared as limits becomes contradicted or not shown. A change that comes
only from declared comparisons is reported (they may flip between runs), as is a verdict that
only weakens from holds to within noise: by definition nothing went against the paper beyond the
noise, and such parts flip between runs of the same code.
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
    # part -> (verdict, verdict of the comparisons not declared as limits of the backend)
    verdicts = ({v["part"]: (v["status"], v.get("undeclared_status", v["status"]))
                 for v in json.loads(verdicts_file.read_text())["verdicts"]} if verdicts_file.is_file() else {})
    return timed, verdicts


def worse(a: str, b: str) -> bool:
    return claims.ORDER.index(b) > claims.ORDER.index(a)


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
    vanished = sorted(set(base_trials) - set(cur_trials))
    parts_gone = sorted(set(base_verdicts) - set(cur_verdicts))
    both = sorted(set(base_verdicts) & set(cur_verdicts))
    worse_, weaker, declared = {}, {}, {}
    for p in both:
        (b_all, b_own), (c_all, c_own) = base_verdicts[p], cur_verdicts[p]
        if worse(b_own, c_own):
            (weaker if c_own == claims.NOISE else worse_)[p] = [b_own, c_own]
        elif worse(b_all, c_all):
            declared[p] = [b_all, c_all]
    return {"baseline": str(baseline), "threshold": threshold, "trials_compared": len(rows),
            "slower": slower, "newly_failed": failed, "vanished_trials": vanished, "vanished_parts": parts_gone,
            "worse_verdicts": worse_, "weaker_verdicts": weaker, "worse_declared_limits": declared,
            "rows": rows, "regressed": bool(slower or failed or vanished or parts_gone or worse_)}


def summary(result: dict) -> str:
    head = (f"against {result['baseline']}: {result['trials_compared']} trials compared, "
            f"threshold +{result['threshold']:.0%}: " + ("REGRESSED" if result["regressed"] else "no regression"))
    lines = [head]
    lines += [f"  slower: {k}" for k in result["slower"]]
    lines += [f"  newly failed: {k}" for k in result["newly_failed"]]
    lines += [f"  in the baseline, not in the run: {k}" for k in result["vanished_trials"]]
    lines += [f"  claim part in the baseline, not in the run: {p}" for p in result["vanished_parts"]]
    lines += [f"  verdict {p}: {a} -> {b}" for p, (a, b) in result["worse_verdicts"].items()]
    lines += [f"  verdict {p}: {a} -> {b} (nothing beyond the noise: not a regression)"
              for p, (a, b) in result["weaker_verdicts"].items()]
    lines += [f"  verdict {p}: {a} -> {b} (a declared limit of this backend: not a regression)"
              for p, (a, b) in result["worse_declared_limits"].items()]
    return "\n".join(lines)
