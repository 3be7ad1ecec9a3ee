"""Awaiting agent trees from a plain asyncio program (`asyncio.run`), with no API key.

`await aio.run(...)` runs a tree on the running asyncio loop; `aio.open_run(...)` gives a handle
whose events are read with `async for`. Three questions are asked at once (one loop hosts
them all), and the `async def` tool uses asyncio itself (`asyncio.sleep`, `asyncio.timeout`).
Run it with `python examples/asyncio_script.py`.
"""

from __future__ import annotations

import asyncio
import time

from orchestrator import Agent, aio, tool
from orchestrator.models import ScriptedModel, text, tool_call


@tool
async def weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: The city's name.
    """
    async with asyncio.timeout(5):  # asyncio's own API: this tool runs on the asyncio loop
        await asyncio.sleep(0.2)  # a call to a weather service
    return f"sunny in {city}"


forecaster = Agent(
    "forecaster",
    "Answer with the weather tool.",
    tools=[weather],
    model=ScriptedModel([tool_call("weather", {"city": "Lyon"}), text("It is sunny in Lyon.")]),
)


async def main() -> None:
    started = time.perf_counter()
    results = await asyncio.gather(*(aio.run(forecaster, "Weather in Lyon?") for _ in range(3)))
    elapsed = time.perf_counter() - started
    print(f"3 runs ({', '.join(r.status.value for r in results)}) in {elapsed:.2f}s")
    print(results[0].output)

    async with aio.open_run(forecaster, "Weather in Lyon?") as handle:
        async for event in handle.events:
            print(" ", type(event).__name__, getattr(event, "path", ""))
        result = await handle.result()
    if result.error:
        print("error:", result.error)


if __name__ == "__main__":
    asyncio.run(main())
