"""What both provider adapters use besides the retry loop's parts (those are in ``_retry``).

:class:`Price` (each adapter's price table is made of them), the checks of a setting, the key's
fingerprint that tells clients apart, the process's one TLS context, the SDK's import off the
event loop, and the reading of a server-sent-event body both APIs stream. No provider SDK here:
each is imported when a call needs it (``httpx2`` when the TLS context is first built).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import math
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import trio

from ..core.messages import Usage, is_text, well_formed

if TYPE_CHECKING:
    import ssl


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens: uncached input, output, 5-minute cache write, cache read.

    ``long_context`` (with ``long_context_above``) is the rate of a request whose input, cache
    included, is above that many tokens (Haiku 5.5 bills long prompts at a higher rate).
    ``web_search`` is USD per 1,000 hosted web searches (Anthropic's list price, $10); a web
    fetch costs only the tokens of what it reads (``web_fetch``, per 1,000, is 0).
    """

    input: float
    output: float
    cache_write: float
    cache_read: float
    long_context_above: int | None = None
    long_context: Price | None = None
    web_search: float = 10.0
    web_fetch: float = 0.0

    @classmethod
    def of(
        cls,
        input: float,
        output: float,
        *,
        cache_write: float | None = None,
        cache_read: float | None = None,
    ) -> Price:
        """A price from input and output rates; cache write defaults to 1.25x input, read 0.1x."""
        return cls(
            input,
            output,
            input * 1.25 if cache_write is None else cache_write,
            input * 0.1 if cache_read is None else cache_read,
        )

    def cost(self, usage: Usage) -> float:
        """USD for ``usage`` (whose ``input_tokens`` includes cache reads and writes)."""
        price = self
        if (
            self.long_context is not None
            and self.long_context_above is not None
            and usage.input_tokens > self.long_context_above
        ):
            price = self.long_context
        uncached = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
        tokens = (
            uncached * price.input
            + usage.cache_write_tokens * price.cache_write
            + usage.cache_read_tokens * price.cache_read
            + usage.output_tokens * price.output
        ) / 1_000_000
        if usage.web_search_requests or usage.web_fetch_requests:
            tokens += (
                usage.web_search_requests * self.web_search
                + usage.web_fetch_requests * self.web_fetch
            ) / 1_000
        return tokens


# --------------------------------------------------------------------------------------------
# Settings and the shared client


def positive(value: object) -> bool:
    """A number of seconds above zero (not a bool, not NaN; infinity allowed)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


STREAM_CHARS_PER_TOKEN = 32
"""More characters than any token of any tokenizer we know holds: a stream that has sent more
than this many per token of its output limit has gone past the limit (see stream_limit)."""


def stream_limit(max_tokens: int) -> int:
    """Characters a streamed answer may send before it is taken as past ``max_tokens`` and cut
    (a server streaming without end was billed 0 tokens until the run's deadline)."""
    return max(1, max_tokens) * STREAM_CHARS_PER_TOKEN + 4096


def token_count(value: object) -> int | None:
    """A usage figure a provider reported, as a count; None when it is not one (a string that
    is not digits, a list, NaN, infinity, a bool): then the figure is taken as missing, not as
    a reason to end the agent. A negative or fractional one is the runtime's to clamp."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def fingerprint(api_key: str) -> str:
    """What tells two keys' clients apart in the run's pool (the key itself is not kept)."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=4)
def tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """The TLS context every client of this process uses, built as the SDKs would build it.

    Loading the CA bundle is most of what opening an SDK client costs, and every run opens its
    own clients: a server or a script making many runs paid it each time. An ``ssl.SSLContext``
    is safe to share. Keyed by the variables that choose the CA bundle, so changing them still
    takes effect; a bundle replaced in place (the same path) is read again only by a new process.
    """
    import httpx2  # the SDKs' HTTP library (imported by them anyway)

    del cert_file, cert_dir  # only the cache key: httpx2 reads them from the environment
    return httpx2.create_ssl_context()


async def import_sdk(name: str) -> ModuleType:
    """The SDK module ``name``. Its first import is long CPU work: done on the event loop, it
    froze every agent, the run's deadline and ``cancel()`` behind the first call, so it runs in
    a worker thread (abandoned if the run is cut; the import finishes on its own)."""
    module = sys.modules.get(name)
    if module is None:
        module = await trio.to_thread.run_sync(
            importlib.import_module, name, abandon_on_cancel=True
        )
    return module


# --------------------------------------------------------------------------------------------
# Reading an answer


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


async def sse_lines(chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    """The lines of a text stream, ended by CR, LF or CRLF only, as server-sent events are.

    Not ``aiter_lines()``: it splits like ``str.splitlines()``, also at U+2028, U+2029 and
    U+0085, which JSON carries unescaped (text a model copied from a web page or a PDF): a
    ``data:`` line was cut in two and every retry failed the same way. Each chunk is scanned
    once, so a long line costs what it is long.
    """
    pieces: list[str] = []  # of the line not ended yet
    after_cr = False  # the last chunk ended with CR: a LF opening the next one is part of it
    async for chunk in chunks:
        if after_cr and chunk[:1] == "\n":
            chunk, after_cr = chunk[1:], False
        if not chunk:
            continue
        after_cr = chunk.endswith("\r")
        parts = _LINE_BREAK.split(chunk)
        if len(parts) == 1:
            pieces.append(chunk)
            continue
        pieces.append(parts[0])
        yield "".join(pieces)
        for line in parts[1:-1]:
            yield line
        pieces = [parts[-1]]
    line = "".join(pieces)
    if line:
        yield line


def unicode_only(arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` with any lone surrogate in its strings (keys too) replaced by U+FFFD."""
    encoded = json.dumps(arguments, ensure_ascii=False)
    if is_text(encoded):
        return arguments
    fixed: dict[str, Any] = json.loads(well_formed(encoded))
    return fixed
