"""Drive a proxied tool through `hpcgate run` over stdio with the official Python MCP SDK.

Usage: proxy_client.py HPCGATE_BINARY CONFIG_FILE HOME_DIR
The config proxies `mcp-test-server` as `t`. Prints one JSON object with what the client saw;
the Rust test asserts on it. The SDK rejects results without `resultType` on the 2026-07-28
revision, so a forwarded result that parses at all has one.
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
            names = []
            for _ in range(200):  # discovery runs in the background
                names = sorted(t.name for t in (await session.list_tools()).tools)
                if "t__image" in names:
                    break
                await asyncio.sleep(0.05)
            await session.call_tool("create_instance", {"instance_id": "py1"})
            image = await session.call_tool("t__image", {"instance_id": "py1"})
            failing = await session.call_tool("t__failing", {"instance_id": "py1"})
            add = await session.call_tool("t__add", {"instance_id": "py1", "a": 1, "b": 2})
    print(
        json.dumps(
            {
                "protocol": str(init.protocol_version),
                "tools": names,
                "image_types": [c.type for c in image.content],
                "image_error": image.is_error,
                "image_structured": image.structured_content,
                "failing_error": failing.is_error,
                "failing_text": failing.content[0].text if failing.content else "",
                "add_structured": add.structured_content,
            }
        )
    )


asyncio.run(main())
