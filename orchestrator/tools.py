"""What a tool author uses: ``@tool``, :class:`Tool`, the :class:`ToolContext` a tool may ask
for, and :class:`ToolError` for a failure worded for the model; and the hosted tools :class:`WebSearch` and :class:`WebFetch`,
which the provider runs.

A facade: the names live in :mod:`orchestrator.core.tools` and :mod:`orchestrator.core.errors`
(the top-level ``orchestrator`` package exports them too)::

    from orchestrator.tools import ToolContext, ToolError, tool

    @tool
    def lookup(ctx: ToolContext, key: str) -> str:
        "Look a key up in the table the run was given: run(..., deps=table)."
        table = ctx.deps
        if key not in table:
            raise ToolError(f"no key {key!r}; the keys are {', '.join(sorted(table))}")
        return str(table[key])
"""

from __future__ import annotations

from .core.errors import ToolError as ToolError
from .core.hosted import WebFetch as WebFetch
from .core.hosted import WebSearch as WebSearch
from .core.tools import Tool as Tool
from .core.tools import ToolContext as ToolContext
from .core.tools import tool as tool

__all__ = ["Tool", "ToolContext", "ToolError", "WebFetch", "WebSearch", "tool"]
