"""hpcgate tools from inside a job: one function per tool this job may use.

    import hpcgate_tools as t
    t.list_directory(path=".")          # -> the tool's structured result, as Python values
    t.read_file(path="data.csv")["content"]

Every call goes to the gateway through the job's own socket ($HPCGATE_TOOLS) or, in a Slurm
job, to the gateway's HTTP listener ($HPCGATE_TOOLS_URL) with the job's own token (read from
$HPCGATE_TOOLS_TOKEN_FILE, sent only in the Authorization header). There it is judged by the
site's policies and recorded in the audit log like an agent's call, as this job
(`via = "job"`). `instance_id` is this job's instance; leave it out. A refused or failed
call raises `ToolError` with the gateway's message (naming the policy and its reason).

Pure standard library: MCP (JSON-RPC over streamable HTTP) with http.client, over a Unix
socket or TCP (TLS for an https:// URL).
"""

import http.client
import inspect
import itertools
import json
import keyword
import os
import socket
import sys
import time
import urllib.parse

__all__ = ["ToolError", "call", "tools"]

PROTOCOL_VERSION = "2025-06-18"
SOCKET = os.environ.get("HPCGATE_TOOLS", "/run/hpcgate/tools.sock")
URL = os.environ.get("HPCGATE_TOOLS_URL")
TOKEN_FILE = os.environ.get("HPCGATE_TOOLS_TOKEN_FILE", "/run/hpcgate/token")
_ids = itertools.count(1)
# How long a call waits for a gateway that is not listening (restarting) before it fails.
RESTART_WAIT_S = 30


class ToolError(Exception):
    """A tool call the gateway refused or that failed; the message says why and what to do."""

    def __init__(self, tool, message, structured=None):
        super().__init__(f"{tool}: {message}")
        self.tool = tool
        self.message = message
        self.structured = structured


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self._path)


def _door():
    """How this job reaches the gateway: (connection factory, path, extra headers, name)."""
    if not URL:
        return (lambda: _UnixConnection(SOCKET)), "/mcp", {}, f"the tools socket `{SOCKET}`"
    url = urllib.parse.urlsplit(URL)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ToolError("hpcgate", f"HPCGATE_TOOLS_URL `{URL}` is not an http(s) URL")
    try:
        with open(TOKEN_FILE, encoding="ascii") as f:
            token = f.read().strip()
    except OSError as e:
        raise ToolError("hpcgate", f"cannot read the job's token `{TOKEN_FILE}` ({e.strerror}); "
                        "it exists only while this job runs") from None
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    return ((lambda: kind(url.hostname, url.port)), url.path or "/",
            {"Authorization": f"Bearer {token}"}, f"the gateway at `{URL}`")


def _post(message, resend=False):
    """One JSON-RPC message; the decoded response, or None for a notification.

    A gateway that is not listening (restarting) is waited for: nothing was sent. Once the
    message may have reached it, it is not sent again, unless `resend` (a message that changes
    nothing): a call the gateway ran would run twice.
    """
    connect, path, extra, name = _door()
    body = json.dumps(message).encode()
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL_VERSION,
        # One connection a call: the door takes a bounded number at once, and a process
        # that kept one between calls would hold a place others of the job wait for.
        "Connection": "close",
        **extra,
    }
    waited_until, pause, resent = None, 0.05, False
    while True:
        conn = connect()
        try:
            conn.connect()
        except (ConnectionRefusedError, FileNotFoundError) as e:
            conn.close()
            now = time.monotonic()
            waited_until = waited_until or now + RESTART_WAIT_S
            if now >= waited_until:
                raise ToolError("hpcgate", f"{name} does not answer ({e}) after "
                                f"{RESTART_WAIT_S} s; it serves only while this job runs "
                                "and the gateway runs") from None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
            continue
        except OSError as e:
            conn.close()
            raise ToolError("hpcgate", f"cannot reach {name} ({e}); "
                            "it serves only while this job runs") from None
        try:
            conn.request("POST", path, body, headers)
            response = conn.getresponse()
            data = response.read()
            break
        except (OSError, http.client.HTTPException) as e:
            if resend and not resent:
                resent = True
                continue
            if resend:
                raise ToolError("hpcgate", f"{name} does not answer ({e}); "
                                "it serves only while this job runs") from None
            raise ToolError("hpcgate", f"the connection to {name} broke during the call ({e}): "
                            "the call may or may not have run (a restarting gateway ends the "
                            "calls in flight); look before calling again") from None
        finally:
            conn.close()
    if response.status == 202 or not data:
        return None
    if response.status != 200:
        raise ToolError("hpcgate", f"HTTP {response.status}: {data.decode(errors='replace')}")
    if response.getheader("Content-Type", "").startswith("text/event-stream"):
        data = _last_sse_data(data)
    reply = json.loads(data)
    if "error" in reply:
        raise ToolError("hpcgate", reply["error"].get("message", str(reply["error"])))
    return reply.get("result")


def _last_sse_data(data):
    last = b"{}"
    for line in data.splitlines():
        if line.startswith(b"data:"):
            last = line[5:].strip() or last
    return last


def _request(method, params, resend=False):
    message = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
    return _post(message, resend)


_initialized = False


def _initialize():
    global _initialized
    if _initialized:
        return
    _request("initialize", {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "hpcgate_tools", "version": "1"},
    }, resend=True)
    _post({"jsonrpc": "2.0", "method": "notifications/initialized"}, resend=True)
    _initialized = True


def call(tool, /, **arguments):
    """Calls `tool` with `arguments`; returns its structured result or raises ToolError."""
    _initialize()
    result = _request("tools/call", {"name": tool, "arguments": arguments})
    structured = result.get("structuredContent")
    text = "\n".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
    if result.get("isError"):
        message = (structured or {}).get("error") if isinstance(structured, dict) else None
        raise ToolError(tool, message or text or "the call failed", structured)
    return structured if structured is not None else text


def tools():
    """The tools this job may use, as the gateway lists them (name, description, schema)."""
    _initialize()
    return _request("tools/list", {}, resend=True).get("tools", [])


def _make(tool):
    name = tool["name"]
    schema = tool.get("inputSchema") or {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    lines = [tool.get("description") or name, "", "Arguments:"]
    for arg, spec in properties.items():
        if arg == "instance_id":
            continue
        kind = spec.get("type", "any") if isinstance(spec, dict) else "any"
        doc = (spec.get("description") or "") if isinstance(spec, dict) else ""
        mark = "required" if arg in required else "optional"
        lines.append(f"  {arg} ({kind}, {mark}): {doc}".rstrip())

    def function(**arguments):
        return call(name, **arguments)

    function.__name__ = name
    function.__qualname__ = name
    function.__doc__ = "\n".join(lines)
    # help() and inspect show the tool's own argument names (keyword-only).
    parameters = [
        inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY,
                          default=inspect.Parameter.empty if arg in required else None)
        for arg in properties
        if arg != "instance_id" and arg.isidentifier() and not keyword.iskeyword(arg)
    ]
    parameters.sort(key=lambda p: p.default is not inspect.Parameter.empty)
    function.__signature__ = inspect.Signature(parameters)
    return function


def _install():
    module = sys.modules[__name__]
    for tool in tools():
        name = tool["name"]
        if name.isidentifier() and not keyword.iskeyword(name) and not hasattr(module, name):
            setattr(module, name, _make(tool))
            __all__.append(name)


_install()
