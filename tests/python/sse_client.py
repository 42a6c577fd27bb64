"""Drive `hpcgate run --transport sse` with the official Python MCP SDK 1.x (the generation that
still has the legacy HTTP+SSE client).

Usage: sse_client.py URL TOKEN
The gateway is already listening (the Rust test starts it); URL is its `/sse` address and TOKEN
the bearer token. Prints one JSON object with what the client saw; the Rust test asserts on it.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.sse import sse_client

from exercise import exercise, field


async def main() -> None:
    url, token = sys.argv[1], sys.argv[2]
    headers = {"Authorization": f"Bearer {token}"}
    async with sse_client(url, headers=headers) as (read, write):
        async with ClientSession(read, write) as session:
            report = json.loads(await exercise(session, "pysse", "over sse"))
            job = await session.call_tool(
                "submit_job", {"instance_id": "pysse", "command": "echo hi", "timeout": 30}
            )
            structured = field(job, "structured_content", "structuredContent") or {}
            report["job_status"] = structured.get("job", {}).get("status")
            report["job_text"] = job.content[0].text if job.content else ""
    print(json.dumps(report))


asyncio.run(main())
