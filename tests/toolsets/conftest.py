"""One MCP test server per worker, over streamable HTTP, for the tests whose point is not the
server's process (its start, its death, its stderr) nor state it keeps between calls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.mcp_servers import http_test_server


@pytest.fixture(scope="session")
def shared_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of the test server (default variant) started once for this worker."""
    with http_test_server(tmp_path_factory.mktemp("shared-mcp")) as (url, _):
        yield url
