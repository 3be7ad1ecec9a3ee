"""``trace list`` keeps what it found in each file (``tracefiles._SummaryCache``), and reads a
file again whenever it may have changed: the summaries it shows are the same either way."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.tracing import tracefiles
from orchestrator.tracing.tracefiles import RunSummary, list_runs, resolve_run

T0 = 1_700_000_000_000_000_000
LONG_AGO = time.time() - 3600


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def _value(v: object) -> dict[str, Any]:
    if isinstance(v, str):
        return {"stringValue": v}
    return {"intValue": str(v)}


def span(span_id: str, parent: str | None, name: str, **attributes: object) -> dict[str, Any]:
    record: dict[str, Any] = {
        "traceId": "ab" * 16,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + int(span_id, 16) * 1000),
        "endTimeUnixNano": str(T0 + 10**9),
        "attributes": [{"key": k, "value": _value(v)} for k, v in attributes.items()],
        "status": {"code": 1},
    }
    if parent is not None:
        record["parentSpanId"] = parent
    return record


def line(*spans: dict[str, Any]) -> bytes:
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": _value("svc")}]},
                "scopeSpans": [{"scope": {"name": "orchestrator"}, "spans": list(spans)}],
            }
        ]
    }
    return json.dumps(doc).encode() + b"\n"


def child(n: int) -> dict[str, Any]:
    return span(f"{n + 2:016x}", "01" * 8, "chat m", **{"orchestrator.agent.path": "lead"})


ROOT = span(
    "01" * 8,
    None,
    "invoke_agent lead",
    **{
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "lead",
        "gen_ai.conversation.id": "run-one",
        "orchestrator.agent.depth": 0,
        "orchestrator.outcome": "completed",
    },
)


def settled(path: Path, data: bytes) -> Path:
    """``data`` written to ``path``, with a modification time long past (so it is cached)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (LONG_AGO, LONG_AGO))
    return path


@pytest.fixture
def no_reading(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Counts the files read for their spans (rather than summarized from the cache)."""
    read: list[Path] = []
    load = tracefiles.load_trace

    def counting(path: Path) -> Any:
        read.append(path)
        return load(path)

    monkeypatch.setattr(tracefiles, "load_trace", counting)
    return read


def runs_folder(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    settled(runs / "one.jsonl", line(child(1), child(2)) + line(ROOT))
    # interrupted (no root), damaged (a stray line, a last line cut off), and no trace at all
    settled(runs / "older" / "cut.jsonl", line(child(3)))
    settled(runs / "damaged.jsonl", line(child(4)) + b"\x00junk\n" + line(ROOT) + b'{"resou')
    settled(runs / "events.jsonl", b'{"event": "started"}\n')
    return runs


def test_a_second_listing_shows_the_same_runs_without_reading_the_files_again(
    tmp_path: Path, no_reading: list[Path]
) -> None:
    runs = runs_folder(tmp_path)
    first = list_runs(runs)
    assert len(no_reading) == 3  # the event log is sniffed, not read for spans
    no_reading.clear()
    again = list_runs(runs)
    assert again == first and no_reading == []
    by_name = {r.path.name: r for r in again}
    assert by_name["cut.jsonl"].interrupted and by_name["cut.jsonl"].outcome == "interrupted"
    assert [d.number for d in by_name["damaged.jsonl"].damaged] == [2, 4]
    assert by_name["damaged.jsonl"].damaged[-1].at_end
    assert by_name["one.jsonl"].run_id == "run-one" and by_name["one.jsonl"].span_count == 3
    assert resolve_run(None, runs) == again[0].path  # the newest run, found in the index
    assert no_reading == []


def test_a_file_that_grew_or_was_replaced_is_read_again(
    tmp_path: Path, no_reading: list[Path]
) -> None:
    runs = tmp_path / "runs"
    path = settled(runs / "run.jsonl", line(child(1)))
    (before,) = list_runs(runs)
    assert before.interrupted and before.span_count == 1
    settled(path, path.read_bytes() + line(ROOT))  # the run ended: its root span came
    no_reading.clear()
    (grown,) = list_runs(runs)
    assert no_reading == [path]
    assert not grown.interrupted and grown.span_count == 2 and grown.outcome == "completed"
    replacement = settled(runs / "new.jsonl", line(child(7)) + line(ROOT))
    os.replace(replacement, path)  # same size and time, another inode
    (replaced,) = list_runs(runs)
    assert no_reading[-1] == path and replaced.span_count == 2


def test_a_file_modified_just_now_is_read_every_time(
    tmp_path: Path, no_reading: list[Path]
) -> None:
    runs = tmp_path / "runs"
    (runs / "run.jsonl").parent.mkdir()
    (runs / "run.jsonl").write_bytes(line(child(1)) + line(ROOT))  # a run still writing
    list_runs(runs)
    list_runs(runs)
    assert len(no_reading) == 2


def test_a_file_that_becomes_a_trace_is_listed(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    path = settled(runs / "log.jsonl", b'{"event": "started"}\n')
    assert list_runs(runs) == []
    settled(path, line(ROOT))
    assert [r.run_id for r in list_runs(runs)] == ["run-one"]


@pytest.mark.parametrize(
    "index",
    [
        b"\x00 not json",
        b'{"version": 999, "files": {}}',
        b"[]",
        b"{}",
    ],
    ids=["damaged", "another-version", "not-an-object", "empty"],
)
def test_a_damaged_or_foreign_index_only_means_reading_the_files(
    tmp_path: Path, cache_home: Path, index: bytes, no_reading: list[Path]
) -> None:
    runs = runs_folder(tmp_path)
    expected = list_runs(runs, cache=False)
    assert not cache_home.exists()  # cache=False writes nothing
    list_runs(runs)
    (file,) = (cache_home / "orchestrator" / "trace-list").glob("*.json")
    file.write_bytes(index)
    assert list_runs(runs) == expected
    assert list_runs(runs) == expected


def test_an_entry_of_the_wrong_shape_counts_as_missing(tmp_path: Path, cache_home: Path) -> None:
    runs = runs_folder(tmp_path)
    expected = list_runs(runs)
    (file,) = (cache_home / "orchestrator" / "trace-list").glob("*.json")
    data = json.loads(file.read_bytes())
    data["files"]["one.jsonl"]["run"]["span_count"] = "many"
    data["files"]["damaged.jsonl"]["run"]["damaged"] = [[1, "x"]]
    data["files"]["older/cut.jsonl"]["run"]["start"] = 12
    file.write_text(json.dumps(data))
    assert list_runs(runs) == expected


def test_the_index_is_not_kept_in_the_runs_folder_and_forgets_files_gone(
    tmp_path: Path, cache_home: Path
) -> None:
    runs = runs_folder(tmp_path)
    list_runs(runs)
    assert sorted(p.name for p in runs.rglob("*") if p.is_file()) == [
        "cut.jsonl",
        "damaged.jsonl",
        "events.jsonl",
        "one.jsonl",
    ]
    (runs / "one.jsonl").unlink()
    summaries: list[RunSummary] = list_runs(runs)
    (file,) = (cache_home / "orchestrator" / "trace-list").glob("*.json")
    assert "one.jsonl" not in json.loads(file.read_bytes())["files"]
    assert "one.jsonl" not in [r.path.name for r in summaries]
