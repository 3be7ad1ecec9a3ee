"""The benchmark scripts stay runnable by CI: `.ci/run` smoke-runs each with ``--smoke``."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).parent / "benchmarks").glob("bench_*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_script_takes_the_smoke_flag_ci_runs_it_with(script: Path) -> None:
    # the whole run is CI's job (seconds each); this catches a script without the flag at once
    assert '"--smoke"' in script.read_text(encoding="utf-8"), f"{script.name} lacks --smoke"


def test_there_are_benchmark_scripts_to_check() -> None:
    assert len(BENCHMARKS) >= 10
