"""A tool behind a `confirm` policy, with an approver that asks on the terminal.

`delete_draft` is gated by `Policy(rules={"delete_draft": "confirm"}, approver=ask)`: before the
call runs, `ask` shows it and reads y/n from stdin. A declined call never reaches the tool; the
model gets an `is_error` result saying so and answers accordingly.

The approver is async: it is called on the trio loop thread, so it reads stdin in a worker thread
(`trio.to_thread.run_sync`) instead of blocking the whole run with a bare `input()`. The question
goes to stderr so that stdout holds only the answer. End of input (a closed pipe) means "no".

Run it with `python examples/approval.py` or
`orchestrator run examples/approval.py "Delete draft-1"`; or answer from a pipe:
`echo y | python examples/approval.py`.
"""

import sys

import trio

from orchestrator import Agent, PendingCall, Policy, ToolResultBlock, run_sync, tool
from orchestrator.models import FunctionModel, ModelRequest, text, tool_call
from orchestrator.models.scripted import Step

DRAFTS = {"draft-1": "An early outline.", "draft-2": "Notes for the next release."}


@tool
def delete_draft(name: str) -> str:
    """Delete a saved draft for good.

    Args:
        name: The draft to delete.
    """
    if name not in DRAFTS:
        raise KeyError(f"no draft named {name!r}")
    del DRAFTS[name]
    print(f"[delete_draft] deleted {name}", file=sys.stderr)
    return f"deleted {name}; drafts left: {', '.join(DRAFTS) or 'none'}"


async def ask(call: PendingCall) -> bool:
    """Ask on the terminal whether ``call`` may run; True only for an answer starting with y."""
    sys.stderr.write(
        f"{call.agent_path} wants to run {call.name}({dict(call.input)}). Allow? [y/N] "
    )
    sys.stderr.flush()
    # never block the trio loop thread on stdin; abandon the read if the run is cancelled
    line: str = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    if not sys.stdin.isatty():  # answered from a pipe: show the answer as if typed
        sys.stderr.write((line.strip() or "(no answer)") + "\n")
    return line.strip().lower().startswith("y")


def decide(request: ModelRequest) -> Step:
    """The 'model': ask to delete draft-1, then report what happened."""
    if not any(m.role == "assistant" for m in request.messages):
        return tool_call("delete_draft", {"name": "draft-1"})
    result = next(b for b in request.messages[-1].content if isinstance(b, ToolResultBlock))
    if result.is_error:
        return text(f"I did not delete draft-1: {result.content}")
    return text(f"Done: {result.content}.")


agent = Agent(
    "librarian",
    "You manage the user's drafts. Deleting one needs the user's approval.",
    model=FunctionModel(decide),
    tools=[delete_draft],
    policy=Policy(rules={"delete_draft": "confirm"}, approver=ask),
)

if __name__ == "__main__":
    result = run_sync(agent, "Delete draft-1, please.")
    print(result.output)
