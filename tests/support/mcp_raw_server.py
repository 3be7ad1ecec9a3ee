"""A hand-written MCP server over stdio for the tests that need replies no SDK server sends.

    python tests/support/mcp_raw_server.py [--variant NAME]

It speaks JSON-RPC line by line (the 2025-11-25 handshake; ``server/discover`` is refused, so
clients fall back to ``initialize``) and answers ``tools/call`` as the tool's name says:
``echo`` says its ``text`` back; ``refuse`` answers with the JSON-RPC error ``-32000`` (the code
the SDK also uses for a closed connection) and a message of its own; ``surrogate`` and
``bad_utf8`` answer with a line no JSON-RPC reader can take (a lone surrogate escape, bytes
that are not UTF-8); ``die`` exits mid-call. Variants change the tool list: ``default``;
``bad-schema`` (also a tool whose input schema is not an object and one with no schema);
``duplicate`` (``echo`` listed twice alike); ``duplicate-unlike`` (``echo`` listed twice, with
two descriptions).
"""

import argparse
import json
import os
import sys

_TOOLS = ["echo", "refuse", "surrogate", "bad_utf8", "die"]


def tool(name: str) -> dict[str, object]:
    schema: dict[str, object] = {"type": "object", "properties": {}}
    if name == "echo":
        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return {"name": name, "description": f"The {name} tool.", "inputSchema": schema}


def tools(variant: str) -> list[dict[str, object]]:
    listed = [tool(name) for name in _TOOLS]
    if variant == "bad-schema":
        listed.append({"name": "stringly", "inputSchema": {"type": "string"}})
        listed.append({"name": "schemaless", "description": "No input schema at all."})
    if variant == "duplicate":
        listed.append(tool("echo"))
    if variant == "duplicate-unlike":
        listed.append({**tool("echo"), "description": "Another echo."})
    return listed


def write(data: bytes) -> None:
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()


def answer(request_id: object, result: object) -> None:
    write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode())


def error(request_id: object, code: int, message: str) -> None:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    write(json.dumps(body).encode())


def call(request_id: object, name: str, arguments: dict[str, object]) -> None:
    def text(value: str) -> dict[str, object]:
        return {"content": [{"type": "text", "text": value}], "isError": False}

    if name == "echo":
        answer(request_id, text(str(arguments.get("text", ""))))
    elif name == "refuse":
        error(request_id, -32000, "quota exhausted for today; try tomorrow")
    elif name == "surrogate":
        head = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": text("SURROGATE")})
        write(head.replace("SURROGATE", "\\ud800 lone").encode())
    elif name == "bad_utf8":
        head = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": text("BYTES")})
        write(head.encode().replace(b"BYTES", b"\xff\xfe not utf-8"))
    elif name == "die":
        print("dying now: the test asked for it", file=sys.stderr, flush=True)
        os._exit(7)
    else:
        error(request_id, -32602, f"unknown tool {name}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", default="default")
    args = parser.parse_args()
    print(f"raw test server {args.variant} starting (pid {os.getpid()})", file=sys.stderr)
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:  # a notification
            continue
        if method == "initialize":
            answer(
                request_id,
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "raw-tests", "version": "1"},
                },
            )
        elif method == "tools/list":
            answer(request_id, {"tools": tools(args.variant)})
        elif method == "tools/call":
            params = message.get("params") or {}
            call(request_id, params.get("name", ""), params.get("arguments") or {})
        elif method == "ping":
            answer(request_id, {})
        else:
            error(request_id, -32601, f"method not found: {method}")


if __name__ == "__main__":
    main()
