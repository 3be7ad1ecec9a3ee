"""Typed results to a type checker: ``mypy --strict`` on typed_results_check.py (beside this
file) finds no error, and finds the errors a wrong expectation makes, so the check is real.

mypy runs in this process through its API (``mypy.api.run``), with its cache in the project's
``.mypy_cache`` (the one ``mypy`` itself uses), so a warm cache makes it take seconds; cold, it
checks the package first (tens of seconds on these machines): marked slow.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]
CHECK = Path(__file__).with_name("typed_results_check.py")

WRONG = textwrap.dedent(
    """
    from typing import assert_type

    from orchestrator import run_sync
    from typed_results_check import Report, report_agent, text_agent

    assert_type(run_sync(report_agent, "go").output, str)
    assert_type(run_sync(text_agent, "go").output, Report)
    run_sync(report_agent, "go").output.no_such_field
    """
)


@pytest.mark.slow  # mypy checks the package: seconds warm, tens of seconds cold
def test_every_way_to_run_a_typed_agent_gives_its_type_under_mypy_strict(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_expectations.py"
    wrong.write_text(WRONG)
    out, err, status = api.run(
        [
            "--strict",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "--no-error-summary",
            "--show-error-codes",
            str(CHECK),
            str(wrong),
        ]
    )
    assert not err, err
    lines = [line for line in out.splitlines() if ": error:" in line or ": note:" in line]
    in_check = [line for line in lines if CHECK.name in line]
    assert in_check == [], "\n".join(in_check)  # every assert_type holds, nothing is Any
    errors = [
        (int(m.group(1)), m.group(2))
        for line in lines
        if (m := re.search(r"wrong_expectations\.py:(\d+): error: (.*)", line))
    ]
    assert errors == [
        (7, 'Expression is of type "Report", not "str"  [assert-type]'),
        (8, 'Expression is of type "str", not "Report"  [assert-type]'),
        (9, '"Report" has no attribute "no_such_field"  [attr-defined]'),
    ], out
    assert status == 1
