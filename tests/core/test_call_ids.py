"""Tool-call ids are not trusted to be unique (issue 39, part 3): where a reply enters the
transcript, a call whose id an earlier call of the same reply has gets ``id~2`` (``~3``...),
worked out from the reply alone, so a reply replayed from a journal gets the same ids. The
OpenAI adapter's side, over real HTTP, is in tests/models/test_openai.py."""

from __future__ import annotations

from orchestrator import Agent, RunStatus, resume, run, tool
from orchestrator.core.messages import ToolResultBlock, ToolUseBlock, transcript_problem
from orchestrator.core.tools import unique_call_ids
from orchestrator.models import FunctionModel, ScriptedModel, response, text, tool_call

PAID: list[str] = []


@tool
def pay(who: str) -> str:
    """Pay someone (not idempotent: must never be paid twice)."""
    PAID.append(who)
    return f"paid {who}"


def answer(request):
    turn = sum(1 for m in request.messages if m.role == "assistant") + 1
    if turn == 1:  # two calls under one id, as a provider's bug might send them
        return response(
            tool_call("pay", {"who": "alice"}, id="c1"), tool_call("pay", {"who": "bob"}, id="c1")
        )
    results = [b.content for b in request.messages[-1].content]
    return text(" and ".join(results))


PAYER = Agent("payer", "Pay alice and bob.", tools=[pay])


def results_of(result) -> list[tuple[str, str]]:
    return [
        (b.tool_use_id, b.content)
        for m in result.messages
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]


def call_ids(result) -> list[str]:
    return [b.id for m in result.messages for b in m.content if isinstance(b, ToolUseBlock)]


async def test_calls_sharing_an_id_in_one_reply_each_run_once_with_an_id_of_their_own():
    PAID.clear()
    result = await run(PAYER, "go", model=FunctionModel(answer))
    assert result.status is RunStatus.COMPLETED
    assert sorted(PAID) == ["alice", "bob"]
    assert call_ids(result) == ["c1", "c1~2"]
    assert results_of(result) == [("c1", "paid alice"), ("c1~2", "paid bob")]
    assert transcript_problem(result.messages) is None
    assert result.output == "paid alice and paid bob"


async def test_a_resumed_run_replays_each_of_the_calls_once(tmp_path):
    PAID.clear()
    path = tmp_path / "run.db"
    first = await run(PAYER, "go", model=FunctionModel(answer), journal=path)
    assert sorted(PAID) == ["alice", "bob"]
    again = await resume(path, agent=PAYER, model=FunctionModel(answer))
    assert sorted(PAID) == ["alice", "bob"]  # nothing paid again
    assert again.status is RunStatus.COMPLETED and again.output == first.output
    assert results_of(again) == [("c1", "paid alice"), ("c1~2", "paid bob")]


async def test_ids_that_are_already_unique_are_kept_as_the_model_gave_them():
    PAID.clear()
    model = ScriptedModel(
        [
            [tool_call("pay", {"who": "alice"}, id="x"), tool_call("pay", {"who": "bob"}, id="y")],
            [tool_call("pay", {"who": "carol"}, id="x")],  # a later turn may reuse an id
            text("done"),
        ]
    )
    result = await run(PAYER, "go", model=model)
    assert call_ids(result) == ["x", "y", "x"]
    assert sorted(PAID) == ["alice", "bob", "carol"]


def test_a_suffix_never_takes_an_id_another_call_of_the_reply_has():
    blocks = tuple(ToolUseBlock(id=i, name="pay", input={}) for i in ("a", "a", "a~2", "a", "", ""))
    renamed = [b.id for b in unique_call_ids(blocks)]
    assert renamed == ["a", "a~3", "a~2", "a~4", "", "~2"]
    assert unique_call_ids(tuple(unique_call_ids(blocks))) == unique_call_ids(blocks)
