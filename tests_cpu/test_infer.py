"""Inferring the paper's unstated setup from its observed runs, and judging C4 apart from that choice."""
import json
import subprocess
import sys

import pytest

from harness.core.config import Setup
from harness.experiments import infer
from harness.paper import claims, observed

# The inference command compiles gpt2m's programs for their memory (compile-only): no link, VM or Ray cluster.
pytestmark = [pytest.mark.slow, pytest.mark.untimed]


def S(batch_per_gpu: int, micro_batches: int) -> Setup:
    return Setup(batch_per_gpu, micro_batches, remat=False, alpa_shard=True)


def result(setup: Setup, wrong: set, verdicts: dict) -> infer.SetupResult:
    """A setup that reproduces every counted observation but those in `wrong`."""
    matched = {key: key not in wrong for key in infer.counted_observations()}
    return infer.SetupResult(setup, matched, verdicts)


ZERO2_OWN = [k for k in infer.counted_observations() if infer.REST_ON["C4.zero2-only"](*k)]
OTHERS = [k for k in infer.counted_observations() if not infer.REST_ON["C4.zero2-only"](*k)]


def test_the_space_keeps_whole_microbatches_and_leaves_out_bfloat16():
    setups = infer.space()
    assert all(a.batch_per_gpu % a.micro_batches == 0 for a in setups)
    assert {a.precision for a in setups} == {"float32", "float16"}
    assert Setup(1, 2) not in setups and len({infer.label(a) for a in setups}) == len(setups)


def test_conflicting_observations_are_not_counted():
    counted = infer.counted_observations()
    conflicts = observed.conflicts()
    assert conflicts and len(counted) < len(observed.RUNS)
    for (s, placement, model, tech) in observed.RUNS:
        key = (model, tech, observed.gpu_memory(s, placement))
        assert ((s, placement, model, tech) in counted) == (key not in conflicts)


def test_a_part_is_judged_at_setups_chosen_without_its_own_observations():
    """B reproduces C4.zero2-only's own observations and makes it hold, but A reproduces more of the
    other observations: A is the setup the evidence points to, and the part is judged there."""
    a = result(S(2, 2), wrong=set(ZERO2_OWN[:1]), verdicts={"C4.zero2-only": claims.CONTRADICTED})
    b = result(S(4, 2), wrong=set(OTHERS[:3]), verdicts={"C4.zero2-only": claims.HOLDS})
    part = infer.judge_parts([a, b])["C4.zero2-only"]
    assert part["chosen_from_others"] == ["b2 m2 fp32"]
    assert part["case"] == "does not hold at the setups the other observations point to: b2 m2 fp32"
    assert part["holds_at"] == ["b4 m2 fp32"] and part["reproduce_own"] == ["b4 m2 fp32"]
    assert part["own_matched_at_chosen"] == {"b2 m2 fp32": len(ZERO2_OWN) - 1}


def test_the_three_cases():
    holds = {p: claims.HOLDS for p in infer.REST_ON}
    everywhere = infer.judge_parts([result(S(2, 2), set(), holds), result(S(4, 2), set(), holds)])
    assert everywhere["C4.most"]["case"] == "holds at every plausible setup"
    # No setup reproduces the part's own observations: say which observation rules out how many.
    nowhere = infer.judge_parts([result(S(2, 2), {ZERO2_OWN[0]}, {"C4.zero2-only": claims.CONTRADICTED})])
    case = nowhere["C4.zero2-only"]["case"]
    assert case.startswith("no plausible setup reproduces the observations it rests on")
    assert f"{infer.describe(ZERO2_OWN[0])}: 1 setups" in case
    chosen = infer.judge_parts([result(S(2, 2), set(), {"C4.zero2-only": claims.HOLDS}),
                                result(S(4, 2), set(OTHERS[:1]), {"C4.zero2-only": claims.CONTRADICTED})])
    assert chosen["C4.zero2-only"]["case"] == "holds at the setups the other observations point to: b2 m2 fp32"


def test_setups_that_cannot_be_analysed_are_listed_not_judged():
    broken = infer.SetupResult(S(8, 4), {}, {}, problem="gpt2m Data: batch 32 is not divisible by ...")
    fine = result(S(2, 2), set(), {p: claims.HOLDS for p in infer.REST_ON})
    doc = infer.summary([broken, fine])
    assert [row["setup"] for row in doc["setups"]] == ["b2 m2 fp32", "b8 m4 fp32"]
    assert doc["setups"][1]["problem"].startswith("gpt2m Data")
    assert doc["c4"]["C4.least"]["setups"] == 1


def test_infer_bad_lists_are_one_line_errors():
    proc = subprocess.run([sys.executable, "-m", "harness", "memory", "--infer", "--batches", "2,x"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--batches must be a comma-separated list of positive integers" in proc.stderr.strip().splitlines()[-1]


def test_the_report_names_every_setup_part_and_conflict():
    holds = {p: claims.HOLDS for p in infer.REST_ON}
    doc = {"source": "test", "slices": ["UTAH-GPN"],
           **infer.summary([result(S(2, 2), set(), holds), result(S(4, 2), set(OTHERS[:2]), holds)])}
    text = infer.markdown(doc)
    assert "| b2 m2 fp32 | " in text and "| b4 m2 fp32 | " in text
    assert all(f"**{part}**" in text for part in infer.REST_ON)
    assert all(c["hardware"] in text for c in doc["conflicts_not_counted"])
    assert "misses: nothing" in text  # b2 m2 reproduces every counted observation


def test_the_inference_command_and_its_place_in_the_report(tmp_path):
    """`memory --infer --json` (as reproduce --infer runs it) on a small space: one JSON document,
    one row per setup, every C4 part judged; the report gets it as JSON and Markdown."""
    from harness.commands import reproduce

    narrower = ("--model", "gpt2m", "--batches", "2", "--micro", "2", "--precisions", "float32")
    assert reproduce._infer("UTAH-GPN", tmp_path, narrower) == 0
    doc = json.loads((tmp_path / "inference.json").read_text())
    assert doc["slices"] == ["UTAH-GPN"] and set(doc["c4"]) == set(infer.REST_ON)
    assert sorted(row["setup"] for row in doc["setups"]) == ["b2 m2 fp32", "b2 m2 fp32 remat"]
    for row in doc["setups"]:  # gpt2m on UTAH-GPN: 8 of the observations analysed, all of them ran
        assert row["problem"] is None and 0 < row["matched"] <= 8 and row["of"] == doc["observations_counted"]
        assert set(row["verdicts"]) <= set(infer.REST_ON)
    assert (tmp_path / "inference.md").read_text().startswith("# The paper's unstated setup, inferred")


def test_a_part_whose_observations_were_not_analysed_is_not_shown():
    """A run on other slices (or without gpt2L) cannot judge C4.zero2-only's own runs: not shown,
    never 'no setup reproduces them'; and with no setup analysed at all, no part is shown."""
    holds = {p: claims.HOLDS for p in infer.REST_ON}
    partial = result(S(2, 2), set(), holds)
    partial.matched = {k: (None if k in ZERO2_OWN else v) for k, v in partial.matched.items()}
    judged = infer.judge_parts([partial])
    assert judged["C4.zero2-only"]["case"] == "not shown: the observations it rests on were not analysed in this run"
    assert judged["C4.zero2-only"]["own_observations"] == []
    assert judged["C4.most"]["others_total"] == len(OTHERS)
    broken = infer.SetupResult(S(8, 4), {}, {}, problem="cannot build")
    assert all(j["case"] == "not shown: no setup could be analysed" for j in infer.judge_parts([broken]).values())
