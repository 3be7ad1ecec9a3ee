"""The spans a run emits, named and attributed per the OpenTelemetry GenAI semantic conventions.

``invoke_agent {name}`` per agent run, ``turn {name}`` per loop turn, ``chat {model}`` per model
call and ``execute_tool {name}`` per tool call; a child's ``invoke_agent`` sits under its
spawn's ``execute_tool``. Standard ``gen_ai.usage.*`` attributes go on ``chat`` spans only, so
backends that add them up do not count twice; roll-ups use ``orchestrator.*`` names. Every span
states its outcome, cancellation included (:func:`record_outcome`). Only the OpenTelemetry API
is needed, so core imports this module; attributes are computed only when a span is recording,
so an unconfigured tracer costs next to nothing.

No secret reaches a span, whoever chose the text: a span's name and every string attribute,
event attribute and status message written through :func:`span` are redacted
(:func:`~orchestrator.core.redact.redact`, with the run's snapshot), with content capture on or
off. A tool name the model made up, a call id, an agent or model name, a stop reason, an error
type: all pass through :class:`_RedactedSpan`, the span :func:`span` hands out, or through a
:class:`~.direct.DirectSpan`, which redacts what it is given itself.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util import types

from ..core.cancellation import is_cancellation
from ..core.errors import exception_type
from ..core.messages import (
    Block,
    Message,
    ServerToolResultBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    well_formed,
)
from ..core.redact import redact
from .content import content_for_span

if TYPE_CHECKING:
    from ..models.base import ModelRequest, ModelResponse

__all__ = ["CONTENT_KEYS", "NO_SPAN", "get_tracer", "span", "tracing_live"]


TRACER_NAME = "orchestrator"
"""The instrumentation scope of every span the runtime makes."""


def get_tracer(provider: trace.TracerProvider | None) -> Tracer:
    """Our tracer, from ``provider`` or the global one (a no-op until configured).

    A provider :func:`~.setup.configure_tracing` set up, that nobody else added a processor
    to, gives the direct road's tracer (:mod:`.direct`): the same spans for a fraction of the
    CPU. Decided per run, as :func:`tracing_live` is.
    """
    from .. import __version__

    exporters = sys.modules.get(f"{__package__}.exporters")  # never loaded: no setup of ours
    if exporters is not None:
        direct: Tracer | None = exporters.direct_tracer(
            trace.get_tracer_provider() if provider is None else provider
        )
        if direct is not None:
            return direct
    return trace.get_tracer(TRACER_NAME, __version__, tracer_provider=provider)


def tracing_live(provider: trace.TracerProvider | None) -> bool:
    """Whether spans would be recorded: a provider was passed, or a real one is global.

    Decided once per run: an unconfigured process then pays nothing per span. A global provider
    configured while a run is going is picked up by the next run.
    """
    if provider is not None:
        return not isinstance(provider, trace.NoOpTracerProvider)
    current = trace.get_tracer_provider()
    return not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


class _NoSpan:
    """The span context manager of an untraced run: no generator, no context switch.

    Static methods, so that ``with`` binds nothing: a bound ``__exit__`` would be one more
    object kept alive for every open span of every suspended agent, for the GC to walk.
    """

    __slots__ = ()

    @staticmethod
    def __enter__() -> Span:
        return trace.INVALID_SPAN

    @staticmethod
    def __exit__(*exc: object) -> None:
        return None


NO_SPAN = _NoSpan()

CONTENT_KEYS: Final = frozenset(
    {
        "gen_ai.system_instructions",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
)
"""Attributes this module sets only to :func:`~.content.content_for_span`'s text, which is
redacted already (up to 16 KB each: not scanned twice)."""


_TEXTS: Final = (str, list, tuple)


def _redacted_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list | tuple):  # (a str is a Sequence too: checked first)
        return [redact(v) if isinstance(v, str) else v for v in value]
    return value


def _redacted(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if attributes is None:
        return None
    out = dict(attributes)
    for key, value in out.items():  # numbers (most usage figures) cost only this test
        if isinstance(value, _TEXTS) and key not in CONTENT_KEYS:
            out[key] = _redacted_value(value)
    return out


class _RedactedSpan(Span):
    """A recording span whose every written text is redacted first (see the module's doc).

    What :func:`span` hands to the runtime; the span itself stays the current one in the
    context (a child's parent), and the runtime writes through this one.
    """

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def end(self, end_time: int | None = None) -> None:
        self._span.end(end_time)

    def get_span_context(self) -> SpanContext:
        return self._span.get_span_context()

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        self._span.set_attributes(_redacted(attributes) or {})

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        self._span.set_attribute(key, value if key in CONTENT_KEYS else _redacted_value(value))

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        self._span.add_event(redact(name), _redacted(attributes), timestamp)

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        self._span.add_link(context, _redacted(attributes))

    def update_name(self, name: str) -> None:
        self._span.update_name(redact(well_formed(name)))

    def is_recording(self) -> bool:
        return self._span.is_recording()

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if isinstance(status, Status) and status.description:
            status = Status(status.status_code, redact(status.description))
        self._span.set_status(status, redact(description) if description else description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """The exception event the SDK would record, with its message and traceback redacted
        (the SDK's own would write ``str(exception)`` as it is)."""
        self.add_event("exception", exception_event(exception, attributes, escaped), timestamp)


def exception_event(
    exception: BaseException, attributes: types.Attributes, escaped: bool
) -> dict[str, Any]:
    """The attributes of the ``exception`` event the SDK's ``record_exception`` writes (the
    span they are added to redacts them)."""
    recorded: dict[str, Any] = {
        "exception.type": exception_type(exception),
        "exception.message": str(exception),
        "exception.stacktrace": "".join(traceback.format_exception(exception)),
        "exception.escaped": str(escaped),
    }
    recorded.update(attributes or {})
    return recorded


class _LiveSpan:
    """A current span, ended on every exit, with failures and cancellation recorded our way."""

    __slots__ = (
        "_attributes",
        "_cut",
        "_kind",
        "_name",
        "_records_outcome",
        "_span",
        "_token",
        "_tracer",
    )

    def __init__(
        self,
        tracer: Tracer,
        name: str,
        kind: SpanKind,
        attributes: Callable[[], dict[str, Any]] | None,
        records_outcome: bool,
        cut: Callable[[], tuple[str, str]] | None,
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._kind = kind
        self._attributes = attributes
        self._records_outcome = records_outcome
        self._cut = cut

    def __enter__(self) -> Span:
        s = self._tracer.start_span(
            self._name, kind=self._kind, record_exception=False, set_status_on_exception=False
        )
        self._span = s
        self._token = otel_context.attach(trace.set_span_in_context(s))
        if not s.is_recording():  # sampled out: nothing is written, nothing to redact
            return s
        # a direct span redacts what it is given itself (.direct)
        written = s if getattr(s, "redacts", False) else _RedactedSpan(s)
        if self._attributes is not None:
            try:
                attributes = self._attributes()
            except Exception as exc:  # describing the span must never break the run
                s.set_attribute("orchestrator.attribute_error", type(exc).__name__)
            else:
                written.set_attributes(attributes)
        return written

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        s = self._span
        try:
            if exc is not None and s.is_recording():
                if is_cancellation(exc):
                    if self._cut is not None:  # why it was cut: a deadline is a timeout
                        record_outcome(s, *self._cut())
                    elif not self._records_outcome:
                        s.set_attribute("orchestrator.cancelled", True)
                        s.set_attribute("orchestrator.outcome", "cancelled")
                else:
                    s.set_attribute("error.type", redact(exception_type(exc)))
                    s.set_status(Status(StatusCode.ERROR, redact(str(exc))[:200]))
        finally:
            otel_context.detach(self._token)
            s.end()


def span(
    tracer: Tracer | None,
    operation: str,
    target: str,
    kind: SpanKind,
    attributes: Callable[[], dict[str, Any]] | None = None,
    *,
    records_outcome: bool = False,
    cut: Callable[[], tuple[str, str]] | None = None,
) -> _LiveSpan | _NoSpan:
    """A context manager for a current span (``tracer=None``: an untraced run, no span at all).

    The span is named ``"{operation} {target}"`` as the GenAI conventions name spans (``chat
    claude-sonnet-5-5``, ``execute_tool search``); the name is only built for a traced run.

    ``attributes`` is called only when the span is recording. With ``records_outcome`` the
    caller states the outcome itself (agent spans: a deadline is ``timeout``, not a plain
    cancellation), so a passing cancellation is not marked. ``cut`` says why a cancellation
    cut the span (outcome, reason), for spans inside an agent: a model or tool call cut by the
    run's deadline is an error (``timeout``) to find in a trace, not a deliberate cancellation.
    """
    if tracer is None:
        return NO_SPAN
    # a name the model made up may hold a lone surrogate, which fails the encoding of the
    # span's whole export batch (other agents' spans with it), or a secret
    named = getattr(tracer, "span_name", None)  # the direct road's, which remembers names
    return _LiveSpan(
        tracer,
        named(f"{operation} {target}") if named else redact(f"{operation} {well_formed(target)}"),
        kind,
        attributes,
        records_outcome,
        cut,
    )


def record_retry(attempt: int, error_type: str, delay: float) -> None:
    """An ``orchestrator.retry`` event on the current span (a tool or model call about to be
    retried): the trace shows the failed attempts and the backoff inside the span's time."""
    current = trace.get_current_span()
    scope = getattr(current, "instrumentation_scope", None)  # an untraced run's caller's span
    if current.is_recording() and scope is not None and scope.name == TRACER_NAME:
        current.add_event(
            "orchestrator.retry",
            {
                "orchestrator.retry.attempt": attempt,
                "orchestrator.retry.delay_s": round(delay, 3),
                "error.type": redact(error_type),
            },
        )


def usage_attributes(prefix: str, usage: Usage) -> dict[str, Any]:
    """Roll-up attributes (``orchestrator.usage.*``) for an agent or a spawn; the hosted tool
    counts only when there were some."""
    attrs = {
        f"{prefix}.input_tokens": usage.input_tokens,
        f"{prefix}.output_tokens": usage.output_tokens,
        f"{prefix}.cache_read_tokens": usage.cache_read_tokens,
        f"{prefix}.cache_write_tokens": usage.cache_write_tokens,
        f"{prefix}.cost_usd": usage.cost_usd,
    }
    if usage.web_search_requests or usage.web_fetch_requests:
        attrs[f"{prefix}.web_search_requests"] = usage.web_search_requests
        attrs[f"{prefix}.web_fetch_requests"] = usage.web_fetch_requests
    return attrs


def record_outcome(s: Span, outcome: str, error: str | None) -> None:
    """Set the outcome attribute and the span status for an agent or tool outcome.

    Cancellation is recorded deliberately: the span keeps status UNSET (nothing failed) and gets
    ``orchestrator.cancelled=true`` and ``orchestrator.outcome=cancelled``. Every other outcome
    but success sets status ERROR and ``error.type``, also on a span a cancellation cut when the
    cause was the deadline (``timeout``) or a fatal error (``error``).
    """
    if not s.is_recording():
        return
    if outcome in ("completed", "ok"):
        s.set_attribute("orchestrator.outcome", outcome)
        s.set_status(StatusCode.OK)  # (a code, not a Status: one object less per span)
    elif outcome == "cancelled":
        s.set_attributes({"orchestrator.outcome": outcome, "orchestrator.cancelled": True})
    elif outcome == "awaiting_approval":  # nothing failed: it waits for a person
        s.set_attribute("orchestrator.outcome", outcome)
    else:
        s.set_attributes({"orchestrator.outcome": outcome, "error.type": outcome})
        s.set_status(StatusCode.ERROR, redact(error or outcome)[:300])


def chat_request_attributes(
    model_name: str, provider: str, request: ModelRequest, run_id: str, capture: bool
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
    if request.output is not None:  # a typed agent's answer is JSON (either mode)
        attrs["gen_ai.output.type"] = "json"
    if capture:
        attrs["gen_ai.system_instructions"] = content_for_span(
            [{"type": "text", "content": request.system}]
        )
        attrs["gen_ai.input.messages"] = content_for_span(genai_messages(request.messages))
    return attrs


_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_call",
    "refusal": "content_filter",
}
"""Anthropic stop reasons as the GenAI conventions' finish reasons (others pass as they are)."""


def _part(block: Block) -> dict[str, Any]:
    """One content block as a GenAI message part."""
    if isinstance(block, TextBlock):
        return {"type": "text", "content": block.text}
    if isinstance(block, ToolUseBlock):
        arguments = dict(block.input) if isinstance(block.input, Mapping) else block.input
        return {"type": "tool_call", "id": block.id, "name": block.name, "arguments": arguments}
    if isinstance(block, ToolResultBlock):
        part: dict[str, Any] = {
            "type": "tool_call_response",
            "id": block.tool_use_id,
            "response": block.content,
        }
        if block.is_error:
            part["is_error"] = True
        return part
    if isinstance(block, ThinkingBlock):
        return {"type": "reasoning", "content": block.thinking}
    if isinstance(block, ServerToolUseBlock):  # a hosted tool's call, run by the provider
        return {
            "type": "server_tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": dict(block.input),
        }
    if isinstance(block, ServerToolResultBlock):
        return {
            "type": "server_tool_call_response",
            "id": block.tool_use_id,
            "response": _server_result(block)[2],
        }
    return {"type": "redacted_reasoning"}


def genai_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Messages in the GenAI conventions' shape, ``{"role", "parts"}``: tool results, which the
    Messages API carries in user messages, are ``tool`` messages of their own, one per result
    (backends such as Arize Phoenix show one part per message: a turn's parallel results in one
    message would show as its last one)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        results = [_part(b) for b in m.content if isinstance(b, ToolResultBlock)]
        out.extend({"role": "tool", "parts": [result]} for result in results)
        others = [_part(b) for b in m.content if not isinstance(b, ToolResultBlock)]
        if others or not results:
            out.append({"role": m.role, "parts": others})
    return out


_RUN_FINISH: Final = {"completed": "stop", "refusal": "content_filter"}
"""A run's status as the conventions' finish reason of its answer (any other status: error)."""


def record_run_io(
    s: Span, prompt: str, answer: str, status: str, *, json_answer: bool = False
) -> None:
    """The run's prompt and answer on the root agent span (captured content only): as GenAI
    messages, and as the ``input.value`` / ``output.value`` that trace lists read (Arize
    Phoenix's shows each trace's input and output from its root span). ``json_answer``: the
    answer is a typed agent's JSON (``output.mime_type`` says so)."""
    finish_reason = _RUN_FINISH.get(status, "error")
    s.set_attributes(
        {
            "gen_ai.input.messages": content_for_span(
                [{"role": "user", "parts": [{"type": "text", "content": prompt}]}]
            ),
            "gen_ai.output.messages": content_for_span(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": answer}],
                        "finish_reason": finish_reason,
                    }
                ]
            ),
            "input.value": content_for_span(prompt),
            "input.mime_type": "text/plain",
            "output.value": content_for_span(answer),
            "output.mime_type": "application/json" if json_answer else "text/plain",
        }
    )


def record_chat_usage(s: Span, u: Usage) -> None:
    """A model call's billed usage on its ``chat`` span (a failed call's too, if it was
    billed: the spans' sum then matches the agents' usage).

    The cache-write count is ``gen_ai.usage.cache_creation.input_tokens`` (the conventions'
    registry name; the anthropic SDK says ``cache_write``).
    """
    if s.is_recording():
        s.set_attributes(
            {
                "gen_ai.usage.input_tokens": u.input_tokens,
                "gen_ai.usage.output_tokens": u.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": u.cache_read_tokens,
                "gen_ai.usage.cache_creation.input_tokens": u.cache_write_tokens,
                "orchestrator.cost_usd": u.cost_usd,
            }
        )
        if u.web_search_requests or u.web_fetch_requests:  # the conventions name none
            s.set_attributes(
                {
                    "orchestrator.usage.web_search_requests": u.web_search_requests,
                    "orchestrator.usage.web_fetch_requests": u.web_fetch_requests,
                }
            )


def record_chat_response(s: Span, response: ModelResponse, model_name: str, capture: bool) -> None:
    """The reply's model, finish reason and usage on its ``chat`` span.

    A reply that does not name the model that answered (scripted and function models) is
    attributed to the model that was asked, ``model_name``.
    """
    if not s.is_recording():
        return
    s.set_status(StatusCode.OK)
    s.set_attributes(
        {
            "gen_ai.response.model": response.model or model_name,
            "gen_ai.response.finish_reasons": [response.finish_reason or response.stop_reason],
        }
    )
    record_chat_usage(s, response.usage)
    if response.id:
        s.set_attribute("gen_ai.response.id", response.id)
    if capture:
        (message,) = genai_messages([Message("assistant", response.content)])
        finish = _FINISH_REASONS.get(response.stop_reason, response.stop_reason)
        s.set_attribute(
            "gen_ai.output.messages", content_for_span([{**message, "finish_reason": finish}])
        )


def tool_attributes(
    call: ToolUseBlock, run_id: str, agent_name: str, capture: bool
) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": well_formed(call.name),  # the model's: may hold a lone surrogate
        "gen_ai.tool.call.id": well_formed(call.id),
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": run_id,
        "gen_ai.agent.name": agent_name,
    }
    if capture:
        attrs["gen_ai.tool.call.arguments"] = content_for_span(call.input)
    return attrs


_TOOL_ERROR_NOT_CAPTURED = "the tool call failed (its text is recorded with content capture on)"


def record_tool_result(s: Span, result: ToolResultBlock, capture: bool) -> None:
    if not s.is_recording():
        return
    if result.is_error:  # an error text often quotes the call's input: it is content too
        record_outcome(
            s,
            result.error_type or "tool_error",  # its kind is not content: shown either way
            result.content if capture else _TOOL_ERROR_NOT_CAPTURED,
        )
    else:
        record_outcome(s, "ok", None)
    if capture:
        s.set_attribute("gen_ai.tool.call.result", content_for_span(result.content))


_SERVER_TOOL_OF_RESULT: Final = {
    "web_search_tool_result": "web_search",
    "web_fetch_tool_result": "web_fetch",
}


def _server_result(block: ServerToolResultBlock) -> tuple[int | None, str | None, list[Any]]:
    """A hosted tool's result block read for its span: (how many results, the error code,
    what was found for captured content: each search result's URL and title, a fetch's URL).
    """
    content = block.data.get("content")
    if isinstance(content, list):  # a search's results
        found = [
            {"url": r.get("url"), "title": r.get("title")} for r in content if isinstance(r, dict)
        ]
        return len(content), None, found
    if isinstance(content, Mapping):
        code = content.get("error_code")
        if code is not None or str(content.get("type", "")).endswith("_error"):
            return None, str(code or "error"), []
        return 1, None, [{"url": content.get("url")}]  # a fetched page
    return None, None, []


def record_server_tools(
    tracer: Tracer, response: ModelResponse, run_id: str, agent_name: str, capture: bool
) -> None:
    """One ``execute_tool {name}`` span per hosted tool call in ``response``, under the
    current span (the call's ``chat`` span): ``gen_ai.tool.type="server"``, the call id, its
    input (the query or URL) as ``gen_ai.tool.call.arguments`` under the content-capture
    rules, the result count (``orchestrator.tool.result_count``) or the error code
    (``error.type``, status ERROR).

    Its start and end are when the stream showed the ``server_tool_use`` block start and its
    result block arrive (``response.server_tool_times``). A response without those times (a
    model that does not stream) gives both the response's time, now. A call whose result is
    not in this response (the provider paused the turn: it continues in the next call) ends
    with the response, ``orchestrator.outcome="no_result"``; a result whose call came in an
    earlier response gets a span of its own, from the response's start to its arrival.
    """
    uses: dict[str, ServerToolUseBlock] = {}
    results: dict[str, ServerToolResultBlock] = {}
    for block in response.content:
        if isinstance(block, ServerToolUseBlock):
            uses.setdefault(block.id, block)
        elif isinstance(block, ServerToolResultBlock):
            results.setdefault(block.tool_use_id, block)
    if not uses and not results:
        return
    times: dict[str, tuple[int, int]] = {}
    for entry in response.server_tool_times:
        if (
            isinstance(entry, tuple)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and all(type(t) is int and t >= 0 for t in entry[1:])
        ):
            times[entry[0]] = (entry[1], entry[2])
    now = time.time_ns()
    named = getattr(tracer, "span_name", None)  # the direct road's, which remembers names
    for call_id in (*uses, *(r for r in results if r not in uses)):
        use, result = uses.get(call_id), results.get(call_id)
        name = (
            use.name
            if use is not None
            else _SERVER_TOOL_OF_RESULT.get(results[call_id].type, results[call_id].type)
        )
        start, end = times.get(call_id, (now, now))
        start = start or now
        if not end or end < start:
            end = now if now > start else start
        full = f"execute_tool {well_formed(name)}"
        raw = tracer.start_span(
            named(full) if named else redact(full),
            kind=SpanKind.INTERNAL,
            start_time=start,
            record_exception=False,
            set_status_on_exception=False,
        )
        if raw.is_recording():
            try:
                _describe_server_tool(raw, name, call_id, use, result, run_id, agent_name, capture)
            except Exception as exc:  # describing the span must never break the run
                raw.set_attribute("orchestrator.attribute_error", type(exc).__name__)
        raw.end(end)


def _describe_server_tool(
    raw: Span,
    name: str,
    call_id: str,
    use: ServerToolUseBlock | None,
    result: ServerToolResultBlock | None,
    run_id: str,
    agent_name: str,
    capture: bool,
) -> None:
    """A hosted tool call's attributes and outcome on its span (:func:`record_server_tools`)."""
    s = raw if getattr(raw, "redacts", False) else _RedactedSpan(raw)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": well_formed(name),
        "gen_ai.tool.call.id": well_formed(call_id),
        "gen_ai.tool.type": "server",
        "gen_ai.conversation.id": run_id,
        "gen_ai.agent.name": agent_name,
    }
    if capture and use is not None:
        attrs["gen_ai.tool.call.arguments"] = content_for_span(use.input)
    s.set_attributes(attrs)
    if result is None:
        s.set_attribute("orchestrator.outcome", "no_result")
    else:
        count, error, found = _server_result(result)
        if error is not None:
            record_outcome(s, error, f"{name} failed at the provider: {error}")
        else:
            record_outcome(s, "ok", None)
            if count is not None:
                s.set_attribute("orchestrator.tool.result_count", count)
            if capture:
                s.set_attribute("gen_ai.tool.call.result", content_for_span(found))
