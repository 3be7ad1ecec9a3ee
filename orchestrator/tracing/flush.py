"""Bounded flushes: a blocking OpenTelemetry call run in a daemon thread, waited for with a deadline.

A dead collector blocked ``TracerProvider.shutdown()`` for 6.5 s (HTTP) and 7.4 s (gRPC), and
``BatchSpanProcessor.force_flush`` ignores its timeout; so the runtime (``run_sync``) and the
exporter setup both go through :func:`run_bounded`. It needs only the OpenTelemetry API.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import cast

__all__ = ["flush_tracer_provider", "run_bounded"]

_logger = logging.getLogger("orchestrator.tracing")

# A flush its caller gave up waiting for, still running, by id of its provider or setup: the
# next flush of the same one does not start another thread nor wait again while the collector
# is not taking the last one (a service calling run_sync against a dead collector paid seconds
# per run and piled up threads). Flushes that merely overlap are not affected.
_ABANDONED: dict[int, threading.Thread] = {}
_ABANDONED_LOCK = threading.Lock()


def run_bounded(
    fn: Callable[[], object], timeout: float, name: str, *, one_at_a_time: object = None
) -> bool:
    """Run ``fn`` in a daemon thread and wait at most ``timeout`` seconds.

    Returns True if ``fn`` finished in time without raising and did not return ``False``. A
    thread still running is abandoned: it is a daemon, so it cannot keep the process alive, and
    the exporters it may be blocked in have their own request timeouts. With
    ``one_at_a_time``, returns False at once while an earlier call for that key still runs.
    """
    outcome: list[bool] = []

    def target() -> None:
        try:
            outcome.append(fn() is not False)
        except Exception:
            _logger.exception("%s failed", name)
            outcome.append(False)

    key = id(one_at_a_time)
    if one_at_a_time is not None:
        with _ABANDONED_LOCK:
            earlier = _ABANDONED.get(key)
            if earlier is not None and earlier.is_alive():
                _logger.warning("%s skipped: an earlier one has not finished", name)
                return False
            _ABANDONED.pop(key, None)
    thread = threading.Thread(target=target, name=f"orchestrator-{name}", daemon=True)
    thread.start()
    thread.join(max(0.0, timeout))
    if thread.is_alive():
        _logger.warning("%s did not finish within %.1f s; continuing without it", name, timeout)
        if one_at_a_time is not None:
            with _ABANDONED_LOCK:
                _ABANDONED[key] = thread
        return False
    return bool(outcome and outcome[0])


def flush_tracer_provider(tracer_provider: object | None = None, timeout: float = 2.0) -> bool:
    """Flush any tracer provider that has ``force_flush``, waiting at most ``timeout`` seconds.

    For code that holds a provider but not a :class:`TracingSetup` (``run_sync`` flushing the
    global provider, say). ``None`` means the global provider; providers without
    ``force_flush`` (the API's no-op one) count as flushed.
    """
    if tracer_provider is None:
        from opentelemetry import trace

        tracer_provider = trace.get_tracer_provider()
    flush = getattr(tracer_provider, "force_flush", None)
    if flush is None:
        return True
    return run_bounded(
        cast(Callable[[], object], flush), timeout, "trace flush", one_at_a_time=tracer_provider
    )
