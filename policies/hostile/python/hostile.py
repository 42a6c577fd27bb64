"""A Python policy that misbehaves on request (built by the e2e tests with
scripts/componentize.sh, as `hpcgate policy new --lang python` builds one). Its config's
`behaviour` picks what `evaluate` does with a call of the tool named `on` (default `submit_job`;
any other call, and the list phase, is allowed, so a test can see the engine keep serving):

| `behaviour` | what it does                                                        |
|-------------|---------------------------------------------------------------------|
| `allow`     | behaves                                                             |
| `spin`      | `while True: pass`                                                  |
| `hog`       | keeps 1 MiB blocks until something stops it                         |
| `file`      | denies with the length of `/etc/passwd`, read with `open()`         |
| `list`      | denies with the entries of `/`                                      |
| `clock`     | denies with `time.time()` and `time.monotonic()`                    |
| `env`       | denies with `os.environ`                                            |
| `network`   | denies with what a TCP connection to 127.0.0.1:`port` gave          |
| `random`    | denies with `os.urandom(8)`                                         |

A probe that raises denies with `error: <exception>`; one that cannot run at all (a trap where
WASI was stubbed out) faults, which denies the call too.
"""

import json

import wit_world
from wit_world.imports import types


def probe(behaviour: str, settings: dict):
    if behaviour == "file":
        with open("/etc/passwd", "rb") as f:
            return len(f.read())
    if behaviour == "list":
        import os

        return os.listdir("/")
    if behaviour == "clock":
        import time

        return [time.time(), time.monotonic()]
    if behaviour == "env":
        import os

        return dict(os.environ)
    if behaviour == "network":
        import socket

        with socket.create_connection(("127.0.0.1", settings.get("port", 9)), timeout=1) as s:
            s.sendall(b"hello from a policy\n")
            return "connected"
    if behaviour == "random":
        import os

        return os.urandom(8).hex()
    raise ValueError(f"unknown behaviour {behaviour}")


class WitWorld(wit_world.WitWorld):
    settings: dict = {}

    def configure(self, settings: str) -> None:
        WitWorld.settings = json.loads(settings)

    def evaluate(self, call: types.Call) -> types.Decision:
        behaviour = WitWorld.settings.get("behaviour", "allow")
        trigger = WitWorld.settings.get("on", "submit_job")
        if behaviour == "allow" or call.tool != trigger or call.phase != types.Phase.CALL:
            return types.Decision_Allow()
        if behaviour == "spin":
            while True:
                pass
        if behaviour == "hog":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        try:
            seen = probe(behaviour, WitWorld.settings)
        except Exception as e:  # noqa: BLE001 - the report is the point
            seen = f"error: {type(e).__name__}: {e}"
        return types.Decision_Deny(json.dumps({"seen": seen}))
