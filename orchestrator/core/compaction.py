"""Context control: keeping a long run's input small without breaking the transcript.

Every turn re-sends the whole transcript, and tool output dominates it. A
:class:`ContextPolicy` (per agent, or for a whole run) turns on three strategies:

* **result caps per tool** (``result_caps``): cut one tool's results shorter than the run's
  ``max_result_chars``, with a visible marker and a hint to ask for less.
* **clearing old tool results** (``clear_results_after``): once a result is N turns old its
  content becomes a short placeholder naming the call, so the model can ask again. Every
  ``tool_use``/``tool_result`` pair stays intact. Clearing changes the cached prefix, so it
  happens in batches (``clear_batch`` results at once): one cache break buys many turns.
* **compaction** (``compact_at_tokens`` or ``compact_at_fraction`` of the model's context
  window): the model writes a checkpoint summary (goal, decisions, evidence with sources, open
  questions, work left) and the agent continues from a fresh transcript holding the task and
  that summary. A ``model_context_window_exceeded`` stop compacts and retries once.

All strategies are off by default except compaction at 80% of a model's known context window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .errors import ConfigurationError
from .ledger import text_units
from .messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, canonical_json
from .records import record

__all__ = ["CLEARED_PREFIX", "ContextPolicy", "ResultClearing", "TurnContext"]

CLEARED_PREFIX = "[cleared]"
KEEP_RESULTS_OF = frozenset({"spawn_subagent"})
"""Results never cleared: a subagent's answer cannot be had again by simply calling again."""
SUMMARY_REQUEST = (
    "Context checkpoint: the transcript is getting too long and will be replaced by your "
    "summary. Do not call tools now. Write a checkpoint summary with these headings: Goal; "
    "Decisions so far; Evidence (facts with their sources: document ids, tool names, values); "
    "Open questions; Work left. Keep every fact you will still need, exactly."
)
RESUME_HEADER = "Checkpoint of the work so far (the earlier transcript was compacted):"


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """How an agent keeps its input small. ``None`` turns a strategy off.

    ``result_caps``: characters per result, by tool name. ``clear_results_after``: turns after
    which a tool result is cleared; ``clear_batch``: clear only when this many are due.
    ``compact_at_tokens``: compact when the estimated input passes this many tokens;
    ``compact_at_fraction``: or this fraction of the model's context window (when known).
    """

    result_caps: Mapping[str, int] = field(default_factory=dict)
    clear_results_after: int | None = None
    clear_batch: int = 4
    compact_at_tokens: int | None = None
    compact_at_fraction: float | None = 0.8

    def __post_init__(self) -> None:
        for field_name in ("clear_results_after", "clear_batch", "compact_at_tokens"):
            value = getattr(self, field_name)
            if value is not None or field_name == "clear_batch":
                _check_count(f"ContextPolicy.{field_name}", value)
        fraction = self.compact_at_fraction
        if fraction is not None and (
            isinstance(fraction, bool)
            or not isinstance(fraction, int | float)
            or not 0 < fraction <= 1  # NaN fails this too
        ):
            raise ConfigurationError(
                f"ContextPolicy.compact_at_fraction must be a number in (0, 1], got {fraction!r}"
            )
        if not isinstance(self.result_caps, Mapping):
            raise ConfigurationError(
                "ContextPolicy.result_caps must map tool names to character counts, "
                f"got {self.result_caps!r}"
            )
        for name, cap in self.result_caps.items():
            _check_count(f"ContextPolicy.result_caps[{name!r}]", cap)
        object.__setattr__(self, "result_caps", dict(self.result_caps))

    def compaction_threshold(self, context_window: int | None) -> int | None:
        """Estimated input tokens past which the agent compacts (``None``: never)."""
        limits = [self.compact_at_tokens] if self.compact_at_tokens else []
        if self.compact_at_fraction and context_window:
            limits.append(int(context_window * self.compact_at_fraction))
        return min(limits) if limits else None


def _check_count(what: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be an integer, got {value!r}")
    if value < 1:
        raise ConfigurationError(f"{what} must be >= 1, got {value!r}")


@record
class TurnContext:
    """What one turn sent: the input size, what was cleared or compacted, the cache reads.

    ``input_tokens`` and ``cache_read_tokens`` are one request's: when the provider billed
    answers it could not use and the adapter asked again (the same request), their share.
    """

    turn: int
    input_tokens_estimate: int
    input_tokens: int
    cache_read_tokens: int
    cleared_results: int = 0
    compacted: bool = False


def clear_old_results(messages: list[Message], after: int, batch: int) -> tuple[list[Message], int]:
    """Replace tool results at least ``after`` turns old by placeholders, ``batch`` or more at once.

    Returns the new message list (unchanged messages are the same objects) and how many
    results were cleared. A result's age is the number of assistant turns after it.
    """
    calls: dict[str, ToolUseBlock] = {}
    due: list[tuple[int, int]] = []
    assistants_after = sum(1 for m in messages if m.role == "assistant")
    for i, message in enumerate(messages):
        if message.role == "assistant":
            assistants_after -= 1
            for call in message.tool_uses:
                calls[call.id] = call
            continue
        if assistants_after < after:
            continue
        for j, block in enumerate(message.content):
            if (
                isinstance(block, ToolResultBlock)
                and not block.content.startswith(CLEARED_PREFIX)
                and getattr(calls.get(block.tool_use_id), "name", "") not in KEEP_RESULTS_OF
            ):
                due.append((i, j))
    if len(due) < batch:
        return messages, 0
    out = list(messages)
    by_message: dict[int, list[int]] = {}
    for i, j in due:
        by_message.setdefault(i, []).append(j)
    for i, blocks in by_message.items():
        content = list(out[i].content)
        for j in blocks:
            old = content[j]
            assert isinstance(old, ToolResultBlock)
            origin = calls.get(old.tool_use_id)
            what = f"{origin.name}({_short_args(origin)})" if origin else "an earlier tool call"
            content[j] = ToolResultBlock(
                old.tool_use_id,
                f"{CLEARED_PREFIX} result of {what} cleared to save context; call again if needed",
                old.is_error,
                old.error_type,
            )
        out[i] = Message(out[i].role, tuple(content))
    return out, len(due)


class ResultClearing:
    """:func:`clear_old_results` for one agent's transcript, kept up to date turn by turn.

    Called before every model call, it gives the transcript that :func:`clear_old_results`
    would make of it, but reads only the messages added since its last call and touches only
    the results it clears: O(new messages + cleared results) per call, where the whole-list
    function is O(transcript) and so made a long run's turns ever slower. It changes the list
    in place (the agent's own; requests hold copies). A list other than the one it follows,
    or a shorter one (the transcript was compacted or replaced), is read again from its start.
    """

    __slots__ = ("_after", "_assistants", "_batch", "_calls", "_messages", "_pending", "_scanned")

    def __init__(self, after: int, batch: int) -> None:
        self._after = after
        self._batch = batch
        self._start(None)

    def _start(self, messages: list[Message] | None) -> None:
        """Follow ``messages`` from its start."""
        self._messages = messages
        self._scanned = 0
        self._assistants = 0
        self._calls: dict[str, ToolUseBlock] = {}
        """Every tool call read so far, by id (a later call with the same id wins, as in
        :func:`clear_old_results`)."""
        self._pending: deque[tuple[int, int, int]] = deque()
        """Results that may be cleared one day, in transcript order: (assistant messages
        before theirs, message index, block index)."""

    def clear(self, messages: list[Message]) -> tuple[int, int]:
        """Clear the results that are due, in place; how many were cleared, and how many
        characters of result text that removed (for the agent's running size estimate)."""
        if messages is not self._messages or len(messages) < self._scanned:
            self._start(messages)
        self._read(messages)
        newest_due = self._assistants - self._after  # due: this many assistant turns before it
        due = 0
        for before, _, _ in self._pending:  # in transcript order: the due ones come first
            if before > newest_due:
                break
            due += 1
        if due < self._batch:
            return 0, 0
        by_message: dict[int, list[int]] = {}
        for _ in range(due):
            _, i, j = self._pending.popleft()
            by_message.setdefault(i, []).append(j)
        removed = 0
        for i, blocks in by_message.items():
            content = list(messages[i].content)
            for j in blocks:
                old = content[j]
                assert isinstance(old, ToolResultBlock)
                content[j] = _placeholder(old, self._calls.get(old.tool_use_id))
                removed += text_units(old.content) - text_units(content[j].content)  # type: ignore[union-attr]
            messages[i] = Message(messages[i].role, tuple(content))
        return due, removed

    def _read(self, messages: list[Message]) -> None:
        """Take in the messages added since the last call."""
        for i in range(self._scanned, len(messages)):
            message = messages[i]
            if message.role == "assistant":
                self._assistants += 1
                for call in message.tool_uses:
                    self._calls[call.id] = call
                continue
            for j, block in enumerate(message.content):
                if (
                    isinstance(block, ToolResultBlock)
                    and not block.content.startswith(CLEARED_PREFIX)
                    and getattr(self._calls.get(block.tool_use_id), "name", "")
                    not in KEEP_RESULTS_OF
                ):
                    self._pending.append((self._assistants, i, j))
        self._scanned = len(messages)


def _placeholder(old: ToolResultBlock, origin: ToolUseBlock | None) -> ToolResultBlock:
    """What a cleared result becomes: a note naming the call, so the model can ask again."""
    what = f"{origin.name}({_short_args(origin)})" if origin else "an earlier tool call"
    return ToolResultBlock(
        old.tool_use_id,
        f"{CLEARED_PREFIX} result of {what} cleared to save context; call again if needed",
        old.is_error,
        old.error_type,
    )


def shorten_kept_results(messages: list[Message], max_chars: int) -> list[Message]:
    """Cut the results clearing keeps (subagent answers) to equal shares of what is left of
    ``max_chars`` after everything else, so that a checkpoint request after an overflow fits.

    Each cut result keeps its beginning and says it was cut; the transcript itself is not
    changed (only the checkpoint request is built from this).
    """
    kept: list[tuple[int, int]] = []
    other_chars = 0
    for i, message in enumerate(messages):
        for j, block in enumerate(message.content):
            if isinstance(block, ToolResultBlock) and not block.content.startswith(CLEARED_PREFIX):
                kept.append((i, j))
            else:
                other_chars += _block_chars(block)
    if not kept:
        return messages
    share = max(_MIN_KEPT_CHARS, (max_chars - other_chars) // len(kept))
    out = list(messages)
    for i, j in kept:
        content = list(out[i].content)
        old = content[j]
        assert isinstance(old, ToolResultBlock)
        if len(old.content) > share:
            content[j] = ToolResultBlock(
                old.tool_use_id,
                f"{old.content[:share]}\n[cut to {share} characters for the checkpoint]",
                old.is_error,
                old.error_type,
            )
            out[i] = Message(out[i].role, tuple(content))
    return out


_MIN_KEPT_CHARS = 400


def _block_chars(block: object) -> int:
    if isinstance(block, TextBlock):
        return len(block.text)
    if isinstance(block, ToolUseBlock):
        return len(block.name) + len(canonical_json(block.input))
    return len(getattr(block, "content", "") or getattr(block, "thinking", ""))


def _short_args(call: ToolUseBlock) -> str:
    text = canonical_json(call.input)[1:-1]
    return text if len(text) <= 80 else text[:77] + "..."


def summary_request(messages: Sequence[Message]) -> list[Message]:
    """The transcript for the checkpoint-summary call: the transcript plus our request."""
    request = TextBlock(SUMMARY_REQUEST)
    if messages and messages[-1].role == "user":
        last = messages[-1]
        return [*messages[:-1], Message("user", (*last.content, request))]
    return [*messages, Message("user", (request,))]


def compacted_transcript(task: str, summary: str) -> list[Message]:
    """A fresh transcript: the original task and the checkpoint summary, in one user message."""
    return [
        Message.user(
            f"{task}\n\n{RESUME_HEADER}\n{summary.strip()}\n\nContinue from this checkpoint."
        )
    ]
