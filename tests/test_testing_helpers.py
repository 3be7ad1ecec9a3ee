"""orchestrator.testing as a user's test suite uses it, and the README's Python snippets as
written.

The first test is the README's example test ("Test your own trees"), word for word but for the
tree, which a user would import from their application. The ``orchestrator_spans`` fixture
comes from ``pytest_plugins = ["orchestrator.testing"]`` in ``tests/conftest.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from orchestrator import Agent, run, tool
from orchestrator.testing import (
    ScriptedModel,
    SpanRecorder,
    recording_spans,
    replace_models,
    text,
    tool_call,
)

README = Path(__file__).parents[1] / "README.md"


@tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


calculator = Agent("calculator", "Use add.", tools=[add], description="Does arithmetic.")
lead = Agent("lead", "Delegate.", subagents=[calculator], model="anthropic:claude-sonnet-5-5")


async def test_the_lead_delegates_arithmetic(orchestrator_spans: SpanRecorder) -> None:
    model = ScriptedModel(
        {
            "lead": [
                tool_call("spawn_subagent", {"agent": "calculator", "task": "5 + 10"}),
                text("15"),
            ],
            "calculator": [tool_call("add", {"a": 5, "b": 10}), text("15")],
        }
    )
    result = await run(
        replace_models(lead, model),  # every agent, the ones naming a model included
        "What is 5 + 10?",
        tracer_provider=orchestrator_spans.tracer_provider,
    )
    assert result.status == "completed" and result.output == "15"
    assert result.children[0].agent_name == "calculator"
    assert [s.name for s in orchestrator_spans.named("invoke_agent")] == [
        "invoke_agent calculator",
        "invoke_agent lead",
    ]


async def test_run_model_is_only_a_default_for_agents_naming_none() -> None:
    with recording_spans() as spans:
        result = await run(
            lead,
            "What is 5 + 10?",
            model=ScriptedModel([text("15")]),
            tracer_provider=spans.tracer_provider,
        )
        # the lead names its own (Anthropic) model: with no key it fails, not the script
        assert result.status == "error"
        assert spans.attributes("invoke_agent lead")["gen_ai.provider.name"] == "anthropic"
    assert replace_models(lead, "offline").model == "offline"
    assert lead.model == "anthropic:claude-sonnet-5-5"  # the definition is unchanged


def python_blocks(section: str) -> list[str]:
    text = README.read_text()
    start = text.index(section)
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start : end if end > 0 else None], re.S)


def test_the_readmes_first_python_snippet_runs_as_written(tmp_path: Path) -> None:
    [first, *_] = python_blocks("## Use it from Python")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # a fresh machine: no key, no OTEL
    proc = subprocess.run(
        [sys.executable, "-c", first],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "completed 5 + 10 = 15"


def test_the_readmes_typed_results_snippet_runs_as_written(tmp_path: Path) -> None:
    [snippet, *_] = python_blocks("### Typed results")
    proc = subprocess.run(
        [sys.executable, "-c", snippet],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    expected = re.search(r"^# (completed .*)$", snippet, re.M)
    assert expected is not None
    assert proc.stdout.splitlines() == [expected.group(1)]


def test_the_readmes_asyncio_program_runs_as_written(tmp_path: Path) -> None:
    [program, *_] = python_blocks("### From asyncio")
    proc = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "completed 15" and lines[-1] == "completed"
    assert lines[1] == "AgentStarted" and "AgentFinished" in lines


def test_the_readmes_example_test_passes_as_written_in_a_suite_of_its_own(tmp_path: Path) -> None:
    [example, *_] = python_blocks("### Test your own trees")
    (tmp_path / "test_readme.py").write_text(example)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["orchestrator.testing"]\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
