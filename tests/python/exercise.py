"""What every transport must do for the official Python MCP SDK: list tools, create an instance,
write and read a file, and get a policy denial back as a tool error. Returns the JSON report the
Rust tests assert on."""

import json

from mcp import ClientSession


def field(obj, snake: str, camel: str):
    """A result field by its mcp 2.x name, else its mcp 1.x one (the SSE test uses 1.x)."""
    return getattr(obj, snake, None) if hasattr(obj, snake) else getattr(obj, camel)


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
            "server": field(init, "server_info", "serverInfo").name,
            "tools": sorted(t.name for t in tools.tools),
            "created_error": field(created, "is_error", "isError"),
            "written_error": field(written, "is_error", "isError"),
            "read_content": (field(read_back, "structured_content", "structuredContent") or {}).get(
                "content"
            ),
            "denied_error": field(denied, "is_error", "isError"),
            "denied_text": denied.content[0].text if denied.content else "",
        }
    )
