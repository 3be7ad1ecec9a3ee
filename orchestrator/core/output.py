"""Typed results: what an agent with ``output_type`` must answer, and the check of its answer.

An agent whose ``output_type`` is not ``str`` ends only with a value of that type. In tool mode
(the default) the model gets one more tool, ``final_result``, whose input schema is the type's
JSON schema (a type whose schema is not an object is wrapped as ``{"result": ...}``: a tool's
input is always an object); in native mode the provider is asked for JSON of that schema and
the final text must be it. Either way the answer is validated by pydantic, then by the agent's
output validators; each problem goes back to the model (field path and message) until
``Limits.output_retries`` is used up, and the agent then ends ``invalid_output``.

``final_result`` is not one of the agent's tools: no policy gates it, no spawn narrows it, the
journal records no side effect of it (a resumed run replays the reply and checks it again).
The loop (:mod:`.loop`) asks this module at two points: when a reply calls ``final_result``
(:func:`settle_calls`) and when a reply is text (:func:`settle_text`).
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import pydantic
from pydantic import TypeAdapter

from ..models.base import OutputFormat, ToolSpec
from .errors import ConfigurationError, OutputRejected
from .ledger import fixed_units
from .messages import Message, ToolResultBlock, ToolUseBlock
from .records import record
from .result import RunStatus
from .tools import error_result

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ..models.base import Model
    from .agent import AgentTree
    from .state import AgentNode, RunState

__all__ = ["FINAL_RESULT", "OutputContext", "OutputSpec", "OutputValidator", "output_spec"]

FINAL_RESULT: Final = "final_result"
"""The tool a typed agent in tool mode ends with."""

OutputMode = Literal["tool", "native"]

ACCEPTED: Final = "Final result accepted."
NOT_RUN: Final = "not run: the agent gave its final result"
_SHOWN_PROBLEMS: Final = 10
_KEPT_OUTPUT_CHARS: Final = 1_000


@record
class OutputContext:
    """What an output validator is told: whose output it is, the run's ``deps``, and the
    agent's own tool calls with their results so far (in transcript order), so that a
    validator can check the output against what the agent actually saw. ``messages`` is the
    agent's whole transcript so far, the reply being judged included: what a hosted tool
    returned (a web search's results, a fetched page) is there, in the assistant's own
    messages, not in ``tool_results``."""

    agent_name: str
    agent_path: str
    run_id: str
    deps: Any
    tool_results: tuple[tuple[ToolUseBlock, ToolResultBlock], ...]
    messages: tuple[Message, ...] = ()


OutputValidator = Callable[[OutputContext, Any], Any]
"""``fn(ctx, value) -> value``, sync or async: returns the (possibly changed) value, or raises
:class:`~orchestrator.OutputRejected` to ask the model again."""


def _check_validators(agent: str, validators: Sequence[OutputValidator]) -> None:
    for fn in validators:
        if not callable(fn):
            raise ConfigurationError(
                f"agent {agent!r}: output_validators must be functions, got {fn!r}"
            )


class OutputSpec:
    """An output type compiled once per agent definition: its validator, its JSON schema (as
    the model sees it), its name and fields (for a parent's spawn tool) and the checks."""

    __slots__ = (
        "adapter",
        "fields",
        "format",
        "mode",
        "name",
        "output_type",
        "schema",
        "schema_units",
        "tool_spec",
        "validators",
        "wrapped",
    )

    def __init__(
        self,
        agent: str,
        output_type: Any,
        mode: OutputMode,
        validators: Sequence[OutputValidator],
    ) -> None:
        if mode not in ("tool", "native"):
            raise ConfigurationError(
                f"agent {agent!r}: output_mode must be 'tool' or 'native', got {mode!r}"
            )
        _check_validators(agent, validators)
        name = type_name(output_type)
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(output_type)
            inner = adapter.json_schema()
        except (
            pydantic.PydanticUserError,
            pydantic.PydanticSchemaGenerationError,
            TypeError,
        ) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigurationError(
                f"agent {agent!r}: output_type {name} has no JSON schema pydantic can build "
                f"({first})"
            ) from None
        self.output_type = output_type
        self.adapter = adapter
        self.mode: OutputMode = mode
        self.validators = tuple(validators)
        self.name = name
        inner = _root_inlined(inner)
        self.wrapped = inner.get("type") != "object"
        if self.wrapped:  # a tool's input is an object: the value goes under "result"
            defs = inner.pop("$defs", None)
            schema: dict[str, Any] = {
                "type": "object",
                "properties": {"result": inner},
                "required": ["result"],
            }
            if defs:
                schema["$defs"] = defs  # "#/$defs/..." references resolve from the root
            self.fields: tuple[str, ...] = ("result",)
        else:
            schema = inner
            self.fields = tuple(inner.get("properties", {}))
        self.schema = schema
        self.schema_units = fixed_units(repr(schema))
        """What the schema adds to each request's fixed part (counted once, not per agent)."""
        self.format = OutputFormat(name, schema, native=mode == "native", wrapped=self.wrapped)
        """What each model request of the agent says of its answer."""
        self.tool_spec = ToolSpec(
            FINAL_RESULT,
            f"Give your final answer as {name} and end. Call it once, when you are done; "
            "nothing else you call in the same turn will run.",
            schema,
        )

    def describe(self) -> str:
        """The type's name and fields, for a parent's ``spawn_subagent`` description."""
        if self.wrapped or not self.fields:  # a value, or a map with free keys
            return f"{self.name} (as JSON)"
        return f"{self.name} {{{', '.join(self.fields)}}} (as JSON)"

    def check(self, raw: Any) -> tuple[Any, list[str]]:
        """``raw`` (a ``final_result`` input, or the JSON text of a native answer) as a value
        of the type, or the problems found (each a field path and a message)."""
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError as exc:
                return None, [f"the answer is not JSON ({exc}); answer with the JSON only"]
        if not isinstance(raw, dict):
            return None, [f"expected a JSON object, got {type(raw).__name__}"]
        if self.wrapped:
            if "result" not in raw:
                return None, ["result: Field required"]
            raw = raw["result"]
        try:
            return self.adapter.validate_python(raw), []
        except pydantic.ValidationError as exc:
            return None, _problems(exc, self.wrapped)

    def to_json(self, value: Any) -> str:
        """The value's JSON: compact, keys in field order."""
        return self.adapter.dump_json(value).decode()


def type_name(tp: Any) -> str:
    """A type as its reader writes it (for the parent's spawn tool and the dry run):
    ``Findings``, ``list[Claim]``, ``Claim | None``, ``Literal['yes', 'no']``; a generic's
    ``__name__`` alone would say ``list``, a union's ``repr`` its modules."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is None or tp is type(None):
        return "None"
    if tp is Ellipsis:  # tuple[int, ...]
        return "..."
    if origin is None or not args:
        return getattr(tp, "__name__", None) or repr(tp)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    return f"{getattr(origin, '__name__', None) or repr(origin)}[{', '.join(map(type_name, args))}]"


def output_spec(
    agent: str, output_type: Any, mode: OutputMode, validators: Sequence[OutputValidator]
) -> OutputSpec | None:
    """The compiled output of an agent definition (``None`` for a plain ``str`` agent, whose
    validators, if any, the loop runs on its final text: :func:`settle_text`)."""
    if output_type is str:
        if mode != "tool":
            raise ConfigurationError(f"agent {agent!r}: output_mode needs an output_type")
        _check_validators(agent, validators)
        return None
    return OutputSpec(agent, output_type, mode, validators)


def check_native_models(
    tree: AgentTree,
    models: dict[str, Model],
    default: Model | None,
    menus: Mapping[str, tuple[Model, ...]] | None = None,
) -> None:
    """Refuse, before the run starts, a native-mode agent whose model (its own, else the one
    it inherits along any path from the root; each of its menu's) does not declare
    ``supports_native_output``."""
    pending: list[tuple[Any, Model | None]] = [(tree.root, default)]
    seen: set[tuple[str, int]] = set()
    while pending:
        agent, inherited = pending.pop()
        model = models.get(agent.name, inherited)
        if (agent.name, id(model)) in seen:
            continue
        seen.add((agent.name, id(model)))
        spec = agent.output_spec
        unable = [
            m
            for m in (menus or {}).get(agent.name, (model,))
            if m is not None and not getattr(m, "supports_native_output", False)
        ]
        if spec is not None and spec.mode == "native" and unable:
            model = unable[0]
            raise ConfigurationError(
                f"agent {agent.name!r} has output_mode='native', but its model {model.name!r} "
                f"({type(model).__name__}) does not declare supports_native_output; use "
                "output_mode='tool' or a model that can answer in a JSON schema"
            )
        pending.extend((child, model) for child in tree.subagents_of(agent))


def _root_inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A recursive model's schema is a bare ``$ref`` to its own definition: the definition in
    its place (references to it still resolve through ``$defs``), so that it is the object it
    describes, given as the tool's input as it is, not wrapped."""
    ref, defs = schema.get("$ref"), schema.get("$defs")
    if len(schema) != 2 or not isinstance(ref, str) or not isinstance(defs, dict):
        return schema
    target = defs.get(ref.removeprefix("#/$defs/")) if ref.startswith("#/$defs/") else None
    if not isinstance(target, dict) or target.get("type") != "object":
        return schema
    return {**target, "$defs": defs}


def _problems(exc: pydantic.ValidationError, wrapped: bool) -> list[str]:
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = (("result",) if wrapped else ()) + tuple(err["loc"])
        path = ".".join(str(part) for part in loc) or "(the value)"
        out.append(f"{path}: {err['msg']}")
    return out


def _problem_text(problems: list[str]) -> str:
    shown = problems[:_SHOWN_PROBLEMS]
    more = len(problems) - len(shown)
    text = "The output was rejected:\n" + "\n".join(f"- {p}" for p in shown)
    if more:
        text += f"\n- ... and {more} more"
    return text


@dataclass(slots=True)
class Verdict:
    """What :func:`settle_calls` decided for a turn that calls ``final_result``."""

    given: dict[int, ToolResultBlock]
    """Results that stand for some calls of the turn (by position): those calls do not run."""
    done: bool
    """The agent ended (its output accepted, or rejected once too often)."""


async def _judge(
    node: AgentNode, run: RunState, spec: OutputSpec, raw: Any
) -> tuple[Any, list[str]]:
    """The value, or the problems: pydantic's check, then each validator in order. A
    validator's bug (any exception but ``OutputRejected``) propagates as :class:`_ValidatorBug`."""
    value, problems = spec.check(raw)
    if problems or not spec.validators:
        return value, problems
    return await _validated(node, run, spec.validators, value)


async def _validated(
    node: AgentNode, run: RunState, validators: Sequence[OutputValidator], value: Any
) -> tuple[Any, list[str]]:
    """Each validator in order on ``value``: the value it leaves, or the rejection's words."""
    ctx = OutputContext(
        node.agent.name,
        node.path,
        run.run_id,
        run.deps,
        tuple(_tool_results(node.messages)),
        tuple(node.messages),
    )
    text = isinstance(value, str)
    for fn in validators:
        try:
            changed = fn(ctx, value)
            if inspect.isawaitable(changed):
                changed = await changed
            if text and not isinstance(changed, str):  # a text answer stays text
                raise TypeError(f"it returned {type(changed).__name__}, not the answer's str")
        except OutputRejected as exc:
            return None, [str(exc) or "rejected by an output validator"]
        except Exception as exc:
            raise _ValidatorBug(fn, exc) from exc
        value = changed
    return value, []


class _ValidatorBug(Exception):
    def __init__(self, fn: Callable[..., Any], exc: Exception) -> None:
        name = getattr(fn, "__qualname__", None) or repr(fn)
        super().__init__(f"output validator {name} raised {type(exc).__name__}: {exc}")


def _tool_results(messages: Sequence[Message]) -> list[tuple[ToolUseBlock, ToolResultBlock]]:
    calls: dict[str, ToolUseBlock] = {}
    out = []
    for m in messages:
        for b in m.content:
            if isinstance(b, ToolUseBlock):
                if b.name != FINAL_RESULT:  # earlier answers are not what the agent found
                    calls[b.id] = b
            elif isinstance(b, ToolResultBlock) and b.tool_use_id in calls:
                out.append((calls.pop(b.tool_use_id), b))
    return out


async def settle_calls(
    node: AgentNode, run: RunState, spec: OutputSpec, calls: Sequence[ToolUseBlock], span: Span
) -> Verdict:
    """A turn whose reply calls ``final_result``: the first valid one ends the agent (every
    other call of the turn is answered "not run"); a rejected one is answered with its
    problems, and the turn's other calls run as usual."""
    given: dict[int, ToolResultBlock] = {}
    for i, call in enumerate(calls):
        if call.name != FINAL_RESULT:
            continue
        try:
            value, problems = await _judge(node, run, spec, dict(call.input))
        except _ValidatorBug as bug:
            _answer_all(node, calls, given)
            node.finish(RunStatus.ERROR, str(bug))
            return Verdict(given, True)
        if not problems:
            given[i] = ToolResultBlock(call.id, ACCEPTED)
            _answer_all(node, calls, given)
            _accept(node, spec, value)
            return Verdict(given, True)
        text = _problem_text(problems)
        given[i] = error_result(call.id, text, kind="invalid_output")
        if _rejected(node, run, span, text):
            _answer_all(node, calls, given)
            _give_up(node, json.dumps(call.input, ensure_ascii=False))
            return Verdict(given, True)
    return Verdict(given, False)


async def settle_text(
    node: AgentNode, run: RunState, spec: OutputSpec | None, text: str, span: Span
) -> bool:
    """A reply of text, which ends a plain agent: without a ``spec`` (a text agent with
    output validators) the text is the answer the validators judge; in native mode the text
    is the JSON to check; in tool mode it is not an answer (the model is told to call
    ``final_result``). True when the agent ended."""
    if spec is not None and spec.mode == "tool":
        problems = [f"a text reply is not an answer here: call {FINAL_RESULT} with your answer"]
        value = None
    else:
        try:
            if spec is None:
                value, problems = await _validated(node, run, node.agent.output_validators, text)
            else:
                value, problems = await _judge(node, run, spec, text)
        except _ValidatorBug as bug:
            node.finish(RunStatus.ERROR, str(bug))
            return True
    if not problems:
        _accept(node, spec, value)
        return True
    message = _problem_text(problems)
    if _rejected(node, run, span, message):
        _give_up(node, text)
        return True
    node.append(
        Message.user(
            message if spec is not None and spec.mode == "tool" else f"{message}\nAnswer again."
        )
    )
    return False


def _accept(node: AgentNode, spec: OutputSpec | None, value: Any) -> None:
    node.finish(RunStatus.COMPLETED, output=value)
    if spec is not None:
        node.output_json = spec.to_json(value)


def _rejected(node: AgentNode, run: RunState, span: Span, problems: str) -> bool:
    """Count a rejection (an event on the turn's span); True past ``output_retries``."""
    node.output_rejections += 1
    if run.tracer is not None and span.is_recording():
        attributes: dict[str, Any] = {"orchestrator.output.rejections": node.output_rejections}
        if run.capture:
            attributes["orchestrator.output.problems"] = problems
        span.add_event("orchestrator.output.rejected", attributes)
    allowed = node.limits.output_retries
    return node.output_rejections > (2 if allowed is None else allowed)


def _give_up(node: AgentNode, output: str) -> None:
    """End the agent ``invalid_output``, its last output kept in the reason (cut)."""
    kept = output if len(output) <= _KEPT_OUTPUT_CHARS else output[:_KEPT_OUTPUT_CHARS] + "…"
    why = f"the output was rejected {node.output_rejections} times"
    node.finish(RunStatus.INVALID_OUTPUT, f"{why}; last output: {kept}", error_without_content=why)


def _answer_all(
    node: AgentNode, calls: Sequence[ToolUseBlock], given: dict[int, ToolResultBlock]
) -> None:
    """The turn's results when the agent ends on it: the given ones, "not run" for the rest."""
    for j, other in enumerate(calls):
        if j not in given:
            given[j] = error_result(other.id, NOT_RUN, kind="not_run")
    node.append(Message("user", tuple(given[j] for j in range(len(calls)))))
