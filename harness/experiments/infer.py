"""The paper's unstated setup, inferred from its own record of which runs ran and which failed.

The paper states no batch per GPU, microbatches, precision or rematerialisation. Each setup of a
plausible space (SPACE) is analysed compile-only (memory.analyse) on every Table I slice, and
each of the paper's observations (observed.RUNS: this run ran, that one ran out of memory) is then
reproduced or not. Observations the paper contradicts itself on (observed.conflicts()) are listed,
never counted: no setup can match both sides.

Choosing a setup because it makes a claim hold would verify nothing, so C4's parts are judged
three ways, kept apart in the output (judge_parts):
- at every setup of the space;
- at the setups that best reproduce the observations a part does *not* rest on (held out:
  e.g. C4.zero2-only's own gpt2L runs on RTX + T4 slices play no part in choosing them);
- and whether those setups then reproduce the held-out observations, as a prediction would.
"""
import dataclasses
import itertools
from dataclasses import dataclass

from harness.core.config import Setup
from harness.paper import claims, observed

# What a 2023 Alpa user on these GPUs would plausibly have run. bfloat16 is left out: the T4s and
# RTX 6000s of four of the five slices are Turing GPUs, which have no bfloat16 arithmetic.
BATCHES, MICRO_BATCHES, PRECISIONS, REMATS = (1, 2, 4, 8), (1, 2, 4), ("float32", "float16"), (False, True)


def label(a: Setup) -> str:
    return (f"b{a.batch_per_gpu} m{a.micro_batches} {'fp32' if a.precision == 'float32' else 'fp16'}"
            + (" remat" if a.remat else ""))


def space(batches=BATCHES, micro_batches=MICRO_BATCHES, precisions=PRECISIONS, remats=REMATS,
          schedule: str = "1f1b") -> list[Setup]:
    """Every combination whose microbatches divide the batch (Data and ZeRO2 split each GPU's
    sequences into whole microbatches); Shard planned as Alpa plans it."""
    return [Setup(b, m, p, remat=r, alpa_shard=True, pipeline_schedule=schedule)
            for b, m, p, r in itertools.product(batches, micro_batches, precisions, remats) if b % m == 0]


# The observations each part of C4 generalises from, by (slice, placement, model, technique).
def _rtx_t4(s: str) -> bool:
    return s in ("TACC-TACC", "UTAH-GPN")


REST_ON = {
    "C4.zero2-only": lambda s, placement, model, t: model == "gpt2L" and placement == observed.FOUR_GPUS and _rtx_t4(s),
    "C4.gpt2L-one-vm": lambda s, placement, model, t: model == "gpt2L" and placement == observed.ONE_VM,
    # gpt2L is the one model that ran out of memory on all 4 GPUs of the heterogeneous slices
    "C4.fails-first": lambda s, placement, model, t: model == "gpt2L" and placement == observed.FOUR_GPUS and s in (
        "TACC-TACC", "UTAH-GPN", "BRIS-STAR"),
    "C4.most": lambda *key: False,  # statements about bytes, not runs: nothing to hold out
    "C4.least": lambda *key: False,
}


def counted_observations() -> dict:
    """observed.RUNS without the observations the paper contradicts itself on."""
    conflicts = observed.conflicts()
    return {key: ran for key, ran in observed.RUNS.items()
            if (key[2], key[3], observed.gpu_memory(key[0], key[1])) not in conflicts}


def reproduced(table: claims.MemoryTable, observations: dict) -> dict:
    """observation -> True (the analysis agrees), False (it disagrees) or None (not analysed)."""
    out = {}
    for (s, placement, model, tech), ran in observations.items():
        sl = table.slices.get(s)
        if sl is None:
            out[(s, placement, model, tech)] = None
            continue
        vms = tuple(vm.name for vm in sl.vms) if placement == observed.FOUR_GPUS else (sl.vms[0].name,)
        state = claims.mem_state(table.index.get((model, tech, s, vms)))
        out[(s, placement, model, tech)] = None if state not in ("ok", "oom") else (state == "ok") == ran
    return out


def describe(key) -> str:
    s, placement, model, tech = key
    return f"{s} {placement} {model} {tech} {'ran' if observed.RUNS[key] else 'failed'}"


@dataclass
class SetupResult:
    setup: Setup
    matched: dict  # observation -> True / False / None
    verdicts: dict  # C4 part -> status
    problem: str | None = None  # why the setup could not be analysed

    def score(self, keep=lambda *key: True) -> int:
        return sum(1 for k, v in self.matched.items() if v and keep(*k))


def evaluate(setup: Setup, recs: list[dict], slices) -> SetupResult:
    broken = [r for r in recs if r["status"] not in ("ok", "oom")]
    if broken:
        r = broken[0]
        return SetupResult(setup, {}, {}, f"{r['model']['name']} {r['technique']}: {r['reason']}")
    table = claims.MemoryTable(recs, slices)
    verdicts = {v.part: v.status for v in claims.judge_memory(recs, slices) if v.part in REST_ON}
    return SetupResult(setup, reproduced(table, counted_observations()), verdicts)


def _holds(status: str) -> bool:
    return status in (claims.HOLDS, claims.NOISE)


def judge_parts(results: list[SetupResult]) -> dict:
    """For each C4 part: where it holds, which setups the other observations point to, and
    whether those setups reproduce the part's own observations."""
    usable = [r for r in results if r.problem is None]
    # Observations no setup analysed (slices or models left out of the run) say nothing either way.
    analysed = [k for k in counted_observations() if any(r.matched.get(k) is not None for r in usable)]
    out = {}
    for part, rests in REST_ON.items():
        others = lambda *key, rests=rests: not rests(*key)
        best = max((r.score(others) for r in usable), default=0)
        chosen = [r for r in usable if r.score(others) == best]
        own = [k for k in analysed if rests(*k)]
        unanalysed = any(rests(*k) for k in counted_observations()) and not own
        holds_all = [r for r in usable if _holds(r.verdicts.get(part, claims.NOT_SHOWN))]
        holds_chosen = [r for r in chosen if _holds(r.verdicts.get(part, claims.NOT_SHOWN))]
        predicts = {label(r.setup): sum(1 for k in own if r.matched.get(k)) for r in chosen}
        ruled_out = {describe(k): sum(1 for r in usable if r.matched.get(k) is False) for k in own}
        reproducing = [r for r in usable if own and all(r.matched.get(k) for k in own)]
        if not usable:
            case = "not shown: no setup could be analysed"
        elif unanalysed:
            case = "not shown: the observations it rests on were not analysed in this run"
        elif len(holds_all) == len(usable):
            case = "holds at every plausible setup"
        elif own and not reproducing:
            case = ("no plausible setup reproduces the observations it rests on; each rules out: "
                    + "; ".join(f"{k}: {n} setups" for k, n in ruled_out.items() if n))
        elif holds_chosen and len(holds_chosen) == len(chosen):
            case = "holds at the setups the other observations point to: " + ", ".join(map(label, (r.setup for r in chosen)))
        elif holds_chosen:
            case = ("holds at some of the setups the other observations point to: "
                    + ", ".join(label(r.setup) for r in holds_chosen) + f" (of {len(chosen)})")
        else:
            case = "does not hold at the setups the other observations point to: " + \
                   ", ".join(label(r.setup) for r in chosen)
        out[part] = {"case": case, "holds_at": [label(r.setup) for r in holds_all], "setups": len(usable),
                     "chosen_from_others": [label(r.setup) for r in chosen],
                     "others_matched": best, "others_total": sum(1 for k in analysed if others(*k)),
                     "own_observations": [describe(k) for k in own],
                     "own_matched_at_chosen": predicts,
                     "reproduce_own": [label(r.setup) for r in reproducing]}
    return out


def summary(results: list[SetupResult]) -> dict:
    total = len(counted_observations())
    rows = []
    for r in results:
        row = {"setup": label(r.setup), "assumptions": dataclasses.asdict(r.setup), "problem": r.problem}
        if r.problem is None:
            row |= {"matched": r.score(), "of": total, "verdicts": r.verdicts,
                    "missed": [describe(k) for k, v in r.matched.items() if v is False]}
        rows.append(row)
    rows.sort(key=lambda row: -row.get("matched", -1))
    conflicts = [{"hardware": f"{model} {tech} on GPUs of {sorted({m // 2**30 for m in mem})} GiB",
                  "runs": [f"{where} {'ran' if ran else 'failed'}" for where, ran in runs]}
                 for (model, tech, mem), runs in observed.conflicts().items()]
    return {"observations_counted": total, "conflicts_not_counted": conflicts, "setups": rows,
            "c4": judge_parts(results)}


def markdown(doc: dict) -> str:
    """The summary of an inference (summary() and the run's slices and source) as Markdown."""
    lines = [f"# The paper's unstated setup, inferred from its {doc['observations_counted']} observed runs", "",
             f"Bytes from {doc['source']}; slices {', '.join(doc['slices'])}; b = sequences per GPU, m = microbatches.",
             "", "| setup | observations reproduced | C4's parts at this setup |", "|---|---|---|"]
    for row in doc["setups"]:
        if row["problem"]:
            lines.append(f"| {row['setup']} | - | cannot run: {row['problem']} |")
            continue
        parts = ", ".join(f"{k.split('.', 1)[1]} {v}" for k, v in row["verdicts"].items())
        lines.append(f"| {row['setup']} | {row['matched']} of {row['of']} | {parts} |")
    lines += ["", "Not counted, the paper's own runs disagree on the same hardware:"]
    lines += [f"- {c['hardware']}: {'; '.join(c['runs'])}" for c in doc["conflicts_not_counted"]]
    best = next((row for row in doc["setups"] if not row["problem"]), None)
    if best:
        lines += ["", f"The setup that reproduces most ({best['setup']}) misses: "
                  + ("; ".join(best["missed"]) or "nothing")]
    lines += ["", "## C4, judged apart from the choice of setup", ""]
    for part, j in doc["c4"].items():
        lines.append(f"- **{part}**: {j['case']}. Holds at {len(j['holds_at'])} of {j['setups']} setups; the "
                     f"other observations ({j['others_matched']} of {j['others_total']} reproduced) point to "
                     f"{', '.join(j['chosen_from_others']) or 'none'}"
                     + (f"; its own {len(j['own_observations'])} observations reproduced there: "
                        + ", ".join(f"{k} {v}" for k, v in j["own_matched_at_chosen"].items())
                        if j["own_observations"] else "") + ".")
    return "\n".join(lines)
