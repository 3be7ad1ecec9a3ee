"""Message content on spans: off unless the user opts in, and never with secrets in it.

Kept apart from the exporter setup so that the runtime can ask "may I record content?" without
importing the OpenTelemetry SDK.
"""

from __future__ import annotations

import json
import os
from typing import Final

from ..core.messages import well_formed
from ..core.redact import redact

__all__ = ["CONTENT_CAPTURE_ENV", "content_capture_enabled", "content_for_span"]

CONTENT_CAPTURE_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CONTENT_ON: Final = frozenset({"true", "1", "yes", "on", "span_only", "span_and_event"})


def content_capture_enabled() -> bool:
    """Whether message content (prompts, answers, tool arguments) may be put on spans.

    Read from the standard GenAI variable ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
    on every call (it is one dictionary lookup), so tests and long-lived programs can flip it.
    ``true``, ``SPAN_ONLY`` and ``SPAN_AND_EVENT`` turn it on; anything else, including
    ``EVENT_ONLY`` (this library records no GenAI events) and an unset variable, leaves it off.
    Off is the default because traces travel to shared backends and content is where users'
    data and leaked credentials live.
    """
    return os.environ.get(CONTENT_CAPTURE_ENV, "").strip().lower() in _CONTENT_ON


def content_for_span(value: object, *, max_chars: int = 16_384) -> str:
    """``value`` as a string fit for a span attribute: JSON, secrets redacted, length-capped.

    Strings pass through as they are; anything else is dumped as compact JSON (``str()`` for
    what JSON cannot hold) so the GenAI "parts" structures stay machine-readable. Redaction
    runs before truncation, so a secret cut in half by the cap cannot slip past the pattern
    match. Backends reject or silently cut huge attributes; the cap keeps a single pasted
    document from doing that to the whole span.
    """
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError, RecursionError) as exc:
            # not JSON (keys that are tuples, a value holding itself, data nested past the
            # stack): a note instead of the content, never a failed span or turn
            text = f"[content not recorded: {type(exc).__name__}: {str(exc)[:200]}]"
    # a lone surrogate (a bad escape in a model's reply, a file name) cannot be encoded: the
    # exporter would drop the attribute and log a traceback for every batch
    text = redact(well_formed(text))
    if len(text) > max_chars:
        cut = len(text) - max_chars
        text = f"{text[:max_chars]}…[{cut} chars truncated]"
    return text
