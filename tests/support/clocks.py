"""Virtual time for tests whose runs talk to a real server on 127.0.0.1.

trio's autojump (``MockClock(autojump_threshold=T)``) jumps to the next deadline once every task
has been idle for T seconds of real time. A request still in flight to a server that a loaded
machine answers late then sees virtual time leap under it (to a run's deadline, or past the
moment a test waits for); so does work in a worker thread (the SDKs probe the platform in one
before a client's first request). :func:`jump_when_idle` jumps only while no task waits on a
socket or on a thread of trio's default limiter (the one ``trio.to_thread`` and anyio use
unless told otherwise): a backoff or retry-after sleep is skipped at once, a request in flight
never has time pass under it, however slow the machine. Threads started on a limiter of their
own (a run's sync tools) are not seen: code that waits on them must not run under this clock.

Use it with a ``MockClock()`` that does not autojump itself::

    @pytest.fixture
    def quiet_clock() -> trio.testing.MockClock:
        return trio.testing.MockClock()  # pytest-trio runs the test on it


    async def test_x(quiet_clock, nursery):
        nursery.start_soon(jump_when_idle, quiet_clock)
"""

from __future__ import annotations

import math
from typing import NoReturn

import trio
import trio.testing


def _socket_waits() -> int:
    """Tasks waiting to read or write a file descriptor (trio's own wakeup socket included)."""
    io = trio.lowlevel.current_statistics().io_statistics
    return int(getattr(io, "tasks_waiting_read", 0)) + int(getattr(io, "tasks_waiting_write", 0))


async def jump_when_idle(clock: trio.testing.MockClock, *, poll: float = 0.01) -> NoReturn:
    """Jump ``clock`` to the next deadline whenever every task is blocked, none of them waits on
    a socket beyond those waiting when this started (trio's own) and no worker thread of the
    default limiter is running; look again every ``poll`` seconds of real idleness."""
    baseline = _socket_waits()
    threads = trio.to_thread.current_default_thread_limiter()
    while True:
        await trio.testing.wait_all_tasks_blocked(cushion=poll)
        if _socket_waits() > baseline or threads.borrowed_tokens:
            continue  # a request or a thread's work is in flight: its answer comes first
        ahead = trio.lowlevel.current_statistics().seconds_to_next_deadline
        if ahead < math.inf:
            clock.jump(max(0.0, ahead))
