"""What a failed Chat Completions call means: retry it, give it up, or stop the tree.

:func:`classify` reads an exception from the ``openai`` SDK or its HTTP library (imported when
it runs: the SDK loads on the first call) into a provider-neutral :class:`~._retry.Failure`.
OpenAI-compatible servers word their errors in many ways (OpenAI's ``{"error": {...}}``,
FastAPI's ``{"detail": ...}``, a proxy's HTML page), so the body is read loosely and the one-line
detail says what came back. ``FIXES`` says what the user can do about each kind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from ._retry import (
    BadResponse,
    Failure,
    StreamFailed,
    one_line,
    overridden,
    server_delay,
    transport_failure,
)

FIXES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "authentication": "check {key_env} (the server rejected the key)",
        "permission": "the key may not use this model or project; check its permissions",
        "billing": "check the account's quota and billing settings",
        "not_found": "check the model name and the base URL ({base_url}; it usually ends in /v1)",
        "not_compatible": "check the base URL ({base_url}): it must be an OpenAI-compatible API "
        "(it usually ends in /v1)",
        "invalid_request": "fix the request: model name, max_output_tokens and tool schemas",
        "context_exceeded": "shorten the transcript or compact it",
        "request_too_large": "shorten the transcript or tool results",
        "rate_limit": "lower Limits.max_concurrency or raise the account's rate limit",
        "overloaded": "the server is overloaded; try again later",
        "connection": "is the server running at {base_url}?",
    }
)

_STATUS_KINDS: Final[Mapping[int, tuple[str, bool, bool]]] = MappingProxyType(
    {
        # status: (kind, retryable, fatal)
        401: ("authentication", False, True),
        402: ("billing", False, True),
        403: ("permission", False, True),
        404: ("not_found", False, True),
        405: ("not_compatible", False, True),  # a server without POST /chat/completions
        408: ("timeout", True, False),
        409: ("conflict", True, False),
        413: ("request_too_large", False, False),
        422: ("invalid_request", False, True),
        429: ("rate_limit", True, False),
        503: ("overloaded", True, False),
        529: ("overloaded", True, False),
    }
)

# How servers say the input (with the output cap) does not fit the context window: OpenAI
# ("maximum context length", code context_length_exceeded), llama.cpp ("exceed context
# window"), vLLM, Ollama.
_TOO_LONG: Final = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|context window|exceeds? (the )?"
    r"context|prompt is too long|too many tokens|input is too long|exceed_context_size",
    re.IGNORECASE,
)
# How a 400 says the output cap is over what the model gives: one agent's error, not the tree's.
_OVER_CAP: Final = re.compile(
    r"max_(completion_)?tokens.{0,40}(too large|must be|at most|less than|<=|exceeds?)",
    re.IGNORECASE,
)
# How OpenAI's reasoning models refuse ``max_tokens``.
_WANTS_COMPLETION_TOKENS: Final = re.compile(
    r"max_tokens.{0,80}max_completion_tokens", re.IGNORECASE | re.DOTALL
)
# How a server says the model is not there (OpenAI: model_not_found; vLLM, Ollama: "does not
# exist", "not found").
_NO_MODEL: Final = re.compile(
    r"model_not_found|model .{0,80}(does not exist|not found)", re.IGNORECASE
)


def _is_html(text: str) -> bool:
    start = text.lstrip()[:200].lower()
    return start.startswith(("<!doctype html", "<html", "<head", "<body")) or "<html" in start


def _body_message(body: object, fallback: str) -> tuple[str, str]:
    """``(code or type, message)`` from an error body as the SDK decoded it (the ``error``
    object of OpenAI's, or the whole body of another server's)."""
    if isinstance(body, Mapping):
        code = str(body.get("code") or body.get("type") or "")
        message: Any = body.get("message", body.get("detail", body.get("error")))
        if message is None:
            message = json.dumps(body)[:200]
        elif not isinstance(message, str):  # FastAPI's list of validation problems
            message = json.dumps(message)[:200]
        return code, message
    if isinstance(body, str):
        if _is_html(body):
            return "", "the server answered with an HTML page, not an OpenAI-compatible error"
        return "", body
    return "", fallback


def classify(exc: Exception) -> Failure | None:
    """What a failed attempt means, or None for an exception that is not a provider failure."""
    import openai

    if isinstance(exc, StreamFailed):
        return exc.failure
    if isinstance(exc, BadResponse):
        if exc.kind == "not_compatible":  # every agent on this base URL would get the same
            return Failure(exc.kind, one_line(str(exc)), retryable=False, fatal=True)
        if exc.kind == "unknown_finish_reason":  # the agent ends with an error naming it
            return Failure(exc.kind, one_line(str(exc)), retryable=False)
        return Failure(exc.kind, one_line(str(exc)), retryable=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        code, message = _body_message(exc.body, exc.message)
        detail = one_line(f"HTTP {status} {code}: {message}".replace(" :", ":"))
        if exc.request_id:
            detail += f" [request-id {exc.request_id}]"
        retry_after = server_delay(exc.response.headers)
        if status == 400 or status == 422:
            if _TOO_LONG.search(message) or _TOO_LONG.search(code):
                kind, retryable, fatal = "context_exceeded", False, False
            elif _WANTS_COMPLETION_TOKENS.search(message):
                kind, retryable, fatal = "max_completion_tokens", False, False
            elif _NO_MODEL.search(message) or _NO_MODEL.search(code):
                kind, retryable, fatal = "not_found", False, True
            else:  # an output cap over the model's is one agent's error; the rest stop the tree
                kind, retryable, fatal = "invalid_request", False, not _OVER_CAP.search(message)
        elif status == 429 and code == "insufficient_quota":
            kind, retryable, fatal = "billing", False, True
        elif status == 404 and _is_html(str(exc.body)):
            kind, retryable, fatal = "not_compatible", False, True
        elif status in _STATUS_KINDS:
            kind, retryable, fatal = _STATUS_KINDS[status]
        elif status >= 500:
            kind, retryable, fatal = "api_error", True, False
        else:
            kind, retryable, fatal = "api_error", False, False
        should = exc.response.headers.get("x-should-retry")
        retryable = overridden(should, retryable, fatal)
        return Failure(
            kind, detail, retryable, fatal, retry_after, rate_limited=kind == "rate_limit"
        )
    return transport_failure(exc, openai, openai.OpenAIError)


def stream_error(payload: Mapping[str, Any]) -> Failure:
    """An ``{"error": ...}`` object sent inside a 200 stream (OpenAI, vLLM and others do)."""
    error = payload.get("error")
    code, message = _body_message(error if error is not None else payload, "error")
    if isinstance(error, Mapping) and isinstance(error.get("code"), int):
        status = int(error["code"])
    else:
        status = 0
    lowered = f"{code} {message}".lower()
    if "rate" in lowered and "limit" in lowered:
        kind, retryable = "rate_limit", True
    elif _TOO_LONG.search(lowered):
        kind, retryable = "context_exceeded", False
    elif status and 400 <= status < 500:
        kind, retryable = "invalid_request", False
    else:  # a server error in the middle of an answer: try again
        kind, retryable = "api_error", True
    detail = one_line(f"mid-stream error {code}: {message}".replace(" :", ":"))
    return Failure(kind, detail, retryable, rate_limited=kind == "rate_limit")
