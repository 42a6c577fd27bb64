"""Drive `hpcgate run` over stdio with the official Python MCP SDK (a third-party client).

Usage: stdio_client.py HPCGATE_BINARY CONFIG_FILE HOME_DIR
Prints one JSON object with what the client saw; the Rust test asserts on it.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main() -> None:
    binary, config, home = sys.argv[1:4]
    params = StdioServerParameters(
        command=binary, args=["run", "--config", config], env={"HOME": home, "PATH": "/usr/bin:/bin"}
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            tools = await session.list_tools()
            created = await session.call_tool("create_instance", {"instance_id": "py1"})
            written = await session.call_tool(
                "write_file", {"instance_id": "py1", "path": "hello.txt", "content": "from python"}
            )
            read_back = await session.call_tool("read_file", {"instance_id": "py1", "path": "hello.txt"})
            denied = await session.call_tool(
                "write_file", {"instance_id": "py1", "path": ".git/config", "content": "x"}
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
