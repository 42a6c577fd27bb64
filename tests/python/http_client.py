"""Drive `hpcgate run --transport streamable-http` with the official Python MCP SDK.

Usage: http_client.py URL
The gateway is already listening at URL (the Rust test starts it). Prints one JSON object with
what the client saw; the Rust test asserts on it.
"""

import asyncio
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from exercise import exercise


async def main() -> None:
    url = sys.argv[1]
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            report = await exercise(session, "pyhttp", "over http")
    print(report)


asyncio.run(main())
