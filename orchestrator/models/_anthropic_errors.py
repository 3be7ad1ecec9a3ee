"""What a failed Anthropic call means: retry it, give it up, or stop the tree, and what to fix.

:func:`classify` reads an exception from the SDK or its HTTP library (imported when it runs:
the SDK loads on the first call) into a provider-neutral :class:`~._retry.Failure`. The tables
map HTTP statuses, and the ``error.type`` of an ``event: error`` mid-stream, to a kind; ``FIXES``
says what the user can do about each kind.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

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
        "authentication": "check ANTHROPIC_API_KEY (the API rejected the key)",
        "permission": "the key may not use this model or workspace; check its permissions",
        "billing": "check the account's credit balance and billing settings",
        "not_found": "check the model name (current: {models}) and ANTHROPIC_BASE_URL",
        "invalid_request": "fix the request: model name, max_output_tokens and tool schemas",
        "context_exceeded": "shorten the transcript or compact it",
        "request_too_large": "shorten the transcript or tool results",
        "rate_limit": "lower Limits.max_concurrency or raise the account's rate limit",
        "overloaded": "the API is overloaded; try again later",
    }
)

_STATUS_KINDS: Final[Mapping[int, tuple[str, bool, bool]]] = MappingProxyType(
    {
        # status: (kind, retryable, fatal)
        401: ("authentication", False, True),
        402: ("billing", False, True),
        403: ("permission", False, True),
        404: ("not_found", False, True),
        408: ("timeout", True, False),
        409: ("conflict", True, False),
        413: ("request_too_large", False, False),
        422: ("invalid_request", False, True),
        429: ("rate_limit", True, False),
        529: ("overloaded", True, False),
    }
)

STREAM_ERROR_KINDS: Final[Mapping[str, tuple[str, bool, bool]]] = MappingProxyType(
    {
        # error.type of an `event: error` in a 200 stream: (kind, retryable, fatal)
        "overloaded_error": ("overloaded", True, False),
        "api_error": ("api_error", True, False),
        "rate_limit_error": ("rate_limit", True, False),
        "timeout_error": ("timeout", True, False),
        "invalid_request_error": ("invalid_request", False, True),
        "authentication_error": ("authentication", False, True),
        "permission_error": ("permission", False, True),
        "billing_error": ("billing", False, True),
        "not_found_error": ("not_found", False, True),
    }
)

# How a 400 says an output cap is over the model's ("max_tokens: 40000 > 32000, which is the
# maximum allowed number of output tokens for ...").
_OVER_CAP: Final = re.compile(
    r"max_tokens:\s*\d+\s*>\s*\d+|maximum allowed number of output tokens"
)

# How a 400 says that the input (with max_tokens) does not fit the model's context window.
_TOO_LONG_SIGNS: Final = ("prompt is too long", "context window", "exceed context limit")


def classify(exc: Exception) -> Failure | None:
    """What a failed attempt means, or None for an exception that is not a provider failure."""
    import anthropic

    if isinstance(exc, StreamFailed):
        return exc.failure
    if isinstance(exc, BadResponse):
        return Failure(exc.kind, one_line(str(exc)), retryable=True)
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        etype = exc.type or ""
        message = exc.api_message or str(exc)
        where = f"HTTP {status}" if status != 200 else "mid-stream error event"
        detail = one_line(f"{where} {etype}: {message}".replace(" :", ":"))
        if exc.request_id:
            detail += f" [request-id {exc.request_id}]"
        if status == 200:
            kind, retryable, fatal = STREAM_ERROR_KINDS.get(
                etype, (etype or "api_error", False, False)
            )
        elif status == 400:
            lowered = message.lower()  # one agent's input too long: it may compact, not fatal
            too_long = any(sign in lowered for sign in _TOO_LONG_SIGNS)
            # one agent's output cap over the model's (a cut tool call retried with a doubled
            # cap may ask for more than the model gives): that agent's error, not the tree's
            over_cap = bool(_OVER_CAP.search(lowered))
            if too_long:
                kind, retryable, fatal = "context_exceeded", False, False
            else:
                kind, retryable, fatal = "invalid_request", False, not over_cap
        elif status in _STATUS_KINDS:
            kind, retryable, fatal = _STATUS_KINDS[status]
        elif status >= 500:
            kind, retryable, fatal = "api_error", True, False
        else:
            kind, retryable, fatal = "api_error", False, False
        should = exc.response.headers.get("x-should-retry") if status != 200 else None
        retryable = overridden(should, retryable, fatal)
        retry_after = server_delay(exc.response.headers) if status != 200 else None
        return Failure(
            kind, detail, retryable, fatal, retry_after, rate_limited=kind == "rate_limit"
        )
    return transport_failure(exc, anthropic, anthropic.AnthropicError)
