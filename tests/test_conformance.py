"""The seams' conformance kits (orchestrator.testing): the built-in journal and runner pass
them, a journal or a runner of someone else's that keeps the contract passes too, and one that
breaks it fails, named."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from orchestrator import ChildOutcome, ChildSpec, InProcessRunner, Parent, RunStatus, Usage
from orchestrator.core.journal import RecordedCall
from orchestrator.core.journal_sqlite import JournalHeader, SQLiteJournal
from orchestrator.testing import ConformanceError, check_journal, check_runner


def sqlite_journals(folder: Path):
    def make(name: str) -> SQLiteJournal:
        path = folder / f"{name}.db"
        if path.exists():
            return SQLiteJournal.open(path)
        return SQLiteJournal.create(path, JournalHeader(run_id=f"kit-{name}", prompt="go"))

    return make


class DictJournal:
    """A third party's journal, in memory: the same record for the same name."""

    records: ClassVar[dict[str, dict[tuple, object]]] = {}

    def __init__(self, name: str, forget: bool = False) -> None:
        self.record = self.records.setdefault(name, {})
        self.forget = forget

    async def run_started(self, run_id, trace_id, span_id):
        return None

    async def lookup_response(self, path, turn):
        return None if self.forget else self.record.get(("response", path, turn))

    async def record_response(self, path, turn, response):
        self.record[("response", path, turn)] = response

    async def lookup_call(self, path, turn, call_id):
        key = ("call", path, turn, call_id)
        return RecordedCall(self.record[key]) if key in self.record else None

    async def tool_started(self, path, turn, call_id, idempotent):
        self.record.setdefault(("call", path, turn, call_id), None)

    async def record_result(self, path, turn, call_id, result):
        self.record[("call", path, turn, call_id)] = result

    async def run_ended(self, run_id, status):
        return None


def test_the_sqlite_journal_passes_the_journal_kit(tmp_path: Path) -> None:
    check_journal(sqlite_journals(tmp_path))


def test_a_journal_of_its_own_that_keeps_the_contract_passes_the_kit() -> None:
    DictJournal.records.clear()
    check_journal(DictJournal)


def test_a_journal_that_forgets_its_responses_fails_the_kit_naming_the_check() -> None:
    DictJournal.records.clear()
    with pytest.raises(ConformanceError, match="values read back: recorded"):
        check_journal(lambda name: DictJournal(name, forget=True))


def test_the_in_process_runner_passes_the_runner_kit() -> None:
    check_runner(InProcessRunner)


def test_a_runner_that_answers_without_running_the_child_fails_the_kit() -> None:
    class Pretending:
        async def run(self, spec: ChildSpec, parent: Parent) -> ChildOutcome:
            return ChildOutcome(spec.path, RunStatus.COMPLETED, "done", None, Usage(), 1, "")

    with pytest.raises(ConformanceError, match="the same result tree as in process"):
        check_runner(Pretending)
