"""One run configuration (harness.runs.run_config): a TOML file over one default per setting,
options over the file, read once per run, and the file `reproduce` hands pytest."""
import re

import pytest

from harness.core.config import Budget
from harness.errors import BadInput
from harness.platform import slices
from harness.runs.run_config import RunConfig
from tests_cpu.test_markers import run_pytest


def test_the_trial_settings_default_to_the_budgets_own():
    d, b = RunConfig(), Budget()
    assert (d.model, d.repeats, d.precision) == (b.model, b.repeats, b.precision)
    assert d.budget() == b


def test_a_file_is_read_over_the_defaults_and_options_over_the_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('slices = "UTAH-GPN"\nmodel = "scale-tiny"\nrepeats = 7\nmemory_models = ["gpt2m"]\n')
    run = RunConfig.load(path)
    assert (run.slices, run.model, run.repeats, run.memory_models) == ("UTAH-GPN", "scale-tiny", 7, ("gpt2m",))
    assert run.link_scaling == RunConfig.link_scaling  # not in the file: the default
    over = run.override({"model": "--trial-model"}, model="scale-small", repeats=None)
    assert (over.model, over.repeats) == ("scale-small", 7)  # None: not given
    assert over.named("model") == "--trial-model" and over.named("repeats") == f"run configuration {path}: repeats"


def test_lists_come_as_toml_arrays_or_as_comma_separated_text(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('slices = ["TACC-TACC", "UTAH-GPN"]\nmemory_models = "gpt2m, gpt2L"\n')
    run = RunConfig.load(path).check()
    assert [s.name for s in run.claim_slices] == ["TACC-TACC", "UTAH-GPN"] and run.memory_models == ("gpt2m", "gpt2L")


def test_what_a_run_was_set_by_reads_back_the_same(tmp_path):
    run = RunConfig().override({}, slices="TACC-TACC,UTAH-GPN", model="scale-tiny", gpu_speeds=True,
                               report_dir='reports/a "quoted" dir', memory_models=("gpt2m", "gpt2l"))
    path = tmp_path / "run.toml"
    path.write_text(run.to_toml())
    assert RunConfig.load(path) == run


def test_the_trials_batch_is_a_setting_whose_bad_value_is_named_where_it_came_from(tmp_path):
    """A GPU's share may not hold gpt2m's default batch (docs/gpu.md): the batch is set by file or option."""
    path = tmp_path / "run.toml"
    path.write_text('model = "gpt2m"\nbatch_per_gpu = 1\nmicro_batches = 1\n')
    budget = RunConfig.load(path).check().budget()
    assert (budget.model, budget.batch_per_gpu, budget.micro_batches) == ("gpt2m", 1, 1)
    assert RunConfig(model="gpt2m").budget().batch_per_gpu == 2  # unset: the model's own
    bad = RunConfig.load(path).override({"micro_batches": "--trial-micro-batches"}, micro_batches=0)
    with pytest.raises(BadInput, match=re.escape("--trial-micro-batches: trial budget: micro_batches must be positive")):
        bad.check()


@pytest.mark.parametrize("text, said", [
    ('modle = "scale-tiny"\n', "run configuration {path}: modle: no such setting; expected one of slices, model"),
    ("repeats = 5.5\n", "run configuration {path}: repeats: must be an integer, got 5.5"),
    ("repeats = true\n", "run configuration {path}: repeats: must be an integer, got True"),
    ("batch_per_gpu = 1.5\n", "run configuration {path}: batch_per_gpu: must be an integer, got 1.5"),
    ('gpu_speeds = "yes"\n', "run configuration {path}: gpu_speeds: must be true or false, got 'yes'"),
    ("report_dir = 5\n", "run configuration {path}: report_dir: must be a string, got 5"),
    ("memory_models = [1]\n", "run configuration {path}: memory_models: must be a string or a list of strings, got [1]"),
    ('link_scaling = "wind"\n', "run configuration {path}: link_scaling: must be one of similarity, literal, got 'wind'"),
    ("slices = \n", "run configuration {path}: not valid TOML"),
])
def test_a_bad_file_is_refused_in_one_line_naming_the_file_and_the_setting(tmp_path, text, said):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(BadInput, match=re.escape(said.format(path=path))):
        RunConfig.load(path)
    with pytest.raises(BadInput, match="no such file"):
        RunConfig.load(tmp_path / "missing.toml")


def test_a_bad_value_is_named_by_where_it_came_from(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('model = "gpt9"\n')
    with pytest.raises(BadInput, match=re.escape(f"run configuration {path}: model: unknown model 'gpt9'")):
        RunConfig.load(path).check()
    with pytest.raises(BadInput, match="^--trial-model: unknown model 'gpt9'"):
        RunConfig().override({"model": "--trial-model"}, model="gpt9").check()


def test_each_slice_is_read_once_per_run(monkeypatch):
    read = []
    load = slices.load
    monkeypatch.setattr(slices, "load", lambda name: read.append(name) or load(name))
    run = RunConfig().override({}, slices="TACC-TACC,UTAH-GPN")
    run.check()
    assert run.claim_slices is run.claim_slices and [s.name for s in run.claim_slices] == ["TACC-TACC", "UTAH-GPN"]
    assert read == ["TACC-TACC", "UTAH-GPN"]


def test_pytest_reads_the_file_and_its_options_override_it(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('slices = "UTAH-GPN"\n')
    listed = run_pytest("--collect-only", "-q", "tests_cpu/test_claims.py", "--run-config", str(path))
    trials = [line for line in listed.stdout.splitlines() if "test_trial[" in line]
    assert trials and all("UTAH-GPN" in t for t in trials), listed.stdout[-2000:] + listed.stderr
    over = run_pytest("--collect-only", "-q", "tests_cpu/test_claims.py", "--run-config", str(path),
                      "--claims-slices", "TACC-TACC")
    trials = [line for line in over.stdout.splitlines() if "test_trial[" in line]
    assert trials and all("TACC-TACC" in t for t in trials), over.stdout[-2000:] + over.stderr
    path.write_text('repeats = 3\n')
    bad = run_pytest("--collect-only", "-q", "tests_cpu/test_claims.py", "--run-config", str(path))
    assert bad.returncode == pytest.ExitCode.USAGE_ERROR
    assert bad.stderr.strip() == (f"ERROR: run configuration {path}: repeats: trial budget: repeats must be at "
                                  "least 5 for timed comparisons (a robust spread of the step times), got 3")
