"""Drive `hpcgate run --transport streamable-http` with the official Python MCP SDK through a
list of tool calls read as JSON from stdin: `[{"tool": ..., "arguments": {...}}, ...]`.

Usage: calls_client.py URL < calls.json
Prints one JSON list with each call's result (`is_error`, `structured`, `text`); the Rust test
asserts on it.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url = sys.argv[1]
    calls = json.load(sys.stdin)
    results = []
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for call in calls:
                result = await session.call_tool(call["tool"], call["arguments"])
                text = "\n".join(c.text for c in result.content if c.type == "text")
                results.append(
                    {
                        "is_error": bool(result.is_error),
                        "structured": result.structured_content,
                        "text": text,
                    }
                )
    print(json.dumps(results))


asyncio.run(main())
