//! What a WebDAV URL names, parsed strictly before anything touches a file.
//!
//! The tree per tenant is `/dav/`, `/dav/instances/`, `/dav/instances/<id>/` and
//! `/dav/instances/<id>/{workspace,output}/…`; the last maps onto the sandbox view
//! (`/workspace/…`, `/output/…`) that the file tools take, so the pipeline's path rules see the
//! same paths an agent's calls have. Decoding is one pass of percent-decoding per segment,
//! after the URL was split on literal `/`:
//!
//! - a segment that decodes to `.` or `..`, or that holds a decoded `/`, `\0` or a byte that is
//!   not UTF-8, is refused (`%2e%2e`, `%2f`, `%00`): no spelling of a traversal reaches the
//!   executor (which would refuse it again: `..` anywhere is an escape there too);
//! - a double encoding (`%252e`) decodes once, to the literal name `%2e`: a name, not a dot;
//! - `/dav/<name>/…` names a `[dav.extras]` directory, whose segments go through the same
//!   decoding; whether the caller sees it is the handler's check;
//! - the instance id is validated as every entry point validates it; another tenant's ids are
//!   never looked up: the call runs as the caller's tenant, whose instances are the only ones
//!   its state directory holds, so a guessed name is "not found" as any unknown one.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::state::InstanceId;

/// Where DAV is mounted on the HTTP app.
pub const MOUNT: &str = "/dav";

/// What a request URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `/dav/`: holds `instances/`.
    Root,
    /// `/dav/instances/`: the caller's live instances.
    Instances,
    /// `/dav/instances/<id>/`: holds `workspace/` and `output/`.
    Instance(InstanceId),
    /// A path in an instance's workspace or output.
    File(InstanceId, SandboxView),
    /// A path in `[dav.extras.<name>]` (whether the caller sees it is the handler's check).
    Extra(String, Vec<String>),
}

/// A sandbox-view path (`/workspace/a/b`), made of decoded, checked segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxView {
    /// `workspace` or `output`.
    pub area: &'static str,
    /// The segments below the area.
    pub segments: Vec<String>,
}

impl SandboxView {
    /// The path as the file tools take it.
    pub fn path(&self) -> String {
        let mut path = format!("/{}", self.area);
        for segment in &self.segments {
            path.push('/');
            path.push_str(segment);
        }
        path
    }

    /// True for `/workspace` or `/output` itself.
    pub fn is_area(&self) -> bool {
        self.segments.is_empty()
    }

    /// The collection this path is a member of (`None` for an area itself).
    pub fn parent(&self) -> Option<SandboxView> {
        let (_, above) = self.segments.split_last()?;
        Some(SandboxView {
            area: self.area,
            segments: above.to_vec(),
        })
    }

    /// Whether `other` is this path or beneath it.
    pub fn contains(&self, other: &SandboxView) -> bool {
        self.area == other.area && other.segments.starts_with(&self.segments)
    }
}

/// Why a URL names nothing we serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadTarget {
    /// Outside the tree (another mount, an unknown top-level name): 404.
    NotFound,
    /// A traversal or forbidden spelling: 400 with the reason.
    Refused(String),
}

impl Target {
    /// Parses the path of a request URL (no query), which must start with [`MOUNT`].
    pub fn parse(raw_path: &str) -> Result<Target, BadTarget> {
        let Some(rest) = raw_path.strip_prefix(MOUNT) else {
            return Err(BadTarget::NotFound);
        };
        if !(rest.is_empty() || rest.starts_with('/')) {
            return Err(BadTarget::NotFound);
        }
        let mut segments = Vec::new();
        for raw in rest.split('/').filter(|s| !s.is_empty()) {
            segments.push(decode_segment(raw)?);
        }
        let mut parts = segments.into_iter();
        match parts.next() {
            None => return Ok(Target::Root),
            Some(first) if first == "instances" => {}
            Some(extra) => return Ok(Target::Extra(extra, parts.collect())),
        }
        let Some(id) = parts.next() else {
            return Ok(Target::Instances);
        };
        let id = InstanceId::parse(&id).map_err(|_| BadTarget::NotFound)?;
        let area = match parts.next().as_deref() {
            None => return Ok(Target::Instance(id)),
            Some("workspace") => "workspace",
            Some("output") => "output",
            Some(_) => return Err(BadTarget::NotFound),
        };
        Ok(Target::File(
            id,
            SandboxView {
                area,
                segments: parts.collect(),
            },
        ))
    }

    /// The URL path of this target, percent-encoded; collections end with `/`.
    pub fn href(&self, collection: bool) -> String {
        let mut href = format!("{MOUNT}/");
        match self {
            Target::Root => return href,
            Target::Instances => return format!("{href}instances/"),
            Target::Instance(id) => return format!("{href}instances/{}/", encode(id.as_str())),
            Target::File(id, view) => {
                href.push_str(&format!("instances/{}/{}", encode(id.as_str()), view.area));
                for segment in &view.segments {
                    href.push('/');
                    href.push_str(&encode(segment));
                }
            }
            Target::Extra(name, segments) => {
                href.push_str(&encode(name));
                for segment in segments {
                    href.push('/');
                    href.push_str(&encode(segment));
                }
            }
        }
        if collection {
            href.push('/');
        }
        href
    }
}

/// Decodes one URL segment, refusing what could name anything but a plain name.
fn decode_segment(raw: &str) -> Result<String, BadTarget> {
    let refused = |why: &str| BadTarget::Refused(format!("the URL segment `{raw}` {why}"));
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| refused("is not UTF-8 once decoded"))?;
    match decoded.as_ref() {
        "." | ".." => Err(refused(
            "is a relative step (`.` or `..`), which is not served",
        )),
        name if name.contains('/') => Err(refused("holds an encoded `/`")),
        name if name.contains('\0') => Err(refused("holds a NUL byte")),
        name if name.contains('\\') => Err(refused("holds a backslash")),
        name => Ok(name.to_owned()),
    }
}

/// Everything but unreserved characters is encoded in hrefs.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes one segment for an href.
pub fn encode(segment: &str) -> String {
    utf8_percent_encode(segment, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(raw: &str) -> String {
        match Target::parse(raw) {
            Ok(Target::File(_, view)) => view.path(),
            other => panic!("{raw}: {other:?}"),
        }
    }

    #[test]
    fn urls_map_onto_the_sandbox_view() {
        assert_eq!(Target::parse("/dav"), Ok(Target::Root));
        assert_eq!(Target::parse("/dav/"), Ok(Target::Root));
        assert_eq!(Target::parse("/dav/instances/"), Ok(Target::Instances));
        assert!(matches!(
            Target::parse("/dav/instances/run1"),
            Ok(Target::Instance(_))
        ));
        assert_eq!(file("/dav/instances/run1/workspace"), "/workspace");
        assert_eq!(
            file("/dav/instances/run1/output/a%20b/c.txt"),
            "/output/a b/c.txt"
        );
        assert_eq!(
            file("/dav/instances/run1/workspace/%252e%252e"),
            "/workspace/%2e%2e"
        );
        assert_eq!(file("/dav/instances/run1/workspace//x"), "/workspace/x");
    }

    #[test]
    fn traversal_spellings_are_refused() {
        for raw in [
            "/dav/instances/run1/workspace/..",
            "/dav/instances/run1/workspace/%2e%2e/x",
            "/dav/instances/run1/workspace/%2E%2E",
            "/dav/instances/run1/workspace/.",
            "/dav/instances/run1/workspace/a%2f..%2f..%2fetc",
            "/dav/instances/run1/workspace/a%2Fb",
            "/dav/instances/run1/workspace/a%00b",
            "/dav/instances/run1/workspace/a%5cb",
            "/dav/instances/run1/workspace/%ff",
            "/dav/instances/%2e%2e/workspace",
        ] {
            assert!(
                matches!(Target::parse(raw), Err(BadTarget::Refused(_))),
                "{raw}"
            );
        }
        for raw in [
            "/davx",
            "/dav/instances/run1/home",
            "/dav/instances/-bad-/workspace",
            "/mcp",
        ] {
            assert_eq!(Target::parse(raw), Err(BadTarget::NotFound), "{raw}");
        }
    }

    #[test]
    fn extras_are_their_own_tree() {
        assert_eq!(
            Target::parse("/dav/refdata/genomes/hg38.fa"),
            Ok(Target::Extra(
                "refdata".into(),
                vec!["genomes".into(), "hg38.fa".into()]
            ))
        );
        assert!(matches!(
            Target::parse("/dav/refdata/%2e%2e/x"),
            Err(BadTarget::Refused(_))
        ));
    }

    #[test]
    fn hrefs_round_trip() {
        let raw = "/dav/instances/run1/workspace/a%20b/%25x%23";
        let target = Target::parse(raw).unwrap();
        assert_eq!(target.href(false), raw);
        assert_eq!(Target::parse(&target.href(true)).unwrap(), target);
    }
}
