"""The spans a run emits, following the OpenTelemetry GenAI semantic conventions.

``invoke_agent {name}`` per agent run, ``turn {name}`` per loop turn, ``chat {model}`` per model
call and ``execute_tool {name}`` per tool call; a child's ``invoke_agent`` sits under its
spawn's ``execute_tool``. Standard ``gen_ai.usage.*`` attributes go on ``chat`` spans only, so
backends that add them up do not count twice; subtree roll-ups use ``orchestrator.*`` names.
The cache-write attribute is ``gen_ai.usage.cache_creation.input_tokens`` (the conventions'
registry name; the anthropic SDK says ``cache_write``).

Cancellation is recorded deliberately: the span keeps status UNSET (nothing failed) and gets
``orchestrator.cancelled=true`` and ``orchestrator.outcome=cancelled``. Every other outcome
but success sets status ERROR and ``error.type``. Attributes are only computed when the span
is recording, so an unconfigured tracer costs next to nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from .cancellation import is_cancellation
from .messages import Message, ToolResultBlock, ToolUseBlock, Usage, message_to_wire
from .redact import redact
from .tracing import content_capture_enabled, content_for_span

if TYPE_CHECKING:
    from .models.base import ModelRequest, ModelResponse

__all__ = ["get_tracer"]


def get_tracer(provider: trace.TracerProvider | None) -> Tracer:
    """Our tracer, from ``provider`` or the global one (a no-op until configured)."""
    from . import __version__

    return trace.get_tracer("orchestrator", __version__, tracer_provider=provider)


@contextmanager
def span(
    tracer: Tracer,
    name: str,
    kind: SpanKind,
    attributes: Callable[[], dict[str, Any]] | None = None,
    *,
    records_outcome: bool = False,
) -> Iterator[Span]:
    """A current span that is ended on every exit and records failures our way.

    ``attributes`` is called only when the span is recording. With ``records_outcome`` the
    caller states the outcome itself (agent spans: a deadline is ``timeout``, not a plain
    cancellation), so a passing cancellation is not marked.
    """
    with tracer.start_as_current_span(
        name, kind=kind, record_exception=False, set_status_on_exception=False
    ) as s:
        if attributes is not None and s.is_recording():
            s.set_attributes(attributes())
        try:
            yield s
        except BaseException as exc:
            if is_cancellation(exc):
                if s.is_recording() and not records_outcome:
                    s.set_attribute("orchestrator.cancelled", True)
            elif s.is_recording():
                s.set_attribute("error.type", type(exc).__qualname__)
                s.set_status(Status(StatusCode.ERROR, redact(str(exc))[:200]))
            raise


def usage_attributes(prefix: str, usage: Usage) -> dict[str, Any]:
    """Roll-up attributes (``orchestrator.usage.*``) for an agent or a spawn."""
    return {
        f"{prefix}.input_tokens": usage.input_tokens,
        f"{prefix}.output_tokens": usage.output_tokens,
        f"{prefix}.cache_read_tokens": usage.cache_read_tokens,
        f"{prefix}.cache_write_tokens": usage.cache_write_tokens,
        f"{prefix}.cost_usd": usage.cost_usd,
    }


def record_outcome(s: Span, outcome: str, error: str | None) -> None:
    """Set the outcome attribute and the span status for an agent or tool outcome."""
    if not s.is_recording():
        return
    s.set_attribute("orchestrator.outcome", outcome)
    if outcome in ("completed", "ok"):
        s.set_status(Status(StatusCode.OK))
    elif outcome == "cancelled":
        s.set_attribute("orchestrator.cancelled", True)
    else:
        s.set_attribute("error.type", outcome)
        s.set_status(Status(StatusCode.ERROR, redact(error or outcome)[:300]))


def chat_request_attributes(
    model_name: str, provider: str, request: ModelRequest, run_id: str
) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model_name,
        "gen_ai.request.max_tokens": request.max_tokens,
        "gen_ai.conversation.id": run_id,
        "gen_ai.agent.name": request.agent.name,
        "orchestrator.agent.path": request.agent.path,
        "orchestrator.request.messages": len(request.messages),
        "orchestrator.request.tools": len(request.tools),
        "orchestrator.request.estimated_input_tokens": request.input_tokens_estimate,
    }
    if content_capture_enabled():
        attrs["gen_ai.system_instructions"] = content_for_span(
            [{"type": "text", "content": request.system}]
        )
        attrs["gen_ai.input.messages"] = content_for_span(
            [message_to_wire(m) for m in request.messages]
        )
    return attrs


def record_chat_response(s: Span, response: ModelResponse) -> None:
    if not s.is_recording():
        return
    u = response.usage
    s.set_status(Status(StatusCode.OK))
    s.set_attributes(
        {
            "gen_ai.response.model": response.model,
            "gen_ai.response.finish_reasons": [response.stop_reason],
            "gen_ai.usage.input_tokens": u.input_tokens,
            "gen_ai.usage.output_tokens": u.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": u.cache_read_tokens,
            "gen_ai.usage.cache_creation.input_tokens": u.cache_write_tokens,
            "orchestrator.cost_usd": u.cost_usd,
        }
    )
    if response.id:
        s.set_attribute("gen_ai.response.id", response.id)
    if content_capture_enabled():
        s.set_attribute(
            "gen_ai.output.messages",
            content_for_span([message_to_wire(Message("assistant", response.content))]),
        )


def tool_attributes(call: ToolUseBlock, run_id: str, agent_name: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": run_id,
        "gen_ai.agent.name": agent_name,
    }
    if content_capture_enabled():
        attrs["gen_ai.tool.call.arguments"] = content_for_span(dict(call.input))
    return attrs


def record_tool_result(s: Span, result: ToolResultBlock) -> None:
    if not s.is_recording():
        return
    if result.is_error:
        record_outcome(s, "tool_error", result.content)
    else:
        record_outcome(s, "ok", None)
    if content_capture_enabled():
        s.set_attribute("gen_ai.tool.call.result", redact(result.content))
