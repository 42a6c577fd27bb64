// An hpcgate policy in JavaScript: refuses `submit_job` calls whose command contains a forbidden
// fragment. Config: `forbidden` (list of strings).
//
// Replace the logic with your own; keep it a pure function of the config and the call. The
// component has no files, network, clock, environment or randomness: `build.sh` builds it with
// every WASI import replaced by a trap, so `Date.now()` or `Math.random()` fails the evaluation
// and hpcgate refuses the call (policies fail closed).
//
// The contract (`wit/policy.wit`) as JavaScript:
//   configure(settings)  settings: the config table as JSON text; throw a string to refuse it
//   evaluate(call)       call: {phase: "list" | "call", via, job, tenant, principal, tool,
//                        server, remoteTool, instance, arguments (JSON object text), readOnly,
//                        usage: [{name, value}]}; returns {tag: "allow"},
//                        {tag: "deny", val: reason} or
//                        {tag: "rewrite", val: {arguments: JSON text, note}}
//   log(level, message)  level: "debug" | "info" | "warn"; kept beside the decision

import { log } from "hpcgate:policy/log@0.2.0";

let forbidden = [];

export function configure(settings) {
  const config = JSON.parse(settings);
  for (const key of Object.keys(config)) {
    if (key !== "forbidden") {
      throw `unknown config key \`${key}\`; expected {"forbidden": ["..."]}`;
    }
  }
  const list = config.forbidden ?? [];
  if (!Array.isArray(list) || !list.every((f) => typeof f === "string")) {
    throw `\`forbidden\` must be a list of strings, like {"forbidden": ["rm -rf"]}`;
  }
  forbidden = list;
}

export function evaluate(call) {
  if (call.phase === "list" || call.tool !== "submit_job") {
    return { tag: "allow" };
  }
  const args = JSON.parse(call.arguments);
  const command = typeof args.command === "string" ? args.command : "";
  const fragment = forbidden.find((f) => command.includes(f));
  if (fragment !== undefined) {
    log("info", `refused a command containing \`${fragment}\``);
    return {
      tag: "deny",
      val: `commands containing \`${fragment}\` are not allowed here; remove it and submit again`,
    };
  }
  return { tag: "allow" };
}
