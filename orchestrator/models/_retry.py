"""What every provider's retry loop shares: the failure record, backoff, the retry-after gate.

An adapter reads a failed attempt into a :class:`Failure` (retry or not, fatal or not, the
server's delay from :func:`server_delay`); its loop waits that delay or :func:`backoff`, and a
rate-limited failure closes the :class:`Gate` held next to the client, so that every request on
the client waits, not only the one that was refused. No provider SDK here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import email.utils
import json
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import trio

from ..core.messages import Usage

_BACKOFF_INITIAL: Final = 0.5
_BACKOFF_MAX: Final = 8.0
_DETAIL_MAX_CHARS: Final = 300


@dataclass(frozen=True, slots=True)
class Failure:
    """What a failed attempt means to the retry loop (``detail`` is one line, for the error)."""

    kind: str
    detail: str
    retryable: bool
    fatal: bool = False
    retry_after: float | None = None
    rate_limited: bool = False


class StreamFailed(Exception):
    """A failure found while reading the stream (carried to the retry loop)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.detail)
        self.failure = failure


class BadResponse(Exception):
    """The response could not be read as the API's answer (retried like a server error)."""

    def __init__(self, detail: str, kind: str = "malformed_response") -> None:
        super().__init__(detail)
        self.kind = kind
        self.usage: Usage | None = None
        """Set for a complete answer that could not be used: the API billed it all the same."""


def one_line(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > _DETAIL_MAX_CHARS:
        text = text[: _DETAIL_MAX_CHARS - 3] + "..."
    return text


def overridden(should_retry: str | None, retryable: bool, fatal: bool) -> bool:
    """``retryable`` as a server's ``x-should-retry`` header overrides it (both official SDKs'
    servers send it); a fatal error is never retried."""
    if should_retry == "true" and not fatal:
        return True
    if should_retry == "false":
        return False
    return retryable


def transport_failure(exc: Exception, sdk: Any, sdk_error: type[Exception]) -> Failure | None:
    """What the failures both official SDKs raise alike mean (their timeout, connection and
    response-validation errors, the HTTP library's errors mid-stream, any other error of the
    SDK); ``None`` for an exception that is none of those. ``sdk`` is the SDK's module (its
    exception classes have the same names), ``sdk_error`` its base exception."""
    import httpx2

    if isinstance(exc, sdk.APITimeoutError):
        return Failure("timeout", "request timed out", retryable=True)
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__
        reason = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return Failure("connection", one_line(f"connection error{reason}"), retryable=True)
    if isinstance(exc, httpx2.TimeoutException):
        return Failure("timeout", "stream timed out", retryable=True)
    if isinstance(exc, httpx2.RequestError):  # raised by the stream after the headers arrived
        return Failure(
            "connection", one_line(f"stream broken: {type(exc).__name__}: {exc}"), retryable=True
        )
    if isinstance(exc, sdk.APIResponseValidationError | json.JSONDecodeError):
        return Failure(
            "malformed_response", one_line(f"unreadable response: {exc}"), retryable=True
        )
    if isinstance(exc, sdk_error):
        return Failure("client_error", one_line(f"{type(exc).__name__}: {exc}"), retryable=False)
    return None


def backoff(attempts: int) -> float:
    """Seconds to wait after failed attempt number ``attempts`` (from 1): exponential, capped,
    less up to 25% random jitter."""
    delay: float = min(_BACKOFF_MAX, _BACKOFF_INITIAL * 2 ** (attempts - 1))
    delay *= 1 - 0.25 * random.random()
    return delay


def wait_before_retry(failure: Failure, attempts: int, cap: float) -> float | None:
    """Seconds to wait before the next attempt: the server's delay (``retry-after``) when it
    names one within ``cap``, else the backoff (also when ``cap`` is 0: server delays
    ignored). ``None`` when the server asks for longer than ``cap``: give up now, saying so,
    rather than wait a capped time, be refused again, and retry silently for minutes."""
    delay = failure.retry_after
    if delay is not None and cap > 0:
        return delay if delay <= cap else None
    return backoff(attempts)


def too_long(failure: Failure, cap: float) -> Failure:
    """``failure`` as the end of the call: the server asked for a wait past ``cap``."""
    asked = failure.retry_after or 0.0
    return dataclasses.replace(
        failure,
        retryable=False,
        detail=(
            f"{failure.detail}; the provider asked to wait {_seconds(asked)} before a retry, "
            f"longer than max_retry_after ({_seconds(cap)}): not waiting"
        ),
    )


def plan_retry(
    failure: Failure, attempts: int, cap: float, gate: Gate
) -> tuple[float | None, Failure]:
    """The wait before the next attempt, the client's gate closed for it after a 429; or
    ``None`` and the failure worded as the call's end when the server asks for longer than
    ``cap`` (the gate then refuses every request on the client until that wait has passed)."""
    delay = wait_before_retry(failure, attempts, cap)
    if delay is None:
        failure = too_long(failure, cap)
        if failure.rate_limited:
            gate.close_for(failure.retry_after or 0.0, refusal=failure)
        return None, failure
    if failure.rate_limited:
        gate.close_for(delay)  # every request on this client waits
    return delay, failure


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def server_delay(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date), if any.

    Only a positive, finite delay counts: ``0``, a negative or NaN value, or a date already
    past (clock skew) would remove the backoff and retry in a tight loop, so the exponential
    backoff applies instead (as the SDK itself does).
    """
    delays: list[float] = []
    with contextlib.suppress(ValueError):
        if (ms := headers.get("retry-after-ms")) is not None:
            delays.append(float(ms) / 1000)
    value = headers.get("retry-after")
    if value is not None:
        try:
            delays.append(float(value))
        except ValueError:
            with contextlib.suppress(TypeError, ValueError):
                delays.append(email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    for delay in delays:  # retry-after-ms first, then retry-after
        if 0 < delay < math.inf:
            return delay
    return None


@dataclass(slots=True)
class Gate:
    """Held closed after a 429 until its retry-after has passed; every request waits on it.
    Closed by a wait longer than the adapter's cap, it holds ``refusal``: requests give up at
    once with it until it opens, instead of waiting."""

    open_at: float = float("-inf")
    refusal: Failure | None = None

    def close_for(self, seconds: float, refusal: Failure | None = None) -> None:
        until = trio.current_time() + seconds
        if until >= self.open_at:
            self.open_at = until
            self.refusal = refusal

    async def wait(self) -> None:
        # another 429 moves open_at later while we sleep: sleep again until it stays passed
        while (delay := self.open_at - trio.current_time()) > 0:  # noqa: ASYNC110
            await trio.sleep(delay)

    async def passed(self, on_wait: Callable[[float, str], None]) -> Failure | None:
        """Wait until the gate opens, shown through ``on_wait``; the refusal instead, at once,
        when the provider asked for a wait longer than the cap."""
        held = self.open_at - trio.current_time()
        if held <= 0:
            return None
        if self.refusal is not None:
            return self.refusal
        on_wait(held, "rate limited by the provider")
        await self.wait()
        return None
