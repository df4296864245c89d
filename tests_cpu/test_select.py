"""`python -m harness select`: bad input is named before anything starts.

Its decisions over real trials are tested on the claims' cluster (test_claims.py), through the
same code the command runs once it has brought its own emulated slice up with trials.emulated,
whose teardown on Ctrl-C test_reproduce.py checks.
"""

import pytest

from harness.cli import main


@pytest.mark.parametrize("args, field", [(["--delta", "0"], "--delta"), (["--steps", "2"], "--steps"),
                                         (["--slice", "nowhere"], "slice 'nowhere'"), (["--eps", "-1"], "--eps"),
                                         (["--margin", "-1"], "--margin")])
def test_select_names_bad_input_before_starting_anything(args, field, capsys):
    assert main(["select", *args]) == 2
    err = capsys.readouterr().err
    assert field in err and err.count("\n") == 1, err

