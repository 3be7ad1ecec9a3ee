"""How an output type is named to a parent's model (``spawn_subagent``'s description) and in
the dry run: as its reader writes it, whatever kind of type it is."""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
import pytest
from pydantic import BaseModel

from orchestrator import Agent, run
from orchestrator.models import FunctionModel, ModelRequest, text


class Claim(BaseModel):
    text: str
    sources: list[str]


@pytest.mark.parametrize(
    ("output_type", "described"),
    [
        (Claim, "Claim {text, sources} (as JSON)"),
        (list[Claim], "list[Claim] (as JSON)"),
        (Claim | None, "Claim | None (as JSON)"),
        (Literal["yes", "no"], "Literal['yes', 'no'] (as JSON)"),
        (dict[str, int], "dict[str, int] (as JSON)"),
        (tuple[int, ...], "tuple[int, ...] (as JSON)"),
        (Annotated[int, pydantic.Field(gt=0)], "int (as JSON)"),
    ],
    ids=["model", "list", "optional", "literal", "map", "tuple", "annotated"],
)
async def test_a_parents_model_reads_each_typed_subagents_type_as_written(
    output_type: object, described: str
) -> None:
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> object:
        seen.append(request)
        return text("done")

    child = Agent("child", "C.", description="answers", output_type=output_type)
    lead = Agent("lead", "L.", subagents=[child])
    await run(lead, "go", model=FunctionModel(answer))
    [spawn] = [t for t in seen[0].tools if t.name == "spawn_subagent"]
    assert f"- child: answers Returns {described}." in spawn.description
