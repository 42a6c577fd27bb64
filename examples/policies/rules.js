// The example rules in JavaScript (see README, "Policies in JavaScript and Python"); the same
// rules as `rules-rust/`, `rules.rego`, `rules.cedar` and `rules.py`, checked by the one
// `cases.jsonl`. Build: `scripts/componentize.sh js examples/policies/rules.js
// examples/policies/rules-js.wasm`.
//
// - no `rm -rf` in a `submit_job` command;
// - `/workspace/inputs` is read-only: a tool that writes may not take a `path` under it;
// - at most `max_gpus[tenant]` GPUs per job (`resources.gpus`) for the tenants listed.

let maxGpus = {};

export function configure(settings) {
  const config = JSON.parse(settings);
  for (const key of Object.keys(config)) {
    if (key !== "max_gpus") {
      throw `unknown config key \`${key}\`; expected {"max_gpus": {"<tenant>": <GPUs>}}`;
    }
  }
  const caps = config.max_gpus ?? {};
  if (typeof caps !== "object" || Array.isArray(caps) ||
      !Object.values(caps).every((n) => Number.isInteger(n) && n >= 0)) {
    throw "`max_gpus` must map tenants to GPU counts, like {\"chem\": 4}";
  }
  maxGpus = caps;
}

/** `/workspace/inputs` or below it, absolute or relative to `/workspace`. */
function underInputs(path) {
  return ["/workspace/inputs", "inputs"].some(
    (root) => path === root || path.startsWith(root + "/"),
  );
}

export function evaluate(call) {
  const args = JSON.parse(call.arguments);
  if (call.tool === "submit_job" && typeof args.command === "string" &&
      args.command.includes("rm -rf")) {
    return { tag: "deny", val: "a job command may not contain `rm -rf`" };
  }
  if (!call.readOnly && typeof args.path === "string" && underInputs(args.path)) {
    return { tag: "deny", val: `\`${args.path}\` is under the read-only \`/workspace/inputs\`` };
  }
  if (call.tool === "submit_job" && Object.hasOwn(maxGpus, call.tenant)) {
    const max = maxGpus[call.tenant];
    const gpus = args.resources?.gpus;
    if (Number.isInteger(gpus) && gpus > max) {
      return {
        tag: "deny",
        val: `tenant \`${call.tenant}\` may use at most ${max} GPUs per job, not ${gpus}`,
      };
    }
  }
  return { tag: "allow" };
}
