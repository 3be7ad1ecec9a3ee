"""``--model`` / ``--override-model`` names through the real command (in this process:
:mod:`support.cli`), and ``--json``'s ``agent_name``.

A bare name no provider claims (``gpt-4o``) is refused with exit code 2 and a list of what is
known, instead of becoming an Anthropic model that retries for seconds; ``claude-...`` names
keep meaning Anthropic models; ``provider:model`` strings go to their provider.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import Cli, CliRun

TREE = (
    "from orchestrator import Agent\n"
    "from orchestrator.models import ScriptedModel, text\n"
    "child = Agent('helper', 'Help.', description='Helps.', model=ScriptedModel([text('hi')]))\n"
    "agent = Agent('solo', 'Answer.', subagents=[child])\n"
)


def env() -> dict[str, str]:
    """No provider's key or endpoint, no OTLP exporter setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_"))}
    return {k: v for k, v in env.items() if not k.startswith("OPENAI_")}


@pytest.fixture
def command(cli: Cli, tmp_path: Path) -> Callable[..., CliRun]:
    """``orchestrator run tree.py hello OPTIONS`` in this process, in the environment
    :func:`env` builds, with nothing on standard input."""
    (tmp_path / "tree.py").write_text(TREE)
    cli.environ = env

    def run(*options: str) -> CliRun:
        return cli("run", "tree.py", "hello", *options)

    return run


@pytest.mark.parametrize("flag", ["--model", "--override-model"])
def test_a_bare_name_no_provider_claims_is_refused_listing_what_is_known(
    command: Callable[..., CliRun], flag: str
) -> None:
    proc = command(flag, "gpt-4o")
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert line.startswith(f"orchestrator: {flag} gpt-4o: no provider claims")
    for known in ("openai:gpt-4o", "ollama:gpt-4o", "anthropic:<name>", "claude-sonnet-5-5"):
        assert known in line
    assert "offline" in line and "Traceback" not in proc.stderr


def test_claude_names_and_provider_strings_keep_working(command: Callable[..., CliRun]) -> None:
    # no key: both run on the offline model, as the CLI says, and complete
    for spec in ("claude-haiku-5-5", "openai:gpt-4o"):
        proc = command("--model", spec, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["offline"] is True


def test_json_names_each_agent_as_agent_name_and_keeps_agent(
    command: Callable[..., CliRun],
) -> None:
    proc = command("--model", "offline", "--json")
    assert proc.returncode == 0, proc.stderr
    tree = json.loads(proc.stdout)["tree"]
    assert tree["agent_name"] == tree["agent"] == "solo"
    for child in tree["children"]:
        assert child["agent_name"] == child["agent"]


MENU_TREE = (
    "from orchestrator import Agent\n"
    "child = Agent('helper', 'Help.', description='Helps.',\n"
    "              models=('anthropic:claude-haiku-5-5', 'openai:gpt-4.1'))\n"
    "agent = Agent('solo', 'Answer.', subagents=[child], model='anthropic:claude-sonnet-5-5')\n"
)


def test_override_model_replaces_every_model_of_a_menu_too(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "menu.py").write_text(MENU_TREE)
    cli.environ = env
    proc = cli("run", "menu.py", "hello", "--override-model", "offline", "--json")
    assert proc.returncode == 0, proc.stderr
    tree = json.loads(proc.stdout)["tree"]
    assert tree["children"], "the offline lead spawns its helper"
    models = {tree["model"], *(c["model"] for c in tree["children"])}
    assert models == {"offline:offline"}
