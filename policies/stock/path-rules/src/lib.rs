//! `stock:path-rules`: which sandbox-view paths a tool call may read or write.
//!
//! Every value of an argument named in `path_arguments` (default `path`, `paths`, `source`,
//! `destination`), at any nesting depth and inside lists, is normalised in the sandbox view
//! (relative paths joined to `/workspace`, `.` and `..` resolved lexically). A read-only tool is
//! checked against `deny_read`; any other tool against `deny_read` and then `deny_write`. A match
//! denies, naming the argument, the normalised path and the glob.
//!
//! Decisions the contract leaves open, taken fail-closed:
//! - a value under a path argument name that is not a string (a number, `null`, an object, a
//!   list inside the list) is denied: the policy cannot tell what it would touch;
//! - globs follow [`hpcgate_policy_sdk::glob`], where a trailing `/**` also matches the directory
//!   itself, so `/workspace/inputs/**` protects `inputs` from being moved or deleted whole;
//! - a glob anchored at `/` also protects the directories *above* what it matches from a tool
//!   that is not read-only: with `/workspace/inputs/**` denied, `move_path` or `delete_path` of
//!   `/workspace/data` is fine but of `/workspace` is refused, since it would carry `inputs`
//!   along ([`Glob::matches_below`]). A name-based glob (`**/.git/**`) cannot do this without
//!   seeing the files — any directory may contain a `.git` — so it protects by name only: a
//!   moved `.git` is still called `.git`, but a recursive `delete_path` of its parent is not
//!   caught. Use anchored globs for what must never be deleted.
//!
//! The list phase (`arguments` is `{}`) has no paths, so every tool is shown.
//!
//! ```toml
//! [policies.config]
//! path_arguments = ["path", "paths", "source", "destination"]
//! deny_read = ["**/.ssh/**"]
//! deny_write = ["**/.git/**", "/workspace/inputs/**"]
//! ```

use hpcgate_policy_sdk::glob::{Glob, GlobSet};
use hpcgate_policy_sdk::{Call, Decision, Policy, args, path};
use serde::Deserialize;

/// The `config` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRules {
    /// Names of arguments that hold paths (exact names, at any depth).
    #[serde(default = "default_path_arguments")]
    path_arguments: Vec<String>,
    /// Globs over normalised paths that no tool may touch.
    #[serde(default)]
    deny_read: GlobSet,
    /// Globs over normalised paths that only read-only tools may touch.
    #[serde(default)]
    deny_write: GlobSet,
}

fn default_path_arguments() -> Vec<String> {
    ["path", "paths", "source", "destination"]
        .map(String::from)
        .to_vec()
}

impl Policy for PathRules {
    fn configure(settings: &str) -> Result<Self, String> {
        args::parse_settings(settings)
    }

    fn evaluate(&self, call: &Call) -> Decision {
        for found in args::find_named(&call.arguments, &self.path_arguments) {
            let location = &found.location;
            let Some(raw) = found.as_str() else {
                return Decision::deny(format!(
                    "argument `{location}` is {}, not a path; pass a path string or omit it",
                    args::describe_kind(found.value)
                ));
            };
            let normalized = path::normalize(raw);
            if let Some(glob) = self.deny_read.first_match(&normalized) {
                return Decision::deny(format!(
                    "argument `{location}`: path `{normalized}` matches the deny_read glob \
                     `{glob}`; it may not be read or written"
                ));
            }
            if call.read_only {
                continue;
            }
            if let Some(glob) = self.deny_write.first_match(&normalized) {
                return Decision::deny(format!(
                    "argument `{location}`: path `{normalized}` matches the deny_write glob \
                     `{glob}`; it may be read but not written"
                ));
            }
            let anchored_above =
                |glob: &&Glob| glob.as_str().starts_with('/') && glob.matches_below(&normalized);
            let mut protected = self.deny_read.iter().chain(self.deny_write.iter());
            if let Some(glob) = protected.find(anchored_above) {
                return Decision::deny(format!(
                    "argument `{location}`: path `{normalized}` contains paths the glob `{glob}` \
                     protects; moving, deleting or replacing it would touch them — work on a \
                     directory below it instead"
                ));
            }
        }
        Decision::allow()
    }
}

hpcgate_policy_sdk::export_policy!(PathRules);

#[cfg(test)]
mod tests {
    use hpcgate_policy_sdk::{Phase, Value};
    use serde_json::json;

    use super::*;

    fn policy() -> PathRules {
        PathRules::configure(
            &json!({
                "deny_read": ["**/.ssh/**"],
                "deny_write": ["**/.git/**", "/workspace/inputs/**"]
            })
            .to_string(),
        )
        .expect("valid settings")
    }

    fn decide(tool: &str, read_only: bool, arguments: Value) -> Decision {
        let mut call = Call::new(tool, arguments);
        call.read_only = read_only;
        policy().evaluate(&call)
    }

    fn reason(decision: Decision) -> String {
        match decision {
            Decision::Deny { reason } => reason,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn escape_table() {
        // (tool, read_only, arguments, denied)
        let cases = [
            (
                "read_file",
                true,
                json!({"path": "/workspace/data.csv"}),
                false,
            ),
            (
                "read_file",
                true,
                json!({"path": "/home/a/.ssh/id_rsa"}),
                true,
            ),
            ("read_file", true, json!({"path": "/.ssh/x"}), true),
            ("read_file", true, json!({"path": ".ssh/id_rsa"}), true),
            ("read_file", true, json!({"path": "x/../.ssh/id_rsa"}), true),
            ("read_file", true, json!({"path": "/workspace/.ssh"}), true),
            (
                "read_file",
                true,
                json!({"path": "/workspace/.sshx"}),
                false,
            ),
            ("read_file", true, json!({"path": "inputs/a.csv"}), false),
            ("read_file", true, json!({"path": ".git/config"}), false),
            ("write_file", false, json!({"path": "inputs/a.csv"}), true),
            (
                "write_file",
                false,
                json!({"path": "out/../inputs/a.csv"}),
                true,
            ),
            (
                "write_file",
                false,
                json!({"path": "../workspace/inputs/a.csv"}),
                true,
            ),
            (
                "write_file",
                false,
                json!({"path": "/workspace//inputs/./a.csv"}),
                true,
            ),
            ("write_file", false, json!({"path": "inputs"}), true),
            ("write_file", false, json!({"path": "inputs2/a.csv"}), false),
            (
                "write_file",
                false,
                json!({"path": "repo/.git/hooks/pre-commit"}),
                true,
            ),
            (
                "write_file",
                false,
                json!({"path": "repo/.gitignore"}),
                false,
            ),
            (
                "write_file",
                false,
                json!({"path": "/home/a/.ssh/authorized_keys"}),
                true,
            ),
            (
                "write_file",
                false,
                json!({"path": "out/result.txt"}),
                false,
            ),
            (
                "move_path",
                false,
                json!({"source": "out/a", "destination": "inputs/a"}),
                true,
            ),
            (
                "move_path",
                false,
                json!({"source": "inputs/a", "destination": "out/a"}),
                true,
            ),
            (
                "move_path",
                false,
                json!({"source": "out/a", "destination": "out/b"}),
                false,
            ),
            (
                "delete_path",
                false,
                json!({"paths": ["out/a", "inputs/b"]}),
                true,
            ),
            (
                "delete_path",
                false,
                json!({"paths": ["out/a", "out/b"]}),
                false,
            ),
            (
                "copy",
                false,
                json!({"files": [{"path": "a"}, {"path": "x/.git/c"}]}),
                true,
            ),
            (
                "search_files",
                true,
                json!({"pattern": ".ssh", "path": "/workspace"}),
                false,
            ),
            ("run", false, json!({"command": "cat ~/.ssh/id_rsa"}), false),
            // Directories above an anchored rule carry what it protects along.
            ("delete_path", false, json!({"paths": ["/workspace"]}), true),
            ("delete_path", false, json!({"path": "."}), true),
            (
                "move_path",
                false,
                json!({"source": "/workspace", "destination": "/output/ws"}),
                true,
            ),
            ("delete_path", false, json!({"path": "data"}), false),
            ("list_directory", true, json!({"path": "/workspace"}), false),
            ("write_file", false, json!({"path": "/output/x"}), false),
        ];
        for (tool, read_only, arguments, denied) in cases {
            let decision = decide(tool, read_only, arguments.clone());
            assert_eq!(
                decision.is_deny(),
                denied,
                "{tool} {arguments}: {decision:?}"
            );
        }
    }

    #[test]
    fn a_parent_of_an_anchored_rule_is_refused_with_a_reason() {
        let why = reason(decide(
            "move_path",
            false,
            json!({"source": "/workspace", "destination": "/output/w"}),
        ));
        assert!(
            why.contains("`/workspace`") && why.contains("`/workspace/inputs/**`"),
            "{why}"
        );
        assert!(why.contains("directory below it"), "{why}");
    }

    #[test]
    fn reasons_name_argument_path_and_glob() {
        let why = reason(decide(
            "read_file",
            true,
            json!({"path": "../../home/u/.ssh/id"}),
        ));
        assert!(why.contains("`path`"), "{why}");
        assert!(
            why.contains("`/home/u/.ssh/id`") && why.contains("`**/.ssh/**`"),
            "{why}"
        );
        assert!(why.contains("deny_read"), "{why}");
        let arguments = json!({"files": [{"path": "a"}, {"path": "b"}, {"path": "inputs/c"}]});
        let why = reason(decide("write_files", false, arguments));
        assert!(why.contains("`files[2].path`"), "{why}");
        assert!(
            why.contains("`/workspace/inputs/c`") && why.contains("deny_write"),
            "{why}"
        );
        assert!(why.contains("`/workspace/inputs/**`"), "{why}");
    }

    #[test]
    fn non_string_paths_are_denied() {
        for value in [
            json!(5),
            json!(null),
            json!(true),
            json!({"p": "x"}),
            json!([["x"]]),
        ] {
            let arguments = json!({"path": value});
            let why = reason(decide("read_file", true, arguments.clone()));
            assert!(
                why.contains("`path") && why.contains("not a path"),
                "{arguments}: {why}"
            );
        }
    }

    #[test]
    fn list_phase_allows() {
        let mut call = Call::new("write_file", json!({}));
        call.phase = Phase::List;
        assert!(policy().evaluate(&call).is_allow());
    }

    #[test]
    fn path_arguments_are_configurable() {
        let settings = json!({"path_arguments": ["target"], "deny_write": ["/etc/**"]});
        let policy = PathRules::configure(&settings.to_string()).unwrap();
        assert!(
            policy
                .evaluate(&Call::new("t", json!({"path": "/etc/x"})))
                .is_allow()
        );
        assert!(
            policy
                .evaluate(&Call::new("t", json!({"target": "/etc/x"})))
                .is_deny()
        );
        let err = PathRules::configure(r#"{"deny_reads": []}"#).unwrap_err();
        assert!(
            err.contains("unknown field `deny_reads`") && err.contains("`deny_read`"),
            "{err}"
        );
        assert!(
            PathRules::configure("{}")
                .unwrap()
                .evaluate(&Call::new("t", json!({})))
                .is_allow()
        );
    }
}
