"""Drive `hpcgate run` over stdio with the official Python MCP SDK (a third-party client).

Usage: stdio_client.py HPCGATE_BINARY CONFIG_FILE HOME_DIR
Prints one JSON object with what the client saw; the Rust test asserts on it.
"""

import asyncio
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from exercise import exercise


async def main() -> None:
    binary, config, home = sys.argv[1:4]
    params = StdioServerParameters(
        command=binary, args=["run", "--config", config], env={"HOME": home, "PATH": "/usr/bin:/bin"}
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            report = await exercise(session, "py1", "from python")
    print(report)


asyncio.run(main())
