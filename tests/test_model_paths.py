"""A path given where a run or model directory is expected is named for what it is: missing, a file, or a
directory that is neither (predict, evaluate and export said "no trained model here (is the run finished? try
'ooc resume')" for a path that does not exist, and 'ooc resume' then said "not a run directory")."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ooc.cli import main


@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize("what, expected", [("missing", "no such run or model directory"),
                                            ("empty dir", "not a run or model directory"),
                                            ("file", "")])
def test_a_path_that_is_not_a_run_is_named_for_what_it_is(tmp_path, command, what, expected):
    data = tmp_path / "d.svm"
    data.write_text("1 1:1\n")
    path = tmp_path / "x"
    if what == "empty dir":
        path.mkdir()
    elif what == "file":
        path.write_text("")
    r = CliRunner().invoke(main, [command, str(path), str(data)])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and len(lines) == 1 and "Traceback" not in r.output, r.output
    assert "ooc resume" not in lines[0] and expected in lines[0], lines[0]
