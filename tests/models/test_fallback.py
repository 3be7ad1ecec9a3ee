"""Fallback models: a chain passes a failed call to its next model, and only when another
model could do better (models/fallback.py)."""

from __future__ import annotations

import pytest

from orchestrator import Agent, ConfigurationError, Limits, ModelError, RunStatus, Usage, run
from orchestrator.models import FallbackModel, FunctionModel, ModelRequest, resolve_model, text
from orchestrator.testing import recording_spans


def failing(name: str, kind: str, *, fatal: bool = False, billed: Usage | None = None):
    asked: list[ModelRequest] = []

    def fn(request: ModelRequest):
        asked.append(request)
        raise ModelError(f"{name} failed: {kind}", kind=kind, fatal=fatal, usage=billed)

    return FunctionModel(fn, name=name), asked


def answering(name: str, answer: str = "ok", price: float = 0.0):
    asked: list[ModelRequest] = []

    def fn(request: ModelRequest):
        asked.append(request)
        return text(answer)

    return FunctionModel(fn, name=name, prices=lambda u: price), asked


@pytest.mark.parametrize(
    "kind",
    ["overloaded", "api_error", "rate_limit", "timeout", "connection", "not_found", "permission"],
)
async def test_a_call_the_primary_fails_for_good_goes_to_the_next_model(kind: str):
    primary, first = failing("primary", kind)
    backup, second = answering("backup", "from backup")
    result = await run(Agent("a", "x"), "go", model=FallbackModel(primary, backup))
    assert result.status is RunStatus.COMPLETED
    assert result.output == "from backup"
    assert len(first) == 1 and len(second) == 1
    assert second[0].messages == first[0].messages  # the same request


@pytest.mark.parametrize("kind", ["invalid_request", "context_exceeded", "request_too_large"])
async def test_errors_no_other_model_could_fix_are_not_passed_on(kind: str):
    primary, _ = failing("primary", kind)
    backup, asked = answering("backup")
    result = await run(Agent("a", "x"), "go", model=FallbackModel(primary, backup))
    assert result.status in (RunStatus.ERROR, RunStatus.CONTEXT_EXCEEDED)
    assert asked == []


async def test_a_fatal_error_of_the_primary_passes_on_without_ending_the_run():
    primary, _ = failing("primary", "authentication", fatal=True)
    backup, _ = answering("backup", "fine")
    result = await run(Agent("a", "x"), "go", model=FallbackModel(primary, backup))
    assert result.status is RunStatus.COMPLETED and result.output == "fine"


async def test_when_the_last_model_fails_too_the_agent_ends_as_without_a_chain():
    primary, _ = failing("primary", "overloaded")
    backup, _ = failing("backup", "overloaded")
    result = await run(Agent("a", "x"), "go", model=FallbackModel(primary, backup))
    assert result.status is RunStatus.ERROR
    assert "backup failed: overloaded" in (result.error or "")


async def test_each_attempt_is_its_own_chat_span_naming_its_model():
    primary, _ = failing("primary", "overloaded")
    backup, _ = answering("backup")
    with recording_spans() as recorder:
        await run(
            Agent("a", "x"),
            "go",
            model=FallbackModel(primary, backup),
            tracer_provider=recorder.tracer_provider,
        )
    chats = [s for s in recorder.spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert [s.attributes["gen_ai.request.model"] for s in chats] == ["primary", "backup"]
    assert not chats[0].status.is_ok and chats[1].status.is_ok


async def test_usage_and_cost_are_billed_per_model_that_was_used():
    billed = Usage(input_tokens=10, output_tokens=0, cost_usd=0.5)
    primary, _ = failing("primary", "overloaded", billed=billed)
    backup, _ = answering("backup", price=0.25)
    result = await run(
        Agent("a", "x"),
        "go",
        model=FallbackModel(primary, backup),
        limits=Limits(cost_budget_usd=10.0),
    )
    assert result.ok
    assert result.usage.cost_usd == pytest.approx(0.75)
    assert result.usage.requests == 2


def test_a_chain_prices_a_call_at_its_dearest_model_for_budget_reservations():
    cheap, _ = answering("cheap", price=0.01)
    dear, _ = answering("dear", price=2.0)
    assert FallbackModel(cheap, dear).cost(Usage(input_tokens=1)) == 2.0


def test_a_model_string_with_a_bar_is_a_fallback_chain():
    chain = resolve_model("offline|offline")
    assert isinstance(chain, FallbackModel)
    assert chain.name == "offline|offline"
    assert len(chain.fallback_chain) == 2


def test_a_chain_can_answer_natively_only_if_every_model_can():
    scripted, _ = answering("a")

    class Plain:
        name = "plain"
        provider = "plain"

        def cost(self, usage: Usage) -> float:
            return 0.0

        async def request(self, request: ModelRequest, ctx: object) -> object:
            raise AssertionError

    assert FallbackModel(scripted, scripted).supports_native_output
    assert not FallbackModel(scripted, Plain()).supports_native_output  # type: ignore[arg-type]


def test_a_chain_needs_two_models():
    only, _ = answering("only")
    with pytest.raises(ConfigurationError, match="at least two"):
        FallbackModel(only)
