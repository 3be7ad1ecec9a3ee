"""The smallest agent loop: "What is 5 + 10?" with an `add` tool, on a scripted model.

The model is scripted (no API key needed): turn 0 asks for `add(5, 10)`, turn 1 answers.
Run it with `python examples/calculator.py` or `orchestrator run examples/calculator.py "What is 5 + 10?"`.
"""

from orchestrator import Agent, run_sync, tool
from orchestrator.models import ScriptedModel, text, tool_call


@tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


model = ScriptedModel([tool_call("add", {"a": 5, "b": 10}), text("5 + 10 = 15")])
agent = Agent(
    "calculator", "You answer arithmetic questions using the add tool.", model=model, tools=[add]
)

if __name__ == "__main__":
    result = run_sync(agent, "What is 5 + 10?")
    print(result.output)
    for message in result.messages:
        print(f"  {message.role}: {[block.type for block in message.content]}")
