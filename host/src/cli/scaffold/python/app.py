"""An hpcgate policy in Python: refuses `submit_job` calls whose command contains a forbidden
fragment. Config: `forbidden` (list of strings).

Replace the logic with your own; keep it a pure function of the config and the call. The
component has no files, network, clock, environment or randomness: `build.sh` builds it with
every WASI import replaced by a trap (`componentize-py --stub-wasi`), so `open()` or
`time.time()` fails the evaluation and hpcgate refuses the call (policies fail closed).

The contract (`wit/policy.wit`) as Python: `configure(settings)` gets the config table as JSON
text and raises `Err(message)` to refuse it; `evaluate(call)` gets a `types.Call` (`phase`,
`via`, `job`, `tenant`, `principal`, `tool`, `server`, `remote_tool`, `instance`, `arguments`
as JSON object text, `read_only`, `usage` as a list of `types.Counter`) and returns
`types.Decision_Allow()`, `types.Decision_Deny(reason)` or
`types.Decision_Rewrite(types.Rewrite(arguments_json, note))`; `log.log(level, message)` is kept
beside the decision.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import log, types


class WitWorld(wit_world.WitWorld):
    forbidden: list = []

    def configure(self, settings: str) -> None:
        config = json.loads(settings)
        unknown = sorted(set(config) - {"forbidden"})
        if unknown:
            raise Err(f'unknown config key `{unknown[0]}`; expected {{"forbidden": ["..."]}}')
        forbidden = config.get("forbidden", [])
        if not isinstance(forbidden, list) or not all(isinstance(f, str) for f in forbidden):
            raise Err('`forbidden` must be a list of strings, like {"forbidden": ["rm -rf"]}')
        WitWorld.forbidden = forbidden

    def evaluate(self, call: types.Call) -> types.Decision:
        if call.phase == types.Phase.LIST or call.tool != "submit_job":
            return types.Decision_Allow()
        command = json.loads(call.arguments).get("command")
        command = command if isinstance(command, str) else ""
        for fragment in WitWorld.forbidden:
            if fragment in command:
                log.log(log.Level.INFO, f"refused a command containing `{fragment}`")
                return types.Decision_Deny(
                    f"commands containing `{fragment}` are not allowed here; "
                    "remove it and submit again"
                )
        return types.Decision_Allow()
