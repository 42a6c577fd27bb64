//! What a listing shows: only the entries the policies would let the caller look at.

use hpcgate_executors::files as exec;

use super::Context;

/// Leaves out the entries of a listing of `base` the policies would not let the caller look
/// at (see [`Context::visible`]), and every entry beneath a directory they would not (a search
/// returns only what matches, so each directory on the way is asked about, once); says how
/// many were left out, if any. A path with an escape in it (in a name or in `base`) is judged
/// as shown and as it is (the path an agent would pass, with any byte that is not UTF-8 as
/// U+FFFD): left out if either is refused.
pub(super) fn keep_visible(
    cx: &Context<'_>,
    base: &str,
    entries: &mut Vec<exec::ListEntry>,
) -> String {
    let before = entries.len();
    let mut judged: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    let mut visible = |path: &str| -> bool {
        if let Some(seen) = judged.get(path) {
            return *seen;
        }
        let seen = (cx.visible)(path)
            && (!path.contains('\\') || (cx.visible)(&exec::unescape_lossy(path)));
        judged.insert(path.to_owned(), seen);
        seen
    };
    entries.retain(|entry| {
        let below = (entry.path.strip_prefix(base)).and_then(|rest| rest.strip_prefix('/'));
        let mut at = base.to_owned();
        for part in below.into_iter().flat_map(|rest| rest.split('/')) {
            at.push('/');
            at.push_str(part);
            if !visible(&at) {
                return false;
            }
        }
        visible(&entry.path)
    });
    match before - entries.len() {
        0 => String::new(),
        hidden => format!(", {hidden} left out by policy"),
    }
}
