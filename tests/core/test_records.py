"""The records built on every turn keep their dataclass behaviour with the faster __init__."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from orchestrator.core.compaction import TurnContext
from orchestrator.core.messages import (
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from orchestrator.core.records import quick_init
from orchestrator.models.base import AgentInfo, ModelRequest, ModelResponse

RECORDS = [
    TextBlock,
    ThinkingBlock,
    RedactedThinkingBlock,
    ToolUseBlock,
    ToolResultBlock,
    Message,
    Usage,
    AgentInfo,
    ModelRequest,
    ModelResponse,
    TurnContext,
]


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_the_init_takes_the_fields_in_order_with_their_defaults(cls: type[Any]) -> None:
    assert cls.__init__.__qualname__ == f"{cls.__name__}.__init__"  # quick_init's, not dataclasses'
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        if f.default is not dataclasses.MISSING:
            assert p.default == f.default
        elif f.default_factory is dataclasses.MISSING:
            assert p.default is inspect.Parameter.empty


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_records_stay_frozen_and_compare_by_value(cls: type[Any]) -> None:
    required = [
        f
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    values = {f.name: f"v-{f.name}" for f in required}
    a, b = cls(**values), cls(**values)
    assert a == b and hash(a) == hash(b)
    for f in dataclasses.fields(cls):
        assert getattr(a, f.name) == (values[f.name] if f in required else getattr(b, f.name))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(a, dataclasses.fields(cls)[0].name, "changed")
    first = dataclasses.fields(cls)[0].name
    assert getattr(dataclasses.replace(a, **{first: "other"}), first) == "other"
    if required:
        with pytest.raises(TypeError):
            cls()  # a required field cannot be left out


def test_defaults_and_factories_are_applied_per_instance() -> None:
    response = ModelResponse((TextBlock("hi"),), "end_turn")
    assert response.usage == Usage() and response.model == "" and response.id == ""
    assert Usage(3).output_tokens == 0
    assert ToolResultBlock("id", "text").is_error is False
    assert repr(Usage(1, 2)).startswith("Usage(input_tokens=1, output_tokens=2")


def test_quick_init_refuses_classes_it_would_get_wrong() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class KeywordOnly:
        x: int

    for cls in (Mutable, NoSlots, Checked, KeywordOnly):
        with pytest.raises(TypeError):
            quick_init(cls)
