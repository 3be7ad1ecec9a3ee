"""The session's local model server (see ``support/local_model.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.local_model import LocalServer, local_server


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with local_server(tmp_path_factory.mktemp("llama")) as server:
        yield server
