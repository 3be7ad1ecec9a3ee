"""The command line's ``--mcp [AGENT:]NAME=COMMAND|URL``, parsed (:func:`parse_mcp_option`):
the text before the first ``=`` is ``[AGENT:]NAME``, the rest a command or a URL. Nothing
starts: a server is only described."""

from __future__ import annotations

import pytest

from orchestrator.core.errors import ConfigurationError
from orchestrator.toolsets.mcp import (
    HttpTransport,
    StdioTransport,
    option_server_name,
    parse_mcp_option,
    server_from_spec,
)


def test_a_value_without_an_agent_names_the_root_and_a_stdio_command() -> None:
    agent, server = parse_mcp_option("notes=python server.py --folder 'my notes'")
    assert agent is None
    assert server.name == "notes"
    assert server.transport == StdioTransport(
        "python", ("server.py", "--folder", "my notes"), None, None
    )


def test_an_agent_before_a_colon_names_the_agent_that_gets_the_server() -> None:
    agent, server = parse_mcp_option("researcher:notes=python server.py")
    assert agent == "researcher"
    assert server.name == "notes"
    assert isinstance(server.transport, StdioTransport)


def test_an_equals_sign_inside_the_command_belongs_to_the_command() -> None:
    agent, server = parse_mcp_option("researcher:notes=python server.py --root=/srv/a=b x:y")
    assert agent == "researcher"
    assert server.name == "notes"
    assert server.transport == StdioTransport(
        "python", ("server.py", "--root=/srv/a=b", "x:y"), None, None
    )


@pytest.mark.parametrize("head", ["web", "researcher:web"])
def test_a_url_is_streamable_http_with_or_without_an_agent(head: str) -> None:
    agent, server = parse_mcp_option(f"{head}=http://127.0.0.1:8000/mcp?team=a:b")
    assert agent == ("researcher" if ":" in head else None)
    assert server.name == "web"
    assert server.transport == HttpTransport("http://127.0.0.1:8000/mcp?team=a:b", None)
    assert option_server_name(f"{head}=http://127.0.0.1:8000/mcp") == "web"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("researcher:notes", "expected [AGENT:]NAME=COMMAND (stdio)"),
        (":notes=python s.py", "expected [AGENT:]NAME=COMMAND (stdio)"),
        ("researcher:=python s.py", "expected [AGENT:]NAME=COMMAND (stdio)"),
        ("a:b:notes=python s.py", "--mcp a:b:notes: expected [AGENT:]NAME before the '='"),
        ("researcher:notes=ws://127.0.0.1:9/mcp", "--mcp researcher:notes: unknown transport"),
        ("researcher:notes='unclosed", "--mcp researcher:notes: cannot split the command"),
        ("researcher:no tes=python s.py", "MCP server name 'no tes' must be"),
    ],
    ids=["no-equals", "empty-agent", "empty-name", "two-colons", "ws", "unsplittable", "bad-name"],
)
def test_a_bad_value_is_one_line_naming_what_is_wrong(spec: str, expected: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_mcp_option(spec)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_server_from_spec_takes_no_agent() -> None:
    assert server_from_spec("notes=python s.py").name == "notes"
    with pytest.raises(ConfigurationError, match="without an agent name"):
        server_from_spec("researcher:notes=python s.py")
