"""Drive `hpcgate run --transport streamable-http` with the official Python MCP SDK through a
list of tool calls read as JSON from stdin, letting the SDK validate every result against the
tool's `outputSchema` (`ClientSession.call_tool` does so for a result that is not an error).

Usage: schemas_client.py URL < calls.json
Each call is `{"tool": ..., "arguments": {...}}`, with `"job_from": N` to take the job id of
the N-th call's result. Prints one JSON object: the tools listed with an `outputSchema`, and for
each call whether it failed, whether the SDK validated it, and the SDK's complaint if the
result did not conform (the Rust test asserts on it).
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
    structured = []
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            schemas = {t.name: t.output_schema for t in listed.tools}
            for call in calls:
                arguments = dict(call["arguments"])
                if "job_from" in call:
                    arguments["job_id"] = structured[call["job_from"]]["job"]["job_id"]
                tool = call["tool"]
                invalid = None
                try:
                    result = await session.call_tool(tool, arguments)
                except RuntimeError as e:
                    # The SDK's own check: structured content missing or not conforming.
                    invalid = str(e)
                    result = None
                is_error = bool(result.is_error) if result else None
                results.append(
                    {
                        "tool": tool,
                        "is_error": is_error,
                        "invalid": invalid,
                        "validated": result is not None
                        and not is_error
                        and schemas.get(tool) is not None,
                    }
                )
                structured.append(result.structured_content if result else None)
    report = {
        "output_schemas": sorted(name for name, schema in schemas.items() if schema is not None),
        "results": results,
    }
    print(json.dumps(report))


asyncio.run(main())
