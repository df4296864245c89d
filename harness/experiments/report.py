"""The report of a claims run: reports/<run id>/ with results.jsonl, claims.md, claims.json and figures.

claims.md reads like the paper's results: per claim part, the verdict and its evidence; per slice,
a table of training time and TFLOP/s per technique for all GPUs and for one VM (x for a failure),
as the paper's Figs. 3-7; and time against RTT per technique (the paper's Table II as a chart).
"""
import json
import math
from pathlib import Path

from harness.core.config import Technique
from harness.paper import claims
from harness.runs import noise, records

STATUS_MARK = {claims.HOLDS: "holds", claims.NOISE: "within noise", claims.NOT_SHOWN: "not shown",
               claims.CONTRADICTED: "CONTRADICTED", claims.EXCUSED: "contradicted within a declared limit"}


def write(out: Path, trial_records: list[dict], memory_records: list[dict], verdicts: list[dict],
          context: dict) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.jsonl", "w") as f:
        for r in trial_records + memory_records:
            f.write(records.dumps(r) + "\n")
    (out / "claims.json").write_text(json.dumps({"context": context, "verdicts": verdicts}, indent=1))
    figures = draw(out, trial_records)
    (out / "claims.md").write_text(markdown(trial_records, memory_records, verdicts, context, figures))
    return [out / "results.jsonl", out / "claims.json", out / "claims.md", *figures]


def outcome(v: dict) -> str:
    """A verdict's outcome with the declared limits (claims.Verdict.outcome); a claims.json of
    before the outcomes existed had the verdict with and without its declared comparisons."""
    if "outcome" in v:
        return v["outcome"]
    own = v.get("undeclared_status", v["status"])
    return claims.EXCUSED if v["status"] == claims.CONTRADICTED and own != claims.CONTRADICTED else v["status"]


def counts(verdicts: list[dict]) -> str:
    """How many parts, and how many comparisons, came out each way: holds, within noise and
    contradicted apart, never summed into a pass count."""
    parts = [outcome(v) for v in verdicts]
    comps = [c for v in verdicts for c in v.get("comparisons", [])]

    def excused(c):
        return c["status"] == claims.CONTRADICTED and bool((c.get("excuse") or {}).get("excused"))

    by_comparison = {claims.HOLDS: sum(c["status"] == claims.HOLDS for c in comps),
                     claims.NOISE: sum(c["status"] == claims.NOISE for c in comps),
                     claims.EXCUSED: sum(excused(c) for c in comps),
                     claims.CONTRADICTED: sum(c["status"] == claims.CONTRADICTED and not excused(c) for c in comps),
                     claims.NOT_SHOWN: sum(c["status"] == claims.NOT_SHOWN for c in comps)}
    return (f"{len(parts)} parts: " + ", ".join(f"{parts.count(o)} {STATUS_MARK[o]}" for o in claims.OUTCOMES)
            + f"; {len(comps)} comparisons: " + ", ".join(f"{n} {STATUS_MARK[o]}" for o, n in by_comparison.items()))


def by_claim(verdicts: list[dict]) -> str:
    """A claim a row, its parts' outcomes in one cell: the short table the README shows of a
    shipped run (tests_cpu/test_baselines.py checks that it is this run's)."""
    rows: dict[str, list[str]] = {}
    for v in verdicts:
        claim, _, part = v["part"].partition(".")
        rows.setdefault(claim, []).append(f"{part}: {STATUS_MARK[outcome(v)]}")
    return "\n".join(["| claim | its parts |", "|---|---|"]
                     + [f"| {claim} | {'; '.join(parts)} |" for claim, parts in sorted(rows.items())])


def markdown(trial_records, memory_records, verdicts, context, figures) -> str:
    lines = ["# Claims of the paper, checked", ""]
    lines += [f"- {k}: {v}" for k, v in context.items()]
    lines += ["", counts(verdicts), ""]
    table = claims.Table(trial_records)
    if table.drift:
        lines += [f"Noise: this run's repeats of one experiment (a technique on one emulated VM, measured on each VM "
                  f"of its speed) moved apart by {100 * table.drift:.1f}% of a step, so every trial's ± is at least that "
                  f"share of its epoch (at most {100 * noise.CAP:.0f}%).", ""]
    lines += link_check(trial_records)
    lines += ["| part | paper says | verdict |", "|---|---|---|"]
    lines += [f"| {v['part']} | {v['statement']} | {mark(v)} |" for v in verdicts]
    lines += ["", "## Evidence", "",
              "Each comparison by its ID (`part/where/key`). A declared limit of this backend excuses a contradiction "
              "only within its bound and where this run measured its mechanism; its reason below is built from this "
              "run's figures.", ""]
    for v in verdicts:
        lines += [f"### {v['part']}: {mark(v)}", "", v["statement"], ""]
        for c in v.get("comparisons", []):
            excuse = c.get("excuse")
            status = ("CONTRADICTED, excused" if excuse and excuse["excused"] and c["status"] == claims.CONTRADICTED
                      else STATUS_MARK[c["status"]])
            lines.append(f"- {status}: `{c.get('id', c.get('what'))}`: {c['line']}")
            if excuse:
                lines.append(f"  - {'declared limit' if excuse['excused'] else 'declared limit, NOT met'}: "
                             f"{excuse['reason']}")
        lines += [f"- {e}" for e in v.get("notes", [])]
        lines.append("")
    lines += ["## Trials per slice (time per epoch of the corpus; TFLOP/s per device by Alpa's formula)", ""]
    for s in sorted({k[1] for k in table.index}, key=lambda s: (claims.rtt(table, s), s)):
        header = ["technique", "all VMs: s/epoch", "TFLOP/s"] + [h for vm in table.one_vm(s)
                                                                  for h in (f"{vm} alone: s/epoch", "TFLOP/s")]
        lines += [f"### {s} (measured RTT {claims.rtt(table, s):.1f} ms)", "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for tech in Technique:
            cells = [cell(table.get(tech, s))] + [cell(table.get(tech, s, vm)) for vm in table.one_vm(s)]
            lines.append(f"| {tech} | " + " | ".join(cells) + " |")
        lines.append("")
    if memory_records:
        lines += ["## Memory at paper scale (compile-only analysis, GiB per GPU; x = out of memory)", "",
                  "| model | slice | VMs | " + " | ".join(Technique) + " |", "|---|---|---|" + "---|" * 4]
        mem = claims.MemoryTable(memory_records)
        for model, s, vms in sorted(mem.placements()):
            row = []
            for tech in Technique:
                r = mem.index.get((model, tech, s, vms))
                need = r and r["memory"]["bytes_per_device"]
                row.append("" if r is None else (f"{need / 2**30:.1f}" if need else "")
                           + {"ok": "", "oom": " x"}.get(r["status"], " crashed"))
            lines.append(f"| {model} | {s} | {'+'.join(vms)} | " + " | ".join(row) + " |")
        lines.append("")
    if figures:
        lines += ["## Figures", ""] + [f"![{f.stem}]({f.name})" for f in figures] + [""]
    return "\n".join(lines)


def link_check(trial_records: list[dict]) -> list[str]:
    """A live slice's links as its trials' records say they were measured before the first trial,
    and every pair more than the tolerance off the slice file's, flagged."""
    checks = {json.dumps(c, sort_keys=True): c for r in trial_records
              if (c := r.get("cluster", {}).get("network", {}).get("link_check"))}
    if not checks:
        return []
    lines = ["## The live slice's links, measured before the first trial", ""]
    for c in checks.values():
        for m in c["measured"]:
            rate = m.get("bytes_per_s")
            lines.append(f"- {m['a']}-{m['b']}: RTT {m['rtt_ms']:.3f} ms"
                         + (f", one TCP flow {rate * 8e-9:.3g} Gbit/s" if rate else ""))
        tolerance = f"{c['tolerance'] * 100:g}%"
        lines += ([f"- **OFF by more than {tolerance}**: {line}" for line in c["off"]]
                  or [f"- every figure within {tolerance} of the slice file's (where it gives one)"])
    return lines + [""]


def mark(v: dict) -> str:
    """The part's outcome, and whether a declared limit or a crash stands behind it."""
    text = STATUS_MARK[outcome(v)]
    if v.get("crashed"):
        text += f" (trials crashed: {', '.join(v['crashed'])})"
    excused = [c.get("id", c.get("what")) for c in v.get("comparisons", [])
               if c["status"] == claims.CONTRADICTED and (c.get("excuse") or {}).get("excused")]
    if excused:
        text += f" ({len(excused)} of {len(v['comparisons'])} comparisons excused: {', '.join(excused)})"
    return text


def cell(r: dict | None) -> str:
    if r is None:
        return " | "
    state = claims.state(r)
    if state != "ok":
        return ("x (out of memory) | x" if state == "oom" else f"crashed ({claims.problem(r)}) | ")
    return f"{r['timing']['epoch_time_s']:.4g} | {r['throughput']['tflops_alpa']:.3g}"


def draw(out: Path, trial_records: list[dict]) -> list[Path]:
    """PNG figures: per slice, time and TFLOP/s per technique (all VMs, one VM); time vs RTT."""
    import matplotlib  # deferred: matplotlib loads only when figures are drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: matplotlib loads only when figures are drawn

    table = claims.Table(trial_records)
    names = sorted({k[1] for k in table.index}, key=lambda s: (claims.rtt(table, s), s))
    paths = []
    for s in names:
        placements = [("all VMs", claims.ALL)] + [(f"{vm} alone", vm) for vm in table.one_vm(s)]
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        width = 0.8 / len(placements)
        for metric, ax in zip(("epoch", "tflops"), axes):
            for i, (label, vms) in enumerate(placements):
                xs = [j + i * width for j in range(len(Technique))]
                runs = [table.get(t, s, vms) for t in Technique]
                values = [value(r, metric) for r in runs]
                ax.bar(xs, [0 if math.isnan(v) else v for v in values], width, label=label)
                for x, v, r in zip(xs, values, runs):
                    if r is not None and math.isnan(v):  # failed; a trial not run gets no mark
                        ax.text(x, 0, "x", ha="center", va="bottom", color="red", fontsize=14, fontweight="bold")
            ax.set_xticks([j + width * (len(placements) - 1) / 2 for j in range(len(Technique))], list(Technique))
            ax.set_ylabel("seconds per epoch" if metric == "epoch" else "TFLOP/s per device (Alpa)")
            ax.legend(fontsize=8)
        fig.suptitle(f"{s}: RTT {claims.rtt(table, s):.1f} ms (x = failed trial; no bar = not run)")
        fig.tight_layout()
        path = out / f"slice-{s}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    if len(names) > 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        for t in Technique:
            pts = [(claims.rtt(table, s), value(table.get(t, s), "epoch")) for s in names]
            pts = [(x, y) for x, y in pts if not math.isnan(y)]
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=t)
        ax.set_xlabel("measured RTT between VMs (ms)")
        ax.set_ylabel("seconds per epoch, all VMs")
        ax.set_yscale("log")
        ax.set_title("Training time vs RTT (the paper's Table II)")
        ax.legend()
        fig.tight_layout()
        path = out / "time-vs-rtt.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def value(r: dict | None, metric: str) -> float:
    if r is None or claims.state(r) != "ok":
        return math.nan
    return r["timing"]["epoch_time_s"] if metric == "epoch" else r["throughput"]["tflops_alpa"]
