"""Trees for the Dask tests: module-level definitions, tools and model functions, so that
workers can unpickle them (by reference where they can import this module, else by value)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import trio
from pydantic import BaseModel, field_validator

from orchestrator import Agent, OutputContext, OutputRejected, tool
from orchestrator.models import FunctionModel, ScriptedModel, final, text, tool_call


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key.upper()} in {'a worker' if multiprocessing.parent_process() else 'the main'}"


@tool
async def wait(seconds: float) -> str:
    """Wait some seconds."""
    await trio.sleep(seconds)
    return "waited"


@tool
def die(log: str, after: str) -> str:
    """Note the call in a file, wait for the file ``after`` (the test writes it once the
    siblings have finished), then kill this process (a worker lost mid-child)."""
    with Path(log).open("a") as f:
        f.write(f"{os.getpid()}\n")
    import time

    give_up_at = time.monotonic() + 60  # a bound: the test fails on its own if it never comes
    while not Path(after).exists() and time.monotonic() < give_up_at:
        time.sleep(0.02)
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


WORKER = Agent("worker", "You work.", description="does one piece", tools=[lookup, wait, die])
LEAD = Agent("lead", "You lead.", subagents=[WORKER], tools=[lookup, wait, die])


def spawns(*tasks: str) -> list[object]:
    return [tool_call("spawn_subagent", {"agent": "worker", "task": t}) for t in tasks]


def scripted(n: int = 3) -> ScriptedModel:
    return ScriptedModel(
        {
            "lead": [spawns(*(f"task {i}" for i in range(n))), text("all done")],
            "worker": [tool_call("lookup", {"key": "k"}), text("worked")],
        }
    )


def answer(request: object) -> object:
    """A FunctionModel's function: the lead spawns two workers, each looks its task up and
    answers with what the tool said; the lead answers with its children's answers."""
    agent = request.agent  # type: ignore[attr-defined]
    messages = request.messages  # type: ignore[attr-defined]
    last = messages[-1]
    if agent.name == "lead":
        if len(messages) == 1:
            return spawns("alpha", "beta")
        return text(" | ".join(b.content for b in last.content if b.type == "tool_result"))
    if len(messages) == 1:
        return tool_call("lookup", {"key": messages[0].content[0].text})
    return text(f"{agent.path}: {last.content[0].content}")


FUNCTION_MODEL = FunctionModel(answer)


def waiting(seconds: float) -> ScriptedModel:
    """Workers that call ``wait(seconds)``."""
    return ScriptedModel(
        {
            "lead": [spawns("slow one", "slow two"), text("done")],
            "worker": [tool_call("wait", {"seconds": seconds}), text("waited")],
        }
    )


def lookups(calls: int) -> ScriptedModel:
    """Workers that look up ``calls`` times before answering (to spend a budget)."""
    steps: list[object] = [tool_call("lookup", {"key": f"k{i}"}) for i in range(calls)]
    return ScriptedModel(
        {
            "lead": [spawns("a", "b", "c", "d"), text("done")],
            "worker": [*steps, text("looked")],
        }
    )


@tool
def note(log: str) -> str:
    """Append a line to a file (a side effect that must not happen twice)."""
    with Path(log).open("a") as f:
        f.write("ran\n")
    return "noted"


NOTING = Agent("worker", "You work.", description="does one piece", tools=[note])
NOTING_LEAD = Agent("lead", "You lead.", subagents=[NOTING], tools=[note])


def flaky_lead(log: str, flag: str) -> FunctionModel:
    """The lead spawns one worker that notes once; its second call fails until ``flag``
    exists (the run stops after its child finished, as a crash would)."""

    def answer(request: object) -> object:
        agent = request.agent  # type: ignore[attr-defined]
        messages = request.messages  # type: ignore[attr-defined]
        if agent.name == "lead":
            if len(messages) == 1:
                return spawns("note it")
            if not Path(flag).exists():
                raise RuntimeError("the lead's provider is down")
            return text("resumed and done")
        if len(messages) == 1:
            return tool_call("note", {"log": log})
        return text("noted once")

    return FunctionModel(answer)


ASKED: list[tuple[str, str, bool]] = []
"""What :func:`approve` was asked: (tool, agent path, asked in the main process)."""


def approve(call: object) -> bool:
    """An approver that notes each call, and declines a lookup of the key "no"."""
    name, path = call.name, call.agent_path  # type: ignore[attr-defined]
    ASKED.append((name, path, multiprocessing.parent_process() is None))
    return call.input.get("key") != "no"  # type: ignore[attr-defined, no-any-return]


def runs_cached() -> int:
    """On a worker: how many runs' parts its process holds (each remote child's task loads its
    run's once)."""
    from orchestrator.dask import _worker

    return len(_worker._RUNS)


VALIDATED_IN_MAIN: list[str] = []
"""The keys of the :class:`Finding` values validated in the main process (not on a worker)."""


class Finding(BaseModel):
    """A typed worker's answer: the key it looked up and what the lookup said. Validating one
    in the main process notes its key; a value "refused in the main" validates only on a worker
    (to show the parent's own check)."""

    key: str
    value: str

    @field_validator("value")
    @classmethod
    def _noted(cls, value: str) -> str:
        if multiprocessing.parent_process() is None:
            if value == "refused in the main":
                raise ValueError("this value is refused in the main process")
            VALIDATED_IN_MAIN.append(value)
        return value


TYPED_WORKER = Agent(
    "worker", "You work.", description="looks one key up", tools=[lookup], output_type=Finding
)
TYPED_LEAD = Agent("lead", "You lead.", subagents=[TYPED_WORKER])


def typed_answer(request: object) -> object:
    """A FunctionModel's function: the lead spawns workers for "alpha" and "beta" (or the task
    it was given, comma separated), each looks its key up and answers a :class:`Finding`
    (the key "refused" answers the value "refused in the main"); the lead answers with the
    spawns' results as its model read them."""
    agent = request.agent  # type: ignore[attr-defined]
    messages = request.messages  # type: ignore[attr-defined]
    last = messages[-1]
    if agent.name == "lead":
        if len(messages) == 1:
            return spawns(*messages[0].content[0].text.split(","))
        return text(" | ".join(b.content for b in last.content if b.type == "tool_result"))
    key = messages[0].content[0].text
    if len(messages) == 1:
        return tool_call("lookup", {"key": key})
    said = "refused in the main" if key == "refused" else last.content[0].content
    return final(Finding(key=key, value=said))


TYPED_MODEL = FunctionModel(typed_answer)


def deep_answer(request: object) -> object:
    """:func:`typed_answer`, with a typed "middle" agent between the lead and the workers: it
    spawns a worker for its task and answers a :class:`Finding` of what the worker found."""
    agent = request.agent  # type: ignore[attr-defined]
    messages = request.messages  # type: ignore[attr-defined]
    if agent.name == "lead" and len(messages) == 1:
        task = messages[0].content[0].text
        return tool_call("spawn_subagent", {"agent": "middle", "task": task})
    if agent.name != "middle":
        return typed_answer(request)
    if len(messages) == 1:
        return spawns(messages[0].content[0].text)
    found = Finding.model_validate_json(messages[-1].content[0].content)
    return final(Finding(key=f"middle of {found.key}", value=found.value))


TYPED_MIDDLE = Agent(
    "middle",
    "You delegate.",
    description="asks a worker",
    subagents=[TYPED_WORKER],
    output_type=Finding,
)
DEEP_LEAD = Agent("lead", "You lead.", subagents=[TYPED_MIDDLE])
DEEP_MODEL = FunctionModel(deep_answer)


def said_where(ctx: OutputContext, answer: str) -> str:
    """A text worker's validator: an answer without "found" is rejected (asked again); one
    with it is returned saying which process checked it."""
    if "found" not in answer:
        raise OutputRejected("say what you found")
    return f"{answer} (checked in {'a worker' if multiprocessing.parent_process() else 'the main'})"


def text_answer(request: object) -> object:
    """A FunctionModel's function: the lead spawns a worker per comma-separated key of its task
    and joins their results; each worker answers its key, then (asked again) "found <key>"; the
    key "never" answers without "found" each time."""
    agent = request.agent  # type: ignore[attr-defined]
    messages = request.messages  # type: ignore[attr-defined]
    if agent.name == "lead":
        if len(messages) == 1:
            return spawns(*messages[0].content[0].text.split(","))
        return text(" | ".join(b.content for b in messages[-1].content if b.type == "tool_result"))
    key = messages[0].content[0].text
    return text(key if len(messages) == 1 or key == "never" else f"found {key}")


TEXT_WORKER = Agent(
    "worker", "You work.", description="finds one key", output_validators=[said_where]
)
TEXT_LEAD = Agent("lead", "You lead.", subagents=[TEXT_WORKER])
TEXT_MODEL = FunctionModel(text_answer)
