"""The shipped baselines say what today's code says of their records: each is judged again from
its folder alone (harness.rejudge), part by part and comparison by comparison."""
import json
import re
import shutil
from pathlib import Path

import pytest

from harness import records, rejudge, resources

BASELINES = sorted(p for p in resources.path("baselines").iterdir() if (p / "results.jsonl").is_file())
ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
# What lent machines measured, kept in the repository beside the shipped baselines.
RECORDED = sorted(p for p in (ROOT / "reports" / "baselines").iterdir() if (p / "claims.json").is_file())


@pytest.mark.parametrize("folder", BASELINES + RECORDED, ids=lambda p: p.name)
def test_a_shipped_baseline_is_what_todays_code_judges_of_its_records(folder):
    assert rejudge.differences(folder) == []


def test_a_doctored_baseline_is_judged_anew(tmp_path):
    """The check can fail: Pipeshard made three times slower on UTAH-GPN in a copy of the
    default baseline, and its claims.json no longer says what its records show."""
    folder = tmp_path / "doctored"
    shutil.copytree(resources.path("baselines", "quick-similarity"), folder)
    recs = records.read(folder / "results.jsonl")
    for r in recs:
        if (r["technique"] == "Pipeshard" and r["cluster"]["slice"] == "UTAH-GPN" and len(r["cluster"]["vms_used"]) > 1
                and not rejudge.is_memory(r)):
            r["timing"]["step_times_s"] = [3 * t for t in r["timing"]["step_times_s"]]
            r["timing"]["median_step_s"] *= 3
            r["timing"]["epoch_time_s"] *= 3
    (folder / "results.jsonl").write_text("".join(records.dumps(r) + "\n" for r in recs))
    assert any(d.startswith("C1.two-site: claims.json says holds, today contradicted") for d in rejudge.differences(folder))


def test_the_baselines_are_those_the_readme_names_and_its_recipe_makes():
    named = set(re.findall(r"harness/resources/baselines/([\w-]+)", README.read_text()))
    assert named == {p.name for p in BASELINES}, named
    for folder in BASELINES:
        context = json.loads((folder / "claims.json").read_text())["context"]
        links = "literal" if folder.name == "quick" else "similarity"
        assert folder.name.startswith("quick") and context["links"] == links, (folder.name, context["links"])
