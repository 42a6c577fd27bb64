# The example rules in Rego, for `stock:rego` (see README, "Rego and Cedar"); the same rules as
# `rules-rust/` and `rules.cedar`, checked by the one `cases.jsonl`.
package hpcgate

import rego.v1

# No `rm -rf` in a submitted job's command.
deny contains msg if {
	input.tool == "submit_job"
	contains(input.arguments.command, "rm -rf")
	msg := "a job command may not contain `rm -rf`"
}

# `/workspace/inputs` is read-only: a tool that writes may not take a `path` under it.
deny contains msg if {
	not input.read_only
	under_inputs(input.arguments.path)
	msg := sprintf("`%s` is under the read-only `/workspace/inputs`", [input.arguments.path])
}

under_inputs(path) if path in {"/workspace/inputs", "inputs"}

under_inputs(path) if startswith(path, "/workspace/inputs/")

under_inputs(path) if startswith(path, "inputs/")

# At most `data.max_gpus[tenant]` GPUs per job for the tenants listed there.
deny contains msg if {
	input.tool == "submit_job"
	max := data.max_gpus[input.tenant]
	input.arguments.resources.gpus > max
	msg := sprintf("tenant `%s` may use at most %d GPUs per job, not %d", [input.tenant, max, input.arguments.resources.gpus])
}
