//! Lexical normalisation of paths in the sandbox view, the form path globs are written against.
//!
//! Inside an instance the agent's working directory is [`WORKSPACE`], so a relative path is
//! joined to it; then `.` and `..` are resolved lexically (`..` above `/` stays at `/`), runs of
//! `/` collapse to one and a trailing `/` is dropped (except for `/` itself). The filesystem is
//! never touched: symlinks are the file executor's business (it resolves every path beneath a
//! cap-std directory), and a policy must give the same answer offline as live.

/// The agent's working directory in the sandbox view; relative paths are taken from here.
pub const WORKSPACE: &str = "/workspace";

/// The absolute, normalised sandbox-view form of `path`.
///
/// ```
/// use hpcgate_policy_sdk::path::normalize;
/// assert_eq!(normalize("../../etc/passwd"), "/etc/passwd");
/// assert_eq!(normalize("a/./b/../c"), "/workspace/a/c");
/// assert_eq!(normalize(""), "/workspace");
/// ```
pub fn normalize(path: &str) -> String {
    let joined;
    let absolute = if path.starts_with('/') {
        path
    } else {
        joined = format!("{WORKSPACE}/{path}");
        &joined
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in absolute.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    if parts.is_empty() {
        return "/".to_owned();
    }
    let mut out = String::with_capacity(absolute.len());
    for part in parts {
        out.push('/');
        out.push_str(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn table() {
        let cases = [
            ("", "/workspace"),
            (".", "/workspace"),
            ("./", "/workspace"),
            ("a", "/workspace/a"),
            ("a/", "/workspace/a"),
            ("a//b///c", "/workspace/a/b/c"),
            ("a/./b/../c", "/workspace/a/c"),
            ("..", "/"),
            ("../..", "/"),
            ("../../etc/passwd", "/etc/passwd"),
            ("../workspace2/x", "/workspace2/x"),
            ("/", "/"),
            ("//", "/"),
            ("/..", "/"),
            ("/../../x", "/x"),
            ("/workspace/../../x", "/x"),
            (
                "/workspace/inputs/../inputs/data.csv",
                "/workspace/inputs/data.csv",
            ),
            ("/workspace/inputs/..", "/workspace"),
            ("/home/a/.ssh/./id_rsa", "/home/a/.ssh/id_rsa"),
            ("/a/b/", "/a/b"),
            ("...", "/workspace/..."),
            ("a/.../b", "/workspace/a/.../b"),
            ("..x/y", "/workspace/..x/y"),
            ("~/x", "/workspace/~/x"),
            ("a\\..\\b", "/workspace/a\\..\\b"),
            ("données/./é", "/workspace/données/é"),
        ];
        for (input, expected) in cases {
            assert_eq!(normalize(input), expected, "normalize({input:?})");
        }
    }

    #[test]
    fn idempotent() {
        for input in ["", "a/../../b", "/x//y/", "../../etc/passwd", "/"] {
            let once = normalize(input);
            assert_eq!(normalize(&once), once);
        }
    }
}
