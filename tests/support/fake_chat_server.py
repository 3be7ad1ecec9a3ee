"""A fake OpenAI Chat Completions API on 127.0.0.1, for testing the real ``openai`` SDK over HTTP.

``FakeChatServer`` is a threaded ``http.server`` that answers ``POST /v1/chat/completions`` in
JSON or, when the request says ``"stream": true``, in server-sent events framed as OpenAI frames
them: a first chunk with the role, text deltas, tool calls split the way real servers split them
(a first delta with the call's ``index``, ``id``, ``type`` and ``function.name`` and empty
``arguments``, then argument fragments carrying only the ``index``), a last chunk with the
``finish_reason``, a usage chunk with empty ``choices`` when ``stream_options.include_usage`` is
set, and ``data: [DONE]``. Each test scripts what it answers:

- a queue of replies (:meth:`FakeChatServer.push`): :class:`Completion` (helpers :func:`text`,
  :func:`tool_calls`), :class:`Error` (an HTTP error with OpenAI's error body, or an HTML page),
  :class:`Drop` (connection closed before any byte), :class:`DropMidStream`,
  :class:`StreamError` (an ``{"error": ...}`` chunk in a 200 stream), :class:`Malformed` (any
  body and content type) and :class:`Stall` (a slow answer, to test cancellation);
- a ``responder`` callable that computes the reply from the request body when the queue is empty,
  so that a whole agent loop can run against the server.

The server checks what OpenAI checks: a known model (404 ``model_not_found`` otherwise, if
``models`` is given), a key (401 if ``api_key`` is given and another is sent), every ``tool``
message answering a call of the assistant message before it and every call answered. Usage
counts characters / 4 and simulates OpenAI's automatic prompt cache: ``cached_tokens`` is the
longest prefix (by whole messages, tools first) a previous request sent, if it has at least
``cache_min_tokens``. Quirks of llama.cpp's server can be switched on: ``refuse_null_content``,
``stream_tools=False`` (a streamed request offering tools drops the connection before any
chunk), ``tools_need_choice`` (tools are ignored unless ``tool_choice`` is sent),
``stream_usage=False`` and ``json_schema_format=False`` (``response_format`` of type
``json_schema`` refused with a 500, as llama-cpp-python's server refuses it). Otherwise a
``response_format`` asking for a JSON schema is checked as OpenAI checks it (a name it takes, an
object at the root, in strict mode every object closed and every property required): a 400 if
not.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import platform
import re
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

# The openai SDK's first request in a process names the platform in its headers, and
# platform.platform() runs `uname -p` (once per process, then cached): asked here, when the
# tests that drive the SDK are collected, no test starts that process (tests/conftest.py fails
# a test that is not slow and starts one).
platform.platform()

__all__ = [
    "Completion",
    "Drop",
    "DropMidStream",
    "Endless",
    "Error",
    "FakeChatServer",
    "Malformed",
    "RecordedRequest",
    "Reply",
    "Stall",
    "StreamError",
    "text",
    "tool_calls",
]

ROUTE = "/v1/chat/completions"


# --------------------------------------------------------------------------------------------
# Replies


@dataclass(frozen=True)
class Completion:
    """A successful answer.

    ``calls`` are ``(name, arguments)`` pairs, the arguments a dict (sent as JSON) or a string
    (sent as it is: to model a small model's broken JSON); ``ids`` name the calls (default
    ``call_<n>``). ``usage`` overrides the simulated usage fields it names.
    """

    content: str | None = None
    calls: tuple[tuple[str, Mapping[str, Any] | str], ...] = ()
    ids: tuple[str, ...] = ()
    finish_reason: str | None = None
    """Default: ``tool_calls`` when there are calls, else ``stop``."""
    reasoning: str | None = None
    refusal: str | None = None
    usage: Mapping[str, Any] | None = None
    chunk_chars: int = 5
    """Characters per streamed text or argument fragment."""

    @property
    def reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.calls else "stop"


@dataclass(frozen=True)
class Error:
    """An HTTP error. ``{api_key}`` in ``message`` echoes the key sent (to prove adapters keep
    keys out of their errors); ``html`` sends a web page instead of OpenAI's error body."""

    status: int
    message: str = ""
    type: str = "invalid_request_error"
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    html: bool = False


@dataclass(frozen=True)
class Drop:
    """Read the request, then close the connection without answering."""


@dataclass(frozen=True)
class DropMidStream:
    """Start a streamed answer (headers and ``chunks`` chunks), then close the socket."""

    then: Completion | None = None
    chunks: int = 3


@dataclass(frozen=True)
class StreamError:
    """Start a streamed answer, then send ``{"error": ...}`` as a chunk and end the stream."""

    message: str = "The server had an error while processing your request."
    type: str = "server_error"
    code: int | str | None = 500


@dataclass(frozen=True)
class Malformed:
    """A 200 answer with this body and content type (default: truncated JSON)."""

    body: bytes = b'{"id": "chatcmpl-1", "choices": ['
    content_type: str = "application/json"


@dataclass(frozen=True)
class Stall:
    """Wait ``seconds`` (before answering, or after the first chunk when ``mid_stream``), then
    answer ``then`` (default: the text ``"late"``). The wait ends early when the server stops."""

    seconds: float
    mid_stream: bool = False
    then: Completion | None = None


@dataclass(frozen=True)
class Endless:
    """Start a streamed answer and send text deltas of ``size`` characters, never a finish
    reason nor usage, until the client goes away (or, a bound for a client that never does,
    ``chunks`` deltas were sent: then the stream ends, still without a finish reason)."""

    size: int = 100
    chunks: int = 100_000


Reply: TypeAlias = (
    Completion | Error | Drop | DropMidStream | StreamError | Malformed | Stall | Endless
)
Responder: TypeAlias = Callable[[dict[str, Any]], Reply]


def text(value: str, **kwargs: Any) -> Completion:
    """A text answer."""
    return Completion(content=value, **kwargs)


def tool_calls(
    *calls: tuple[str, Mapping[str, Any] | str],
    ids: Sequence[str] = (),
    content: str | None = None,
    **kwargs: Any,
) -> Completion:
    """An answer calling tools (optionally after some text)."""
    return Completion(content=content, calls=tuple(calls), ids=tuple(ids), **kwargs)


def estimate_tokens(chars: int) -> int:
    return max(1, math.ceil(chars / 4)) if chars else 0


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
    """The kind of reply it got (``Completion``, ``Error 429`` ...)."""
    usage: dict[str, Any] | None = None
    """The usage the server computed, for a successful answer."""


# --------------------------------------------------------------------------------------------
# The server


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops SYNs under 20 parallel connections
    allow_reuse_address = True
    fake: FakeChatServer


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
        except OSError:  # the client went away (a cancelled call)
            self.close_connection = True

    def do_GET(self) -> None:
        self.server.fake._serve(self, b"")


def _transcript_problem(messages: list[Any], refuse_null: bool) -> str | None:
    """What OpenAI refuses in ``messages``: roles, tool messages that answer nothing, calls left
    unanswered, and (a llama.cpp quirk) an assistant's ``content: null``."""
    pending: set[str] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"messages[{i}]: not an object"
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{i}].role: invalid role {role!r}"
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id not in pending:
                return (
                    f"messages[{i}]: 'tool' message answers {call_id!r}, which is not a tool "
                    "call of the preceding assistant message"
                )
            pending.discard(call_id)
            if not isinstance(m.get("content"), str):
                return f"messages[{i}].content: must be a string"
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. Missing: {', '.join(sorted(pending))}"
            )
        if role == "assistant":
            if m.get("content") is None and refuse_null:
                return f"messages[{i}].content: Input should be a valid string (null refused)"
            for call in m.get("tool_calls") or ():
                function = call.get("function") or {}
                if not call.get("id") or not function.get("name"):
                    return f"messages[{i}].tool_calls: each call needs an id and a name"
                if not isinstance(function.get("arguments"), str):
                    return f"messages[{i}].tool_calls: arguments must be a string"
                pending.add(call["id"])
        elif not isinstance(m.get("content"), str | list):
            return f"messages[{i}].content: must be a string or a list of parts"
    if pending:
        return f"tool calls without answers: {', '.join(sorted(pending))}"
    return None


def _subschemas(schema: Any, path: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema in ``schema`` (itself included), with its context as OpenAI names it."""
    if not isinstance(schema, dict):
        return
    yield repr(path), schema
    for key in ("$defs", "definitions", "properties"):
        for name, sub in (schema.get(key) or {}).items():
            yield from _subschemas(sub, (*path, key, name))
    for key in ("items", "additionalProperties", "not"):
        yield from _subschemas(schema.get(key), (*path, key))
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(schema.get(key) or ()):
            yield from _subschemas(sub, (*path, key, str(i)))


def _response_format_problem(form: Any) -> str | None:
    """``response_format`` as OpenAI checks it: a ``json_schema`` has a name of letters, digits,
    ``_`` and ``-``, an object at the root, and in strict mode every object closed
    (``additionalProperties: false``) with every property required."""
    if not isinstance(form, dict) or form.get("type") not in ("text", "json_object", "json_schema"):
        return "Invalid value for 'response_format.type': expected 'text', 'json_object' or 'json_schema'."
    if form["type"] != "json_schema":
        return None
    spec = form.get("json_schema")
    if not isinstance(spec, dict):
        return "Missing required parameter: 'response_format.json_schema'."
    name = spec.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
        return (
            "Invalid 'response_format.json_schema.name': string does not match pattern. Expected "
            "a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
        )
    schema = spec.get("schema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return (
            f"Invalid schema for response_format '{name}': schema must be a JSON Schema of "
            "'type: \"object\"'."
        )
    if spec.get("strict") is not True:
        return None
    for context, sub in _subschemas(schema, ()):
        if sub.get("type") != "object":
            continue
        if sub.get("additionalProperties") is not False:
            return (
                f"Invalid schema for response_format '{name}': In context={context}, "
                "'additionalProperties' is required to be supplied and to be false."
            )
        missing = [k for k in sub.get("properties") or {} if k not in (sub.get("required") or ())]
        if missing:
            return (
                f"Invalid schema for response_format '{name}': In context={context}, 'required' "
                "is required to be supplied and to be an array including every key in "
                f"properties. Missing '{missing[0]}'."
            )
    return None


class FakeChatServer:
    """The fake Chat Completions API. See the module docstring."""

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        models: Sequence[str] | None = None,
        api_key: str | None = None,
        cache_min_tokens: int = 0,
        refuse_null_content: bool = False,
        stream_tools: bool = True,
        tools_need_choice: bool = False,
        stream_usage: bool = True,
        completion_tokens_only: Sequence[str] = (),
        json_schema_format: bool = True,
    ) -> None:
        self.responder = responder
        self.models = set(models) if models is not None else None
        self.api_key = api_key
        self.cache_min_tokens = cache_min_tokens
        self.refuse_null_content = refuse_null_content
        self.stream_tools = stream_tools
        self.tools_need_choice = tools_need_choice
        self.stream_usage = stream_usage
        self.completion_tokens_only = tuple(completion_tokens_only)
        self.json_schema_format = json_schema_format
        """``False``: refuse ``response_format`` of type ``json_schema`` as llama-cpp-python's
        server does (a 500 naming the types it takes, ``text`` and ``json_object``)."""
        """Model-name prefixes that refuse ``max_tokens`` as OpenAI's reasoning models do."""
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
        self._prefixes: set[str] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeChatServer:
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="fake-chat-server",
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

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def root(self) -> str:
        """``http://127.0.0.1:<port>`` (without the ``/v1`` the SDK needs)."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def url(self) -> str:
        """The base URL to give the SDK (``http://127.0.0.1:<port>/v1``)."""
        return f"{self.root}/v1"

    # -- scripting and inspection ------------------------------------------------------------

    def push(self, *replies: Reply) -> None:
        """Queue replies, answered in order before the responder is asked."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The parsed bodies of the chat completion requests so far."""
        return [r.json for r in self.requests if r.path == ROUTE and r.json is not None]

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
                return Error(400, f"fake server: responder raised {exc!r}")
        self.errors.append(f"no reply scripted for request #{index}")
        return Error(400, f"fake server: no reply scripted for request #{index}")

    def _serve(self, h: _Handler, raw: bytes) -> None:
        headers = {k.lower(): v for k, v in h.headers.items()}
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        record = RecordedRequest(h.command, h.path.split("?")[0], headers, raw, parsed)
        with self._lock:
            self.requests.append(record)
            index = len(self.requests)
        if record.path != ROUTE or h.command != "POST":
            record.reply = "Error 404"
            self._send_error(h, Error(404, f"Invalid URL ({h.command} {record.path})"), "")
            return
        bearer = headers.get("authorization", "")
        key = bearer[7:] if bearer.lower().startswith("bearer ") else ""
        if self.api_key is not None and key != self.api_key:
            record.reply = "Error 401"
            self._send_error(
                h,
                Error(401, "Incorrect API key provided: {api_key}.", code="invalid_api_key"),
                key,
            )
            return
        problem = self._validate(parsed)
        if problem is not None:
            record.reply = f"Error {problem[0]}"
            self._send_error(h, Error(problem[0], problem[1], code=problem[2]), key)
            return
        assert parsed is not None
        stream = parsed.get("stream") is True
        if stream and parsed.get("tools") and not self.stream_tools:
            record.reply = "Drop"  # llama.cpp: "Automatic streaming tool choice is not supported"
            self._drop(h)
            return
        reply = self._next_reply(parsed, index)
        record.reply = type(reply).__name__ + (
            f" {reply.status}" if isinstance(reply, Error) else ""
        )
        if isinstance(reply, Error):
            self._send_error(h, reply, key)
        elif isinstance(reply, Drop):
            self._drop(h)
        elif isinstance(reply, Malformed):
            self._send_bytes(h, 200, reply.body, reply.content_type)
        elif isinstance(reply, Stall) and not reply.mid_stream:
            self.stalled.set()
            self._stop.wait(reply.seconds)
            self._send_completion(h, parsed, reply.then or text("late"), stream, record)
        else:
            self._send_completion(h, parsed, reply, stream, record)

    def _validate(self, body: dict[str, Any] | None) -> tuple[int, str, str | None] | None:
        if body is None:
            return 400, "We could not parse the JSON body of your request.", None
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return 400, "you must provide a model parameter", None
        if self.models is not None and model not in self.models:
            return (
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                "model_not_found",
            )
        if "max_tokens" in body and any(model.startswith(p) for p in self.completion_tokens_only):
            return (
                400,
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                "'max_completion_tokens' instead.",
                "unsupported_parameter",
            )
        cap = body.get("max_completion_tokens", body.get("max_tokens"))
        if cap is not None and (not isinstance(cap, int) or cap < 1):
            return 400, "max_tokens: must be a positive integer", None
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, "messages: at least one message is required", None
        problem = _transcript_problem(messages, self.refuse_null_content)
        if problem is not None:
            return (500 if "null" in problem else 400), problem, None
        form = body.get("response_format")
        if not self.json_schema_format and isinstance(form, dict):
            if form.get("type") == "json_schema":  # llama-cpp-python 0.3.36, word for word
                return (
                    500,
                    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
                    "'response_format', 'type'), 'msg': \"Input should be 'text' or "
                    "'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or "
                    "'json_object'\"}}",
                    None,
                )
            return None  # json_object, with or without its "schema": taken
        if "response_format" in body:
            problem = _response_format_problem(body["response_format"])
            if problem is not None:
                return 400, problem, None
        return None

    # -- writers -----------------------------------------------------------------------------

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
        h.send_header("x-request-id", f"req_fake{next(self._ids):06d}")
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)
        h.wfile.flush()

    def _send_error(self, h: _Handler, error: Error, api_key: str) -> None:
        message = error.message.replace("{api_key}", api_key) if api_key else error.message
        if error.html:
            page = (
                f"<!DOCTYPE html><html><body><h1>{error.status}</h1><p>{message}</p></body></html>"
            )
            self._send_bytes(h, error.status, page.encode(), "text/html", error.headers)
            return
        body = {
            "error": {"message": message, "type": error.type, "param": None, "code": error.code}
        }
        self._send_bytes(
            h, error.status, json.dumps(body).encode(), "application/json", error.headers
        )

    @staticmethod
    def _drop(h: _Handler) -> None:
        h.close_connection = True
        with contextlib.suppress(OSError):
            h.connection.shutdown(socket.SHUT_RDWR)

    def _usage(self, body: dict[str, Any], reply: Completion) -> dict[str, Any]:
        """Characters / 4, and the longest prefix a previous request sent as cached."""
        parts = [json.dumps(body.get("tools") or [], sort_keys=True)]
        parts += [json.dumps(m, sort_keys=True) for m in body.get("messages") or ()]
        digest = hashlib.sha256(str(body.get("model")).encode())
        cumulative, hashes, running = [], [], 0
        for part in parts:
            digest.update(part.encode() + b"\x00")
            hashes.append(digest.hexdigest())
            running += len(part)
            cumulative.append(estimate_tokens(running))
        prompt = cumulative[-1] if cumulative else 0
        cached = 0
        with self._lock:
            for i in range(len(hashes) - 1, -1, -1):
                if hashes[i] in self._prefixes:
                    cached = cumulative[i]
                    break
            self._prefixes.update(hashes)
        if cached < self.cache_min_tokens:
            cached = 0
        out_chars = len(reply.content or "") + len(reply.reasoning or "")
        out_chars += sum(
            len(name) + len(args if isinstance(args, str) else json.dumps(args))
            for name, args in reply.calls
        )
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": estimate_tokens(out_chars),
            "total_tokens": prompt + estimate_tokens(out_chars),
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }
        usage.update(reply.usage or {})
        return usage

    def _message(self, reply: Completion, msg_id: str) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.content,
            "refusal": reply.refusal,
        }
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": self._call_id(reply, i, msg_id),
                    "type": "function",
                    "function": {"name": name, "arguments": _arguments(args)},
                }
                for i, (name, args) in enumerate(reply.calls)
            ]
        return message

    @staticmethod
    def _call_id(reply: Completion, i: int, msg_id: str) -> str:
        return reply.ids[i] if i < len(reply.ids) else f"call_{msg_id[9:]}_{i}"

    def _send_completion(
        self,
        h: _Handler,
        body: dict[str, Any],
        reply: Reply,
        stream: bool,
        record: RecordedRequest,
    ) -> None:
        """A successful answer (possibly broken part way, for the stream-failure replies)."""
        completion = reply if isinstance(reply, Completion) else None
        if isinstance(reply, Endless):
            completion = text("")
        elif isinstance(reply, DropMidStream | Stall):
            completion = reply.then or text("late" if isinstance(reply, Stall) else "never done")
        if completion is None:  # StreamError
            completion = text("")
        if self.tools_need_choice and "tool_choice" not in body:
            completion = Completion(content=completion.content or "(tools ignored)")
        usage = self._usage(body, completion)
        record.usage = usage
        msg_id = f"chatcmpl-{next(self._ids):06d}"
        model = body.get("model")
        if not stream:
            if isinstance(reply, DropMidStream):
                self._drop(h)
                return
            if isinstance(reply, StreamError):
                self._send_error(h, Error(500, reply.message, type=reply.type), "")
                return
            whole = {
                "id": msg_id,
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": self._message(completion, msg_id),
                        "finish_reason": completion.reason,
                        "logprobs": None,
                    }
                ],
                "usage": usage,
            }
            self._send_bytes(h, 200, json.dumps(whole).encode(), "application/json")
            return

        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = list(self._chunks(msg_id, model, completion, usage if include_usage else None))
        h.send_response(200)
        h.send_header("content-type", "text/event-stream; charset=utf-8")
        h.send_header("transfer-encoding", "chunked")
        h.send_header("cache-control", "no-cache")
        h.send_header("x-request-id", f"req_fake{next(self._ids):06d}")
        h.end_headers()

        def send(data: bytes) -> None:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        if isinstance(reply, StreamError):
            send(chunks[0])
            error = {"error": {"message": reply.message, "type": reply.type, "code": reply.code}}
            send(f"data: {json.dumps(error)}\n\n".encode())
        elif isinstance(reply, DropMidStream):
            for chunk in chunks[: reply.chunks]:
                send(chunk)
            self._drop(h)
            return
        elif isinstance(reply, Endless):
            send(chunks[0])
            piece = {
                "id": msg_id,
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": model,
                "choices": [{"index": 0, "delta": {"content": "x" * reply.size}}],
            }
            data = f"data: {json.dumps(piece)}\n\n".encode()
            try:
                for _ in range(reply.chunks):
                    send(data)
            except OSError:  # the client went away: what the test is about
                return
        elif isinstance(reply, Stall):  # mid-stream stall
            send(chunks[0])
            self.stalled.set()
            if self._stop.wait(reply.seconds):
                self._drop(h)
                return
            for chunk in chunks[1:]:
                send(chunk)
        else:
            for chunk in chunks:
                send(chunk)
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _chunks(
        self, msg_id: str, model: Any, reply: Completion, usage: Mapping[str, Any] | None
    ) -> Iterator[bytes]:
        def chunk(delta: Mapping[str, Any], finish: str | None = None) -> bytes:
            payload = {
                "id": msg_id,
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": model,
                "choices": [
                    {"index": 0, "delta": dict(delta), "finish_reason": finish, "logprobs": None}
                ],
            }
            if usage is not None:
                payload["usage"] = None
            return f"data: {json.dumps(payload)}\n\n".encode()

        n = max(1, reply.chunk_chars)
        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for i in range(0, len(reply.reasoning or ""), n):
            yield chunk({"reasoning_content": (reply.reasoning or "")[i : i + n]})
        for i in range(0, len(reply.content or ""), n):
            yield chunk({"content": (reply.content or "")[i : i + n]})
        for i in range(0, len(reply.refusal or ""), n):
            yield chunk({"refusal": (reply.refusal or "")[i : i + n]})
        for index, (name, args) in enumerate(reply.calls):
            call_id = self._call_id(reply, index, msg_id)
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
            encoded = _arguments(args)
            for i in range(0, len(encoded), n):
                yield chunk(
                    {
                        "tool_calls": [
                            {"index": index, "function": {"arguments": encoded[i : i + n]}}
                        ]
                    }
                )
        yield chunk({}, reply.reason)
        if usage is not None and self.stream_usage:
            final = {
                "id": msg_id,
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": model,
                "choices": [],
                "usage": dict(usage),
            }
            yield f"data: {json.dumps(final)}\n\n".encode()
        yield b"data: [DONE]\n\n"


def _arguments(args: Mapping[str, Any] | str) -> str:
    return args if isinstance(args, str) else json.dumps(dict(args))
