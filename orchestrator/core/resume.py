"""Durable runs: journaling a run to a file, and :func:`resume` after it stopped.

A journaled run records every model response and tool result as it goes
(:mod:`.journal_sqlite`). :func:`resume` runs the same tree on the same prompt with the same run
id over that record: each turn's recorded response is used instead of asking the model, each
recorded tool result instead of running the tool, and every agent, children included, replays
its own record, so the result is the whole tree, as if the run had never stopped. The first
turn or call with nothing recorded is where the run goes on for real. A tool call that started
and has no recorded result was in flight when the run stopped: an idempotent one runs again;
any other gets an ``is_error`` result saying its outcome is unknown.

A journal names the tree it ran and holds a fingerprint of its definitions (``core/treeref.py``);
resuming a different tree is refused, naming the first difference.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, overload

import trio
from opentelemetry import trace

from ..models.base import Model, resolve_model
from .agent import Agent, AgentTree
from .approvals import resolve_approvals
from .compaction import ContextPolicy
from .errors import ConfigurationError
from .hosted import check_hosted_tools
from .journal_sqlite import SQLiteJournal, read_header
from .limits import Limits
from .policy import DEFER, Policy
from .result import RunResult
from .run import DEFAULT_TOOL_THREADS, run
from .runner import ChildRunner
from .treeref import check_tree, load_tree, recorded_limits

__all__ = ["resume", "resume_sync"]

T = TypeVar("T")


@overload
async def resume(
    journal_path: str | os.PathLike[str],
    *,
    agent: Agent[T],
    model: Model | str | None = None,
    limits: Limits | None = None,
    policy: Policy | None = None,
    deps: Any = None,
    tracer_provider: trace.TracerProvider | None = None,
    context: ContextPolicy | None = None,
    tool_threads: int | None = None,
    runner: ChildRunner | None = None,
    definitions: Agent | None = None,
    approvals: Mapping[str, bool] | None = None,
) -> RunResult[T]: ...


@overload
async def resume(
    journal_path: str | os.PathLike[str],
    *,
    agent: None = None,
    model: Model | str | None = None,
    limits: Limits | None = None,
    policy: Policy | None = None,
    deps: Any = None,
    tracer_provider: trace.TracerProvider | None = None,
    context: ContextPolicy | None = None,
    tool_threads: int | None = None,
    runner: ChildRunner | None = None,
    definitions: Agent | None = None,
    approvals: Mapping[str, bool] | None = None,
) -> RunResult[Any]: ...


async def resume(
    journal_path: str | os.PathLike[str],
    *,
    agent: Agent | None = None,
    model: Model | str | None = None,
    limits: Limits | None = None,
    policy: Policy | None = None,
    deps: Any = None,
    tracer_provider: trace.TracerProvider | None = None,
    context: ContextPolicy | None = None,
    tool_threads: int | None = None,
    runner: ChildRunner | None = None,
    definitions: Agent | None = None,
    approvals: Mapping[str, bool] | None = None,
) -> RunResult[Any]:
    """Continue the run journaled at ``journal_path`` and return its whole result tree.

    The tree comes from the journal's reference unless ``agent`` is given; it must match the
    journal's fingerprint. ``model`` and ``limits`` default to what the run was started with
    (when they could be recorded: a model given as a string, the run's limits); the run's
    ``timeout`` counts again from now, its budgets continue from what was spent. The other
    options are :func:`~orchestrator.run`'s and apply to what runs from now on. A run that had
    completed resumes to its result at once (everything is replayed). ``definitions`` is the
    tree to check against the journal when ``agent`` is that tree changed by the caller (the
    command line's ``--override-model``, ``--mcp``): what it was journaled with, as defined.
    For an ``agent`` of output type ``T`` the result is a ``RunResult[T]`` (the replayed
    answer is validated again).

    ``approvals`` decides calls a run parked (``DEFER``; ``result.pending_approvals``):
    ``{id: True}`` runs the call, ``{id: False}`` declines it ("declined by a person"); an id
    may be a unique prefix. The decisions are recorded in the journal before the run goes on,
    so none is asked again; calls not named stay parked. An id that names no pending call is a
    ConfigurationError. A run that parked calls parks new ones again unless ``policy`` says
    otherwise.
    """
    path = Path(journal_path)
    header = read_header(path)
    if agent is None:
        if not header.tree_ref:
            raise ConfigurationError(
                f"the journal {path} does not say where its tree is defined (it was not "
                "importable as module:attr): pass resume(..., agent=tree)"
            )
        agent = load_tree(header.tree_ref)
    check_tree(header, definitions or agent, path)
    if policy is None and header.options.get("defer") is True:  # it parked: it parks again
        policy = Policy(approver=DEFER)
    if model is None:
        model = header.options.get("model")
    _check_hosted(agent, model, policy)
    journal = SQLiteJournal.open(path)
    try:
        if approvals:  # on record before they act: never asked again
            journal.record_decisions(resolve_approvals(approvals, journal.parked()))
        return await run(
            agent,
            header.prompt,
            model=model,
            limits=limits if limits is not None else recorded_limits(header.options),
            policy=policy,
            deps=deps,
            tracer_provider=tracer_provider,
            run_id=header.run_id,
            context=context,
            tool_threads=tool_threads or DEFAULT_TOOL_THREADS,
            journal=journal,
            runner=runner,
        )
    finally:
        journal.close()


def _check_hosted(agent: Agent, model: Model | str | None, policy: Policy | None) -> None:
    """:func:`run`'s check of hosted tools (a model that cannot run one, a policy that would
    confirm one), made before the journal is opened: a refused resume records nothing (not
    the approvals it was given) and tells why before anything replays."""
    if not isinstance(model, Model | str | None) or not isinstance(policy, Policy | None):
        return  # run() says what is wrong with them
    tree = AgentTree(agent, run_policy=policy)
    models = tree.models()
    check_hosted_tools(
        tree,
        models,
        resolve_model(model) if model is not None else None,
        tree.menus(models),
        policy,
    )


@overload
def resume_sync(
    journal_path: str | os.PathLike[str],
    *,
    agent: Agent[T],
    model: Model | str | None = None,
    limits: Limits | None = None,
    policy: Policy | None = None,
    deps: Any = None,
    tracer_provider: trace.TracerProvider | None = None,
    context: ContextPolicy | None = None,
    tool_threads: int | None = None,
    runner: ChildRunner | None = None,
    definitions: Agent | None = None,
) -> RunResult[T]: ...


@overload
def resume_sync(
    journal_path: str | os.PathLike[str],
    *,
    agent: None = None,
    model: Model | str | None = None,
    limits: Limits | None = None,
    policy: Policy | None = None,
    deps: Any = None,
    tracer_provider: trace.TracerProvider | None = None,
    context: ContextPolicy | None = None,
    tool_threads: int | None = None,
    runner: ChildRunner | None = None,
    definitions: Agent | None = None,
) -> RunResult[Any]: ...


def resume_sync(
    journal_path: str | os.PathLike[str],
    *,
    agent: Agent | None = None,
    model: Model | str | None = None,
    limits: Limits | None = None,
    policy: Policy | None = None,
    deps: Any = None,
    tracer_provider: trace.TracerProvider | None = None,
    context: ContextPolicy | None = None,
    tool_threads: int | None = None,
    runner: ChildRunner | None = None,
    definitions: Agent | None = None,
) -> RunResult[Any]:
    """:func:`resume` under ``trio.run`` (the same options), then a bounded flush of the tracer
    provider's spans."""
    from ..tracing.flush import flush_tracer_provider

    result = trio.run(
        partial(
            resume,
            journal_path,
            agent=agent,
            model=model,
            limits=limits,
            policy=policy,
            deps=deps,
            tracer_provider=tracer_provider,
            context=context,
            tool_threads=tool_threads,
            runner=runner,
            definitions=definitions,
        )
    )
    flush_tracer_provider(tracer_provider, timeout=2.0)
    return result
