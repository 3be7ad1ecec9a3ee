"""Compatibility path: the same names as :mod:`orchestrator.core.redact`, where they now live."""

from __future__ import annotations

from .core.redact import REDACTED as REDACTED
from .core.redact import RUN_SECRETS as RUN_SECRETS
from .core.redact import redact as redact
from .core.redact import secret_values as secret_values

__all__ = [
    "REDACTED",
    "RUN_SECRETS",
    "redact",
    "secret_values",
]
