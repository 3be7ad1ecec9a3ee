"""MCP servers as toolsets: ``from orchestrator.mcp import MCPServer``.

The implementation is :mod:`orchestrator.toolsets.mcp`; the ``mcp`` SDK (the
``orchestrator[mcp]`` extra) is loaded only when a run connects a server. See docs/mcp.md.
"""

from __future__ import annotations

from .toolsets.mcp import MCPServer as MCPServer

__all__ = ["MCPServer"]
