"""A FastAPI service that runs an agent tree per request, awaited from asyncio.

`orchestrator.aio.run` hosts trio on uvicorn's asyncio loop, so the endpoint simply awaits the
tree: concurrent requests run concurrently on one loop, the tree's spans nest under the
request's, and the `async def` tool below (an asyncio client the app already holds) runs on
uvicorn's loop. A client that hangs up cancels its run: the endpoint watches for the
disconnect and cancels the task that awaits the tree, which cancels every agent of it.

Needs `pip install fastapi uvicorn` (the `dev` extra has them). Serve it with
`uvicorn examples.fastapi_app:app` (or `python examples/fastapi_app.py`), then
`curl -s localhost:8000/ask -H 'content-type: application/json' -d '{"question": "stock of apples?"}'`.
The model is scripted, so no API key is needed; give the agent a real model to use one.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from orchestrator import Agent, aio, tool
from orchestrator.models import ScriptedModel, text, tool_call


class Inventory:
    """Stands for an asyncio client the application holds (a database pool, an HTTP client)."""

    def __init__(self) -> None:
        self.stock = {"apples": 12, "pears": 0}
        self.delay = 0.05  # a round trip to the database

    async def count(self, item: str) -> int:
        await asyncio.sleep(self.delay)  # asyncio's own sleep: this runs on uvicorn's loop
        return self.stock.get(item, 0)


inventory = Inventory()


@tool
async def stock_of(item: str) -> str:
    """How many of an item are in stock.

    Args:
        item: The item to look up, e.g. "apples".
    """
    return f"{await inventory.count(item)} {item} in stock"


clerk = Agent(
    "clerk",
    "Answer questions about the stock with the stock_of tool.",
    tools=[stock_of],
    model=ScriptedModel([tool_call("stock_of", {"item": "apples"}), text("We have 12 apples.")]),
)

app = FastAPI()


class Question(BaseModel):
    question: str


async def _client_gone(request: Request) -> None:
    """Return when the client disconnects (uvicorn says so once the body has been read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@app.post("/ask")
async def ask(question: Question, request: Request) -> Any:
    run = asyncio.create_task(aio.run(clerk, question.question))
    gone = asyncio.create_task(_client_gone(request))
    await asyncio.wait({run, gone}, return_when=asyncio.FIRST_COMPLETED)
    gone.cancel()
    if not run.done():  # the client hung up: cancel the tree (every agent ends `cancelled`)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        return JSONResponse({"status": "cancelled"}, status_code=499)
    result = run.result()
    return {"status": result.status.value, "answer": result.output, "error": result.error}


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=8000)
