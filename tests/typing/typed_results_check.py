"""Checked by mypy --strict (tests/typing/test_typed_results.py), never run: every way to run
an ``Agent[T]`` gives a ``RunResult[T]`` whose ``output`` is ``T``, with no cast.

``assert_type`` is exact: if a generic broke and ``output`` became ``Any`` (or ``str``), each
line below would be an error.
"""

from __future__ import annotations

import dataclasses
from typing import Any, assert_type

from pydantic import BaseModel
from typing_extensions import TypedDict

from orchestrator import Agent, RunResult, aio, open_run, resume, resume_sync, run, run_sync
from orchestrator.research.findings import Findings


class Report(BaseModel):
    title: str
    sources: list[str]


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


report_agent = Agent("lead", "Write a report.", output_type=Report)
text_agent = Agent("writer", "Write.")
point_agent = Agent("p", "Point.", output_type=Point)
movie_agent = Agent("m", "Movie.", output_type=Movie)
list_agent = Agent("l", "List.", output_type=list[int])
findings_agent = Agent("r", "Research.", output_type=Findings)

assert_type(report_agent, Agent[Report])
assert_type(text_agent, Agent[str])
assert_type(point_agent, Agent[Point])
assert_type(movie_agent, Agent[Movie])
assert_type(findings_agent, Agent[Findings])


async def every_way_to_run() -> None:
    result = await run(report_agent, "go")
    assert_type(result, RunResult[Report])
    assert_type(result.output, Report)
    assert_type(result.output.title, str)

    assert_type((await run(text_agent, "go")).output, str)
    assert_type((await run(point_agent, "go")).output, Point)
    assert_type((await run(movie_agent, "go")).output["year"], int)
    assert_type((await run(findings_agent, "go")).output.claims[0].sources, list[str])

    async with open_run(report_agent, "go") as handle:
        assert_type((await handle.result()).output, Report)

    assert_type((await resume("run.db", agent=report_agent)).output, Report)
    assert_type(await resume("run.db"), RunResult[Any])  # no definition: nothing to type by

    assert_type((await aio.run(report_agent, "go")).output, Report)
    async with aio.open_run(report_agent, "go") as aio_handle:
        assert_type((await aio_handle.result()).output, Report)


def synchronously() -> None:
    assert_type(run_sync(report_agent, "go").output, Report)
    assert_type(run_sync(text_agent, "go").output, str)
    assert_type(resume_sync("run.db", agent=report_agent).output, Report)
