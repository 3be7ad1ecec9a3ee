"""The Jaeger the tests run (tests/support/jaeger.yaml, the config tracing/README.md gives users
without Docker): every socket it holds is on 127.0.0.1, and it does not trace itself, even with
``OTEL_EXPORTER_OTLP_ENDPOINT`` in its environment."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from conftest import file_spans, run_tree, trace_id_of
from support.jaeger import Jaeger
from support.otlp_receiver import OtlpReceiver


def listening_sockets(pid: int) -> list[str]:
    """The local addresses of every listening TCP and UDP socket process ``pid`` holds."""
    out = subprocess.run(
        ["ss", "-H", "-l", "-n", "-t", "-u", "-p"], capture_output=True, text=True, check=True
    ).stdout
    mine = [line.split() for line in out.splitlines() if re.search(rf"pid={pid},", line)]
    return [fields[4] for fields in mine]  # Netid State Recv-Q Send-Q Local Peer Process


def test_every_socket_jaeger_holds_is_bound_to_127_0_0_1(jaeger: Jaeger) -> None:
    addresses = listening_sockets(jaeger.pid)
    assert sorted(addresses) == sorted(f"127.0.0.1:{port}" for port in jaeger.ports.values())


def test_jaeger_does_not_trace_itself_to_the_endpoint_in_its_environment(
    tmp_path: Path,
) -> None:
    # its query service would trace itself to OTEL_EXPORTER_OTLP_ENDPOINT by default: the
    # config turns that off, whatever the environment (here: a receiver of our own)
    with OtlpReceiver() as receiver:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_endpoint}
        own = Jaeger(tmp_path / "jaeger.log", env=env).start()
        try:
            run = run_tree("team", tmp_path, endpoint=own.otlp_http)
            trace_id = trace_id_of(file_spans(run.trace_file))
            own.wait_for_spans(trace_id, 16)
            own.search("orchestrator")  # queries it answered, which it would trace
            assert own.get_json("/api/services")["data"] == ["orchestrator"]
        finally:
            own.stop()
        assert receiver.spans == []
