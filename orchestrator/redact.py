"""Secret redaction for everything that leaves a tool or a model call.

Tool results, error messages, span attributes and trace files can all echo a secret (a tool's
exception that prints its own config, an SDK error that quotes a header). :func:`redact` replaces
the values of the environment's ``*_KEY``, ``*_TOKEN``, ``*_SECRET`` and ``*_PASSWORD`` variables
and anything shaped like an API key or bearer token with ``[REDACTED]``.
"""

from __future__ import annotations

import json
import os
import re

__all__ = ["REDACTED", "redact"]

REDACTED = "[REDACTED]"
_SECRET_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_APIKEY")
_MIN_SECRET_LEN = 8
_PATTERNS = re.compile(
    r"(sk-ant-[A-Za-z0-9_\-]{8,}|(?i:bearer)\s+[A-Za-z0-9._\-~+/=]{8,}|x-api-key[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9_\-]{8,})"
)

_cache_key: tuple[str, ...] = ()
_cache_values: tuple[str, ...] = ()


def _secret_values() -> tuple[str, ...]:
    """Values of secret-looking environment variables, longest first (cached per value set)."""
    global _cache_key, _cache_values
    values = tuple(
        v
        for k, v in os.environ.items()
        if len(v) >= _MIN_SECRET_LEN and k.upper().endswith(_SECRET_SUFFIXES)
    )
    if values != _cache_key:
        _cache_key = values
        # a secret quoted inside JSON (content capture, error bodies) may appear escaped
        variants = {
            form
            for v in values
            for form in (v, json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1])
        }
        _cache_values = tuple(sorted(variants, key=len, reverse=True))
    return _cache_values


def redact(text: str) -> str:
    """``text`` with every known secret value and key-shaped token replaced by ``[REDACTED]``."""
    for value in _secret_values():
        if value in text:
            text = text.replace(value, REDACTED)
    if "sk-" in text or "earer" in text or "api-key" in text.lower():
        text = _PATTERNS.sub(REDACTED, text)
    return text
