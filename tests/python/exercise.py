"""What every transport must do for the official Python MCP SDK: list tools, create an instance,
write and read a file, and get a policy denial back as a tool error. Returns the JSON report the
Rust tests assert on."""

import json

from mcp import ClientSession


async def exercise(session: ClientSession, instance: str, content: str) -> str:
    init = await session.initialize()
    tools = await session.list_tools()
    created = await session.call_tool("create_instance", {"instance_id": instance})
    written = await session.call_tool(
        "write_file", {"instance_id": instance, "path": "hello.txt", "content": content}
    )
    read_back = await session.call_tool("read_file", {"instance_id": instance, "path": "hello.txt"})
    denied = await session.call_tool(
        "write_file", {"instance_id": instance, "path": ".git/config", "content": "x"}
    )
    return json.dumps(
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
