"""The example rules in Python (see README, "Policies in JavaScript and Python"); the same rules
as `rules-rust/`, `rules.rego`, `rules.cedar` and `rules.js`, checked by the one `cases.jsonl`.
Build: `scripts/componentize.sh python examples/policies/rules.py
examples/policies/rules-python.wasm`.

- no `rm -rf` in a `submit_job` command;
- `/workspace/inputs` is read-only: a tool that writes may not take a `path` under it;
- at most `max_gpus[tenant]` GPUs per job (`resources.gpus`) for the tenants listed.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import types


def under_inputs(path: str) -> bool:
    """`/workspace/inputs` or below it, absolute or relative to `/workspace`."""
    return any(path == root or path.startswith(root + "/") for root in ("/workspace/inputs", "inputs"))


def deny(reason: str) -> types.Decision:
    return types.Decision_Deny(reason)


class WitWorld(wit_world.WitWorld):
    max_gpus: dict = {}

    def configure(self, settings: str) -> None:
        config = json.loads(settings)
        unknown = sorted(set(config) - {"max_gpus"})
        if unknown:
            raise Err(f'unknown config key `{unknown[0]}`; expected {{"max_gpus": {{"<tenant>": <GPUs>}}}}')
        caps = config.get("max_gpus", {})
        if not isinstance(caps, dict) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in caps.values()
        ):
            raise Err('`max_gpus` must map tenants to GPU counts, like {"chem": 4}')
        WitWorld.max_gpus = caps

    def evaluate(self, call: types.Call) -> types.Decision:
        args = json.loads(call.arguments)
        command = args.get("command")
        if call.tool == "submit_job" and isinstance(command, str) and "rm -rf" in command:
            return deny("a job command may not contain `rm -rf`")
        path = args.get("path")
        if not call.read_only and isinstance(path, str) and under_inputs(path):
            return deny(f"`{path}` is under the read-only `/workspace/inputs`")
        cap = WitWorld.max_gpus.get(call.tenant)
        resources = args.get("resources")
        if call.tool == "submit_job" and cap is not None and isinstance(resources, dict):
            gpus = resources.get("gpus")
            if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 0 and gpus > cap:
                return deny(f"tenant `{call.tenant}` may use at most {cap} GPUs per job, not {gpus}")
        return types.Decision_Allow()
