"""A fake Anthropic Messages API on 127.0.0.1, for testing the real SDK over real HTTP.

``FakeMessagesServer`` is a threaded ``http.server`` that answers ``POST /v1/messages`` in JSON or,
when the request says ``"stream": true``, in server-sent events framed like the real API (see
``notes/stack-facts.md``, appendix). Each test scripts what it answers:

- a queue of replies (:meth:`FakeMessagesServer.push`): :class:`Message` (helpers :func:`text`,
  :func:`tool_use`), :class:`Error` (429 with ``retry-after``, 529, 500, 401, 400, 404 ...),
  :class:`Drop` (connection closed before any byte), :class:`DropMidStream`, :class:`StreamError`
  (an ``event: error`` such as ``overloaded_error`` after ``message_start``), :class:`Malformed`
  and :class:`Stall` (a slow answer, to test cancellation);
- a ``responder`` callable that computes the reply from the request body when the queue is empty,
  so that a whole agent loop can run against the server.

Every request is recorded (headers, raw body, parsed JSON) for assertions, and a simulated
prompt cache reports ``cache_creation_input_tokens`` / ``cache_read_input_tokens`` by the API's
rules (a request's reads and writes are decided when it arrives, and what it writes is readable
by others only once its response starts: siblings sent at once all miss and all write): the prompt is the blocks of ``tools``, then ``system``, then ``messages``; a block with
``cache_control`` is a breakpoint (at most 4); a request reads the longest cached prefix that ends
at a breakpoint or at one of the 20 blocks before it, and writes the prefix at each breakpoint past
that. ``cache_control`` itself is not part of the prefix, so a breakpoint can move from turn to
turn. Tokens are estimated as characters / 4 of each block's JSON. A request asking for structured
output (``output_config.format``) is refused with a 400 unless its JSON schema closes every
object (``additionalProperties: false``), as the API refuses it.

Use it as a context manager (``with FakeMessagesServer() as server:``) or through a pytest
fixture; it runs in background threads, which is fine from trio tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

__all__ = [
    "CacheUsage",
    "Drop",
    "DropMidStream",
    "Endless",
    "Error",
    "FakeMessagesServer",
    "Malformed",
    "Message",
    "PromptCache",
    "RecordedRequest",
    "Reply",
    "Stall",
    "StreamError",
    "cited_text",
    "estimate_tokens",
    "server_tool_use",
    "text",
    "thinking",
    "tool_use",
    "web_fetch_result",
    "web_search_result",
]

MAX_BREAKPOINTS = 4


# --------------------------------------------------------------------------------------------
# Replies


@dataclass(frozen=True)
class Message:
    """A successful answer. ``content`` holds Messages API blocks (dicts).

    A ``tool_use`` block may carry ``"_partial_json"``: the input JSON text to stream instead of
    the full input (to model a tool call cut by ``max_tokens``). ``usage`` overrides the simulated
    usage fields it names.
    """

    content: tuple[Mapping[str, Any], ...]
    stop_reason: str | None = "end_turn"
    stop_sequence: str | None = None
    usage: Mapping[str, Any] | None = None
    """(``server_tool_use``, the hosted tools' counts, is a mapping of its own.)"""
    chunk_chars: int = 8
    """Characters per ``text_delta`` / ``input_json_delta`` event."""
    extra_input_tokens: int = 0
    """Input tokens billed on top of the request's own uncached ones: what the API bills for
    its own sampling iterations within one answer (after each hosted tool's result, the model
    reads the whole context again), which a responder computes."""


@dataclass(frozen=True)
class Error:
    """An HTTP error with the API's error body. ``{api_key}`` in ``message`` echoes the key sent
    (to prove that adapters keep keys out of their errors)."""

    status: int
    type: str
    message: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Drop:
    """Read the request, then close the connection without answering."""


@dataclass(frozen=True)
class DropMidStream:
    """Start a streamed answer (headers, ``message_start``, some deltas), then close the socket."""

    then: Message | None = None
    events: int = 3


@dataclass(frozen=True)
class StreamError:
    """Start a streamed answer, then send ``event: error`` with this error type and end the stream."""

    type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass(frozen=True)
class Malformed:
    """A 200 answer whose body cannot be parsed (truncated JSON, in SSE or JSON framing)."""

    body: bytes | None = None


@dataclass(frozen=True)
class Stall:
    """Wait ``seconds`` (before answering, or after ``message_start`` when ``mid_stream``), then
    answer ``then`` (default: the text ``"late"``). The wait ends early when the server stops,
    or when ``until`` (an event the test sets) is set."""

    seconds: float
    mid_stream: bool = False
    then: Message | None = None
    until: threading.Event | None = None


@dataclass(frozen=True)
class Endless:
    """Start a streamed answer (``message_start``, a text block) and send text deltas of
    ``size`` characters, never a stop reason, until the client goes away (or, a bound for a
    client that never does, ``chunks`` deltas were sent: then the stream ends unfinished)."""

    size: int = 100
    chunks: int = 100_000


Reply: TypeAlias = (
    Message | Error | Drop | DropMidStream | StreamError | Malformed | Stall | Endless
)
Responder: TypeAlias = Callable[[dict[str, Any]], Reply]


def text(value: str, *, stop_reason: str | None = "end_turn", **kwargs: Any) -> Message:
    """A text answer."""
    return Message(({"type": "text", "text": value},), stop_reason=stop_reason, **kwargs)


def tool_use(
    name: str,
    input: Mapping[str, Any],
    *,
    id: str | None = None,
    preamble: str | None = None,
    stop_reason: str | None = "tool_use",
    cut: bool = False,
    **kwargs: Any,
) -> Message:
    """A tool call (optionally after some text). ``cut=True`` streams only half of the input
    JSON and stops with ``max_tokens``, like a tool call cut by the output cap."""
    block: dict[str, Any] = {"type": "tool_use", "id": id or "", "name": name, "input": dict(input)}
    if cut:
        encoded = json.dumps(dict(input))
        block["_partial_json"] = encoded[: max(1, len(encoded) // 2)]
        stop_reason = "max_tokens"
    content: list[Mapping[str, Any]] = [{"type": "text", "text": preamble}] if preamble else []
    content.append(block)
    return Message(tuple(content), stop_reason=stop_reason, **kwargs)


def server_tool_use(name: str, input: Mapping[str, Any], *, id: str) -> dict[str, Any]:
    """A hosted tool's call (``web_search``, ``web_fetch``), for :class:`Message` content; it is
    streamed as the API streams it: a start with an empty input, then ``input_json_delta``."""
    return {"type": "server_tool_use", "id": id, "name": name, "input": dict(input)}


def web_search_result(tool_use_id: str, *results: tuple[str, str]) -> dict[str, Any]:
    """A ``web_search_tool_result`` of ``(url, title)`` results (the SDK's
    ``WebSearchResultBlock`` shape; the content is the API's opaque encrypted text)."""
    return {
        "type": "web_search_tool_result",
        "tool_use_id": tool_use_id,
        "content": [
            {
                "type": "web_search_result",
                "url": url,
                "title": title,
                "encrypted_content": f"enc:{hashlib.sha256(url.encode()).hexdigest()[:16]}",
                "page_age": None,
            }
            for url, title in results
        ],
    }


def web_fetch_result(tool_use_id: str, url: str, page: str) -> dict[str, Any]:
    """A ``web_fetch_tool_result`` holding the page at ``url`` as a text document (the SDK's
    ``WebFetchBlock`` shape)."""
    return {
        "type": "web_fetch_tool_result",
        "tool_use_id": tool_use_id,
        "content": {
            "type": "web_fetch_result",
            "url": url,
            "retrieved_at": "2026-12-07T12:00:00Z",
            "content": {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": page},
                "title": url,
                "citations": None,
            },
        },
    }


def cited_text(value: str, *sources: tuple[str, str]) -> dict[str, Any]:
    """A text block citing web search results ``(url, cited text)`` (the SDK's
    ``CitationsWebSearchResultLocation``); streamed as ``citations_delta`` events, then the
    text."""
    return {
        "type": "text",
        "text": value,
        "citations": [
            {
                "type": "web_search_result_location",
                "url": url,
                "title": url,
                "cited_text": cited,
                "encrypted_index": f"idx:{i}",
            }
            for i, (url, cited) in enumerate(sources)
        ],
    }


def thinking(thought: str, signature: str = "sig") -> dict[str, Any]:
    """A thinking block, for :class:`Message` content."""
    return {"type": "thinking", "thinking": thought, "signature": signature}


# --------------------------------------------------------------------------------------------
# The simulated prompt cache


def estimate_tokens(chars: int, chars_per_token: int = 4) -> int:
    """The server's token estimate for ``chars`` characters (at least 1)."""
    return max(1, math.ceil(chars / chars_per_token))


@dataclass(frozen=True)
class CacheUsage:
    """The input side of ``usage``: uncached input, cache writes, cache reads."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


def _strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(v) for v in value]
    return value


class PromptCache:
    """Prefix hashing at ``cache_control`` breakpoints with the API's 20-block lookback.

    Blocks are serialized in the key order the request used (not sorted), so a change of key
    order or whitespace in a prefix is a miss, as it would be on the real API. Entries never
    expire (tests run well within the 5-minute TTL).
    """

    def __init__(
        self, *, lookback: int = 20, min_tokens: int = 0, chars_per_token: int = 4
    ) -> None:
        self.lookback = lookback
        self.min_tokens = min_tokens
        self.chars_per_token = chars_per_token
        self._entries: set[str] = set()
        self._lock = threading.Lock()

    def blocks(self, body: Mapping[str, Any]) -> list[tuple[str, int, bool]]:
        """``(serialized block, tokens, is_breakpoint)`` for the prompt, tools -> system -> messages."""
        out: list[tuple[str, int, bool]] = []

        def add(tag: str, block: Any) -> None:
            marked = isinstance(block, dict) and "cache_control" in block
            encoded = tag + json.dumps(
                _strip_cache_control(block), separators=(",", ":"), ensure_ascii=False
            )
            out.append((encoded, estimate_tokens(len(encoded), self.chars_per_token), marked))

        for tool in body.get("tools") or ():
            add("tool:", tool)
        system = body.get("system")
        if isinstance(system, str) and system:
            add("system:", {"type": "text", "text": system})
        elif isinstance(system, list):
            for block in system:
                add("system:", block)
        for i, message in enumerate(body.get("messages") or ()):
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            for j, block in enumerate(content or ()):
                add(f"m{i}.{j}:{message.get('role')}:", block)
        return out

    def account(self, body: Mapping[str, Any]) -> CacheUsage:
        """Look the request up in the cache, store its new prefixes at once, and return its
        usage (:meth:`decide` and :meth:`publish` in one step).

        Raises ``ValueError`` (the server answers 400) for more than 4 breakpoints.
        """
        usage, written = self.decide(body)
        self.publish(written)
        return usage

    def publish(self, written: Sequence[str]) -> None:
        """Make the prefixes a request wrote readable (the server calls it when that request's
        response starts: on the API an entry exists from then, not from its arrival)."""
        with self._lock:
            self._entries.update(written)

    def decide(self, body: Mapping[str, Any]) -> tuple[CacheUsage, list[str]]:
        """A request's usage as decided when it arrives (what it reads, what it writes), and
        the prefixes it writes, not yet readable by others (see :meth:`publish`).

        Raises ``ValueError`` (the server answers 400) for more than 4 breakpoints.
        """
        blocks = self.blocks(body)
        breakpoints = [i for i, (_, _, marked) in enumerate(blocks) if marked]
        if len(breakpoints) > MAX_BREAKPOINTS:
            raise ValueError(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {len(breakpoints)}."
            )
        digest = hashlib.sha256(str(body.get("model")).encode())
        hashes: list[str] = []
        cumulative: list[int] = []
        running = 0
        for encoded, tokens, _ in blocks:
            digest.update(encoded.encode())
            digest.update(b"\x00")
            hashes.append(digest.copy().hexdigest())
            running += tokens
            cumulative.append(running)
        total = running
        with self._lock:
            hit = -1
            for bp in breakpoints:
                for pos in range(bp, max(-1, bp - self.lookback), -1):
                    if hashes[pos] in self._entries:
                        hit = max(hit, pos)
                        break
            read = cumulative[hit] if hit >= 0 else 0
            written_to = hit
            written: list[str] = []
            for bp in breakpoints:
                if bp > hit and cumulative[bp] >= self.min_tokens:
                    written.append(hashes[bp])
                    written_to = max(written_to, bp)
            creation = cumulative[written_to] - read if written_to > hit else 0
        return CacheUsage(total - read - creation, creation, read), written

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# --------------------------------------------------------------------------------------------
# Recording


@dataclass
class RecordedRequest:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    """Lower-cased header names."""
    body: bytes
    json: dict[str, Any] | None
    reply: str = ""
    """The kind of reply it got (``Message``, ``Error 429`` ...)."""
    received_at: float = 0.0
    """``time.monotonic()`` when the body had been read."""
    usage: dict[str, int] | None = None
    started_at: float = 0.0
    """When its response started (``time.monotonic()``; 0: it did not): what it wrote to the
    cache is readable from then."""
    """The usage the server reported, for a successful answer."""


# --------------------------------------------------------------------------------------------
# The server


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops SYNs under 20 parallel connections
    allow_reuse_address = True
    fake: FakeMessagesServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # 1.5 ms per call instead of 44 ms (Nagle + delayed ACK)
    timeout = 30
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            self.server.fake._serve(self, raw)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            self.close_connection = True
        except OSError:
            self.close_connection = True

    def do_GET(self) -> None:
        self.server.fake._serve(self, b"")


_Writer: TypeAlias = _Handler


def _content_problem(messages: list[dict[str, Any]]) -> str | None:
    """The content rules of the real API the runtime must respect, with its messages: no empty
    or blank text block, no empty message but a final assistant one, and every ``tool_use``
    answered by a ``tool_result`` in the next message (and no result answering anything else)."""
    pending: set[str] = set()
    for i, m in enumerate(messages):
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            return f"messages.{i}.content: must be a string or a list of blocks"
        if not blocks and not (i == len(messages) - 1 and m["role"] == "assistant"):
            return (
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        results = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        if pending - results:
            return (
                f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(sorted(pending - results))}"
            )
        if results - pending:
            return (
                f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(sorted(map(str, results - pending)))}"
            )
        for j, b in enumerate(blocks):
            for kind, key in (("tool_use", "id"), ("tool_result", "tool_use_id")):
                if b.get("type") == kind and not re.fullmatch(r"[a-zA-Z0-9_-]+", str(b.get(key))):
                    return (
                        f"messages.{i}.content.{j}.{kind}.{key}: String should match pattern "
                        "'^[a-zA-Z0-9_-]+$'"
                    )
            if b.get("type") == "tool_result" and b.get("is_error") and not b.get("content"):
                return (
                    f"messages.{i}.content.{j}: tool_result: content cannot be empty if "
                    "`is_error` is true"
                )
            if b.get("type") == "text" and not b.get("text"):
                return "messages: text content blocks must be non-empty"
            if b.get("type") == "text" and not str(b["text"]).strip():
                return f"messages.{i}.content.{j}: text content blocks must contain non-whitespace text"
        pending = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
    if pending:
        return (
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
            f"blocks immediately after: {', '.join(sorted(pending))}"
        )
    return None


def _server_tool_problem(entry: Mapping[str, Any]) -> str | None:
    """A server tool entry the API would refuse: a ``type`` the installed SDK has no
    ``*Tool*Param`` of, a key that param does not have, or a required key missing."""
    import typing

    import anthropic.types as sdk_types

    kind = str(entry.get("type"))
    for param_name in dir(sdk_types):
        param = getattr(sdk_types, param_name)
        if not param_name.endswith("Param") or not hasattr(param, "__required_keys__"):
            continue
        hints = typing.get_type_hints(param)
        if typing.get_args(hints.get("type")) != (kind,) or "name" not in hints:
            continue
        if typing.get_args(hints["name"]) != (entry.get("name"),):
            return f"{kind}: name must be {typing.get_args(hints['name'])[0]!r}"
        unknown = sorted(set(entry) - set(hints))
        missing = sorted(param.__required_keys__ - set(entry))
        if unknown or missing:
            return f"{kind}: unknown keys {unknown} or missing keys {missing}"
        if entry.get("allowed_domains") and entry.get("blocked_domains"):
            return f"{kind}: allowed_domains and blocked_domains cannot both be given"
        return None
    return f"unknown tool type {kind!r}"


def _subschemas(schema: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema in ``schema`` (itself included), with its path."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key in ("$defs", "definitions", "properties"):
        for name, sub in (schema.get(key) or {}).items():
            yield from _subschemas(sub, f"{path}.{key}.{name}")
    for key in ("items", "additionalProperties", "not"):
        yield from _subschemas(schema.get(key), f"{path}.{key}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(schema.get(key) or ()):
            yield from _subschemas(sub, f"{path}.{key}.{i}")


def _output_config_problem(config: Any) -> str | None:
    """``output_config`` as the API checks it: a ``format`` is a JSON schema whose every object
    says ``additionalProperties: false`` (structured outputs' rule)."""
    if not isinstance(config, dict):
        return "output_config: Input should be an object"
    form = config.get("format")
    if form is None:
        return None
    if not isinstance(form, dict) or form.get("type") != "json_schema":
        return "output_config.format.type: Input should be 'json_schema'"
    if not isinstance(form.get("schema"), dict):
        return "output_config.format.schema: Field required"
    for path, sub in _subschemas(form["schema"], "output_config.format.schema"):
        if sub.get("type") == "object" and sub.get("additionalProperties") is not False:
            return (
                f"{path}: For 'object' type, 'additionalProperties' must be explicitly set to false"
            )
    return None


class FakeMessagesServer:
    """The fake Messages API. See the module docstring."""

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        cache_lookback: int = 20,
        min_cacheable_tokens: int = 0,
        chars_per_token: int = 4,
        time_to_first_token: float = 0.0,
    ) -> None:
        self.responder = responder
        self.time_to_first_token = time_to_first_token
        """Seconds every answer waits before it starts (a benchmark's latency; tests order
        events with :class:`Stall` ``until`` instead)."""
        self.cache = PromptCache(
            lookback=cache_lookback,
            min_tokens=min_cacheable_tokens,
            chars_per_token=chars_per_token,
        )
        self.chars_per_token = chars_per_token
        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []
        """Problems of the fake itself (a responder that raised, no reply scripted)."""
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.stalled = threading.Event()
        """Set when a :class:`Stall` begins (after its first event, mid-stream): a test waits
        for it to act while the server stalls, whatever the machine's load."""
        self._ids = itertools.count(1)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeMessagesServer:
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="fake-messages-server",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeMessagesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL to give the SDK (``http://127.0.0.1:<port>``)."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # -- scripting and inspection ------------------------------------------------------------

    def push(self, *replies: Reply) -> None:
        """Queue replies, answered in order before the responder is asked."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        with self._lock:
            return len(self._queue)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The parsed bodies of the ``POST /v1/messages`` requests so far."""
        return [r.json for r in self.requests if r.path == "/v1/messages" and r.json is not None]

    # -- serving -----------------------------------------------------------------------------

    def _next_reply(self, body: dict[str, Any], index: int) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            try:
                return self.responder(body)
            except Exception as exc:  # a bug in the test's responder: make it loud
                self.errors.append(f"responder raised {exc!r} on request #{index}")
                return Error(400, "invalid_request_error", f"fake server: responder raised {exc!r}")
        self.errors.append(f"no reply scripted for request #{index}")
        return Error(
            400, "invalid_request_error", f"fake server: no reply scripted for request #{index}"
        )

    def _serve(self, h: _Handler, raw: bytes) -> None:
        headers = {k.lower(): v for k, v in h.headers.items()}
        parsed: dict[str, Any] | None
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        record = RecordedRequest(
            h.command, h.path.split("?")[0], headers, raw, parsed, received_at=time.monotonic()
        )
        with self._lock:
            self.requests.append(record)
            index = len(self.requests)
        if record.path != "/v1/messages" or h.command != "POST":
            record.reply = "Error 404"
            self._send_error(
                h, Error(404, "not_found_error", f"fake server: no route {h.path}"), ""
            )
            return
        # anthropic 2.x sends the key as `authorization: Bearer <key>`; older clients as x-api-key.
        bearer = headers.get("authorization", "")
        api_key = headers.get("x-api-key") or (
            bearer[7:] if bearer.lower().startswith("bearer ") else ""
        )
        if not api_key:
            record.reply = "Error 401"
            self._send_error(
                h, Error(401, "authentication_error", "no API key (x-api-key or bearer)"), ""
            )
            return
        problem = self._validate(parsed)
        if problem is not None:
            record.reply = "Error 400"
            self._send_error(h, Error(400, "invalid_request_error", problem), api_key)
            return
        assert parsed is not None
        try:  # the cache is looked up when the request arrives, as on the API
            decided = self.cache.decide(parsed)
        except ValueError as exc:  # too many breakpoints
            record.reply = "Error 400"
            self._send_error(h, Error(400, "invalid_request_error", str(exc)), "")
            return
        reply = self._next_reply(parsed, index)
        record.reply = type(reply).__name__ + (
            f" {reply.status}" if isinstance(reply, Error) else ""
        )
        stream = parsed.get("stream") is True
        if isinstance(reply, Error):
            self._send_error(h, reply, api_key)
        elif isinstance(reply, Drop):
            self._drop(h)
        elif isinstance(reply, Malformed):
            self._send_malformed(h, reply, stream)
        elif isinstance(reply, Stall) and not reply.mid_stream:
            self.stalled.set()
            self._wait(reply)
            self._send_message(h, parsed, reply.then or text("late"), stream, record, decided)
        else:
            self._send_message(h, parsed, reply, stream, record, decided)

    def _wait(self, stall: Stall) -> bool:
        """Wait out a stall: ``True`` when the server is stopping."""
        deadline = time.monotonic() + stall.seconds
        while not self._stop.is_set() and time.monotonic() < deadline:
            if stall.until is not None and stall.until.is_set():
                break
            self._stop.wait(min(0.01, max(0.0, deadline - time.monotonic())))
        return self._stop.is_set()

    @staticmethod
    def _validate(body: dict[str, Any] | None) -> str | None:
        if body is None:
            return "request body is not valid JSON"
        if not isinstance(body.get("model"), str) or not body["model"]:
            return "model: field required"
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            return "max_tokens: must be a positive integer"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        for i, m in enumerate(messages):
            if m.get("role") not in ("user", "assistant"):
                return f"messages.{i}.role: must be 'user' or 'assistant'"
        system = body.get("system")
        for i, block in enumerate(system if isinstance(system, list) else []):
            if block.get("type") == "text" and not str(block.get("text", "")).strip():
                return f"system.{i}: text content blocks must contain non-whitespace text"
        for i, entry in enumerate(body.get("tools") or ()):
            problem = _server_tool_problem(entry) if "type" in entry else None
            if problem is not None:
                return f"tools.{i}: {problem}"
        if "output_config" in body:
            problem = _output_config_problem(body["output_config"])
            if problem is not None:
                return problem
        return _content_problem(messages)

    # -- writers -----------------------------------------------------------------------------

    def _request_id(self) -> str:
        return f"req_fake{next(self._ids):06d}"

    def _send_bytes(
        self,
        h: _Handler,
        status: int,
        body: bytes,
        content_type: str,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        h.send_response(status)
        h.send_header("content-type", content_type)
        h.send_header("content-length", str(len(body)))
        h.send_header("request-id", self._request_id())
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)
        h.wfile.flush()

    def _send_error(self, h: _Handler, error: Error, api_key: str) -> None:
        message = error.message.replace("{api_key}", api_key) if api_key else error.message
        body = {"type": "error", "error": {"type": error.type, "message": message}}
        self._send_bytes(
            h, error.status, json.dumps(body).encode(), "application/json", error.headers
        )

    @staticmethod
    def _drop(h: _Handler) -> None:
        h.close_connection = True
        with contextlib.suppress(OSError):
            h.connection.shutdown(socket.SHUT_RDWR)

    def _send_malformed(self, h: _Handler, reply: Malformed, stream: bool) -> None:
        if stream:
            body = reply.body or b'event: message_start\ndata: {"type": "message_start", "mess\n\n'
            self._send_bytes(h, 200, body, "text/event-stream; charset=utf-8")
        else:
            self._send_bytes(
                h, 200, reply.body or b'{"id": "msg_01", "content": [', "application/json"
            )

    def _usage(self, cached: CacheUsage, reply: Message) -> dict[str, int]:
        content_chars = sum(  # a hosted tool's result is the provider's input, not output
            len(json.dumps({k: v for k, v in b.items() if not k.startswith("_")}))
            for b in reply.content
            if not str(b.get("type", "")).endswith("_tool_result")
        )
        usage = {
            "input_tokens": cached.input_tokens + reply.extra_input_tokens,
            "cache_creation_input_tokens": cached.cache_creation_input_tokens,
            "cache_read_input_tokens": cached.cache_read_input_tokens,
            "output_tokens": estimate_tokens(content_chars, self.chars_per_token),
        }
        usage.update(reply.usage or {})
        return usage

    def _message_json(
        self, body: dict[str, Any], reply: Message, usage: dict[str, int], msg_id: str
    ) -> dict[str, Any]:
        content = []
        for i, block in enumerate(reply.content):
            clean = {k: v for k, v in block.items() if not k.startswith("_")}
            if clean.get("type") == "tool_use" and not clean.get("id"):
                clean["id"] = f"toolu_{msg_id[4:]}_{i}"
            content.append(clean)
        return {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": reply.stop_reason,
            "stop_sequence": reply.stop_sequence,
            "usage": usage,
        }

    def _send_message(
        self,
        h: _Handler,
        body: dict[str, Any],
        reply: Reply,
        stream: bool,
        record: RecordedRequest,
        decided: tuple[CacheUsage, list[str]],
    ) -> None:
        """A successful answer (possibly broken part way, for the stream-failure replies): its
        cache usage as decided when it arrived; what it wrote becomes readable as it starts,
        after the server's time to first token."""
        message = reply if isinstance(reply, Message) else None
        if isinstance(reply, Endless):
            message = text("")
        elif isinstance(reply, DropMidStream | Stall):
            message = reply.then or text("late" if isinstance(reply, Stall) else "never finished")
        if message is None:  # StreamError: a message_start, then the error
            message = text("")
        usage = self._usage(decided[0], message)
        record.usage = usage
        if self.time_to_first_token > 0:
            self._stop.wait(self.time_to_first_token)
        record.started_at = time.monotonic()
        self.cache.publish(decided[1])  # the response starts: its entries exist from now
        msg_id = f"msg_{next(self._ids):06d}"
        full = self._message_json(body, message, usage, msg_id)
        if not stream:
            if isinstance(reply, Message):
                self._send_bytes(h, 200, json.dumps(full).encode(), "application/json")
            elif isinstance(reply, DropMidStream):
                self._drop(h)
            elif isinstance(reply, StreamError):
                self._send_error(h, Error(529, reply.type, reply.message), "")
            else:
                self._send_bytes(h, 200, json.dumps(full).encode(), "application/json")
            return

        events = list(self._sse_events(full, message, usage))
        h.send_response(200)
        h.send_header("content-type", "text/event-stream; charset=utf-8")
        h.send_header("transfer-encoding", "chunked")
        h.send_header("cache-control", "no-cache")
        h.send_header("request-id", self._request_id())
        h.end_headers()

        def chunk(data: bytes) -> None:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        if isinstance(reply, StreamError):
            chunk(events[0])
            error = {"type": "error", "error": {"type": reply.type, "message": reply.message}}
            chunk(_sse("error", error))
        elif isinstance(reply, DropMidStream):
            for event in events[: reply.events]:
                chunk(event)
            self._drop(h)
            return
        elif isinstance(reply, Endless):
            chunk(events[0])
            block = {"type": "text", "text": ""}
            chunk(
                _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": block},
                )
            )
            delta = {"type": "text_delta", "text": "x" * reply.size}
            data = _sse(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
            try:
                for _ in range(reply.chunks):
                    chunk(data)
            except OSError:  # the client went away: what the test is about
                return
        elif isinstance(reply, Stall):  # mid-stream stall
            chunk(events[0])
            self.stalled.set()
            if self._stop.wait(reply.seconds):
                self._drop(h)
                return
            for event in events[1:]:
                chunk(event)
        else:
            for event in events:
                chunk(event)
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    @staticmethod
    def _sse_events(full: dict[str, Any], reply: Message, usage: dict[str, int]) -> Iterator[bytes]:
        start = dict(
            full,
            content=[],
            stop_reason=None,
            stop_sequence=None,
            usage=dict(usage, output_tokens=1),
        )
        yield _sse("message_start", {"type": "message_start", "message": start})
        yield _sse("ping", {"type": "ping"})
        n = max(1, reply.chunk_chars)
        for index, (block, original) in enumerate(zip(full["content"], reply.content, strict=True)):
            kind = block.get("type")
            if kind == "text":
                start: dict[str, Any] = {"type": "text", "text": ""}
                if block.get("citations"):
                    start["citations"] = []  # then one citations_delta per citation
                yield _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start},
                )
                for citation in block.get("citations") or ():
                    yield _sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "citations_delta", "citation": citation},
                        },
                    )
                value = block["text"]
                for i in range(0, len(value), n):
                    yield _sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": value[i : i + n]},
                        },
                    )
            elif kind in ("tool_use", "server_tool_use"):
                yield _sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {
                            "type": kind,
                            "id": block["id"],
                            "name": block["name"],
                            "input": {},
                        },
                    },
                )
                encoded = original.get("_partial_json")
                if encoded is None:
                    encoded = json.dumps(block["input"])
                yield _sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": ""},
                    },
                )
                for i in range(0, len(encoded), n):
                    yield _sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {
                                "type": "input_json_delta",
                                "partial_json": encoded[i : i + n],
                            },
                        },
                    )
            elif kind == "thinking":
                yield _sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                    },
                )
                value = block.get("thinking", "")
                for i in range(0, len(value), n):
                    yield _sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "thinking_delta", "thinking": value[i : i + n]},
                        },
                    )
                yield _sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {
                            "type": "signature_delta",
                            "signature": block.get("signature", ""),
                        },
                    },
                )
            else:
                yield _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": block},
                )
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": full["stop_reason"],
                    "stop_sequence": full["stop_sequence"],
                },
                "usage": usage,
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})


def _sse(name: str, payload: Mapping[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
