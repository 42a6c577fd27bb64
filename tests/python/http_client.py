"""Drive `hpcgate run --transport streamable-http` with the official Python MCP SDK.

Usage: http_client.py URL
The gateway is already listening at URL (the Rust test starts it). Prints one JSON object with
what the client saw; the Rust test asserts on it.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url = sys.argv[1]
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            tools = await session.list_tools()
            created = await session.call_tool("create_instance", {"instance_id": "pyhttp"})
            written = await session.call_tool(
                "write_file", {"instance_id": "pyhttp", "path": "hello.txt", "content": "over http"}
            )
            read_back = await session.call_tool("read_file", {"instance_id": "pyhttp", "path": "hello.txt"})
            denied = await session.call_tool(
                "write_file", {"instance_id": "pyhttp", "path": ".git/config", "content": "x"}
            )
    print(
        json.dumps(
            {
                "server": init.server_info.name,
                "tools": sorted(t.name for t in tools.tools),
                "created_error": created.is_error,
                "written_error": written.is_error,
                "read_content": (read_back.structured_content or {}).get("content"),
                "denied_error": denied.is_error,
                "denied_text": denied.content[0].text if denied.content else "",
            }
        )
    )


asyncio.run(main())
