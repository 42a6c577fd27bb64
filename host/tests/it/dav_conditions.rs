//! WebDAV's conditions, through the real `hpcgate run`, driven by `curl`: GET's preconditions
//! (`If-Match`, and `If-Range`, without which a client resuming the download of a file changed
//! meanwhile splices two versions of it), a status of the failure's kind, the `If` header's
//! tagged lists, what a depth-0 lock on a collection protects, what a depth-infinity lock
//! reaches, and a WASI policy's answer to a LOCK.

use std::time::{Duration, SystemTime};

use crate::support::dav::{Setup, curl, setup};
use crate::support::served::Served;

/// chem's instance `run1` served over HTTP by the real gateway. Fields drop in order: the
/// gateway first, then its runtime, then the directories it used.
struct Door {
    _served: Served,
    _runtime: tokio::runtime::Runtime,
    s: Setup,
    /// `http://…/dav/instances/run1/workspace`.
    ws: String,
    /// Where curl keeps bodies and headers.
    scratch: tempfile::TempDir,
    /// chem's `Authorization` header.
    auth: String,
}

fn door() -> Door {
    let s = setup();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let served = runtime.block_on(Served::http(
        s.dir.path(),
        &s.dir.path().join("gateway.toml"),
    ));
    Door {
        ws: format!("http://{}/dav/instances/run1/workspace", served.authority()),
        scratch: tempfile::tempdir().unwrap(),
        auth: format!("Authorization: Bearer {}", s.chem),
        s,
        _served: served,
        _runtime: runtime,
    }
}

/// A header's value in a reply's (lower-cased) headers.
fn header<'a>(headers: &'a str, name: &str) -> &'a str {
    let line = headers.lines().find(|l| l.starts_with(&format!("{name}:")));
    let line = line.unwrap_or_else(|| panic!("no {name} in {headers}"));
    line[name.len() + 1..].trim()
}

#[test]
fn a_range_is_sent_only_of_the_version_if_range_names() {
    let Door {
        s,
        ws,
        scratch,
        auth,
        ..
    } = &door();
    let file = format!("{ws}/data.txt");
    let get = |extra: &[&str]| {
        let mut args = vec!["-H", auth.as_str()];
        args.extend_from_slice(extra);
        args.push(&file);
        curl(scratch.path(), &args)
    };
    std::fs::write(s.workspace.join("data.txt"), "version one, old").unwrap();
    let old = get(&["-I"]);
    assert_eq!(old.status, 200, "{}", old.headers);
    let old_tag = header(&old.headers, "etag").to_owned();
    std::fs::write(s.workspace.join("data.txt"), "version two, the new one").unwrap();
    let new = get(&["-I"]);
    let new_tag = header(&new.headers, "etag").to_owned();
    assert_ne!(old_tag, new_tag);

    let ranged = |validator: &str| get(&["-r", "8-10", "-H", &format!("If-Range: {validator}")]);
    let current = ranged(&new_tag);
    assert_eq!((current.status, current.body.as_str()), (206, "two"));
    for stale in [
        old_tag.as_str(),
        &format!("W/{new_tag}"),
        "\"x\"",
        "garbage",
    ] {
        let whole = ranged(stale);
        assert_eq!(
            (whole.status, whole.body.as_str()),
            (200, "version two, the new one"),
            "If-Range: {stale}"
        );
    }
    // A date is a weak validator (two writes may share a second): the whole file, even for
    // the file's own modification time.
    let then = SystemTime::now() - Duration::from_secs(600);
    let f = std::fs::File::options()
        .write(true)
        .open(s.workspace.join("data.txt"))
        .unwrap();
    f.set_modified(then).unwrap();
    let dated = get(&["-I"]);
    let modified = httpdate::fmt_http_date(then);
    assert_eq!(
        header(&dated.headers, "last-modified"),
        modified.to_lowercase()
    );
    assert_eq!(ranged(&modified).status, 200, "If-Range: {modified}");
    // Without Range, If-Range does nothing.
    let plain = get(&["-H", &format!("If-Range: {old_tag}")]);
    assert_eq!(plain.status, 200);

    // If-Match on a read: 412 unless it names the current version (or `*`).
    let tag = header(&dated.headers, "etag").to_owned();
    assert_eq!(get(&["-H", &format!("If-Match: {old_tag}")]).status, 412);
    let listed = format!("If-Match: {old_tag}, {tag}");
    assert_eq!(get(&["-H", &listed]).status, 200);
    assert_eq!(get(&["-H", "If-Match: *"]).status, 200);
    // If-Match compares strongly; If-None-Match weakly, and its 304 names the version.
    assert_eq!(get(&["-H", &format!("If-Match: W/{tag}")]).status, 412);
    let cached = get(&["-H", &format!("If-None-Match: W/{tag}")]);
    assert_eq!(cached.status, 304);
    assert_eq!(header(&cached.headers, "etag"), tag);
    assert_eq!(
        header(&cached.headers, "last-modified"),
        modified.to_lowercase()
    );
}

/// A status comes from the kind of failure, not from words of its message: a missing file
/// whose name is a phrase of another failure is still 404, with no `Retry-After`.
#[test]
fn a_name_that_reads_like_another_failure_does_not_change_the_status() {
    let Door {
        ws, scratch, auth, ..
    } = &door();
    for name in [
        "rate%20limit%20for%20x%20retry%20in%209%20s",
        "denied%20by%20policy",
        "quota's%20room",
        "audit%20log",
    ] {
        let got = curl(scratch.path(), &["-H", auth, &format!("{ws}/{name}")]);
        assert_eq!(got.status, 404, "{name}: {}", got.body);
        assert!(!got.headers.contains("retry-after"), "{}", got.headers);
    }
}

/// An `If` header whose lists name different resources judges each list's entity tag against
/// its own resource: a write that holds by its second list goes through. Before, the first
/// resource's tag was reused for every list.
#[test]
fn each_tagged_list_of_an_if_header_is_judged_against_its_own_resource() {
    let Door {
        s,
        ws,
        scratch,
        auth,
        ..
    } = &door();
    std::fs::write(s.workspace.join("a.txt"), "a").unwrap();
    std::fs::write(s.workspace.join("b.txt"), "bb").unwrap();
    let head = curl(scratch.path(), &["-I", "-H", auth, &format!("{ws}/b.txt")]);
    let b_tag = header(&head.headers, "etag").to_owned();
    let put = |condition: &str| {
        let upload = scratch.path().join("upload");
        std::fs::write(&upload, "new a").unwrap();
        let args = [
            "-H",
            auth,
            "-H",
            condition,
            "-T",
            upload.to_str().unwrap(),
            &format!("{ws}/a.txt"),
        ];
        curl(scratch.path(), &args).status
    };
    let wrong_then_right = format!("If: <{ws}/a.txt> ([\"nope\"]) <{ws}/b.txt> ([{b_tag}])");
    assert_eq!(put(&wrong_then_right), 204, "{wrong_then_right}");
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("a.txt")).unwrap(),
        "new a"
    );
    let both_wrong = format!("If: <{ws}/a.txt> ([\"nope\"]) <{ws}/b.txt> ([\"nope\"])");
    assert_eq!(put(&both_wrong), 412);
}

/// A depth-0 lock on a collection protects its list of members (RFC 4918 §7.5): adding a
/// member (PUT of a new file, MKCOL, a COPY or MOVE to a new name, a LOCK that creates a
/// file) or taking one out (DELETE, MOVE away) needs its token; changing a member's content
/// does not. Before, a depth-0 lock on a collection protected nothing inside it.
#[test]
fn a_depth_0_lock_on_a_collection_protects_its_members_list() {
    let Door {
        s,
        ws,
        scratch,
        auth,
        ..
    } = &door();
    std::fs::create_dir(s.workspace.join("col")).unwrap();
    std::fs::write(s.workspace.join("col/old.txt"), "old").unwrap();
    let upload = scratch.path().join("upload");
    std::fs::write(&upload, "new").unwrap();
    let upload = upload.to_str().unwrap().to_owned();
    let dav = |extra: &[&str]| {
        let mut args = vec!["-H", auth.as_str()];
        args.extend_from_slice(extra);
        curl(scratch.path(), &args).status
    };
    let lock_body = r#"<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockinfo>"#;
    let col = format!("{ws}/col");
    let mut args = vec!["-H", auth.as_str(), "-H", "Depth: 0", "-X", "LOCK"];
    args.extend(["--data-binary", lock_body, col.as_str()]);
    let locked = curl(scratch.path(), &args);
    assert_eq!(locked.status, 200, "{}", locked.body);
    let token = header(&locked.headers, "lock-token");
    let with_token = format!("If: <{col}> ({token})");
    let at = |name: &str| format!("{ws}/col/{name}");
    let moved_to = |name: &str| format!("Destination: {}", at(name));

    // Content of a member: not protected.
    assert_eq!(dav(&["-T", &upload, &at("old.txt")]), 204);
    // Members added or taken out without the token: refused, nothing changed.
    assert_eq!(dav(&["-T", &upload, &at("new.txt")]), 423);
    assert_eq!(dav(&["-X", "MKCOL", &at("sub")]), 423);
    assert_eq!(dav(&["-X", "DELETE", &at("old.txt")]), 423);
    let copy = ["-X", "COPY", "-H", &moved_to("copy.txt"), &at("old.txt")];
    assert_eq!(dav(&copy), 423);
    let away = format!("Destination: {ws}/away.txt");
    assert_eq!(dav(&["-X", "MOVE", "-H", &away, &at("old.txt")]), 423);
    let mut names: Vec<_> = std::fs::read_dir(s.workspace.join("col"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["old.txt"]);
    // With the token: allowed.
    assert_eq!(
        dav(&["-H", &with_token, "-T", &upload, &at("new.txt")]),
        201
    );
    assert_eq!(dav(&["-H", &with_token, "-X", "MKCOL", &at("sub")]), 201);
    assert_eq!(
        dav(&["-H", &with_token, "-X", "DELETE", &at("new.txt")]),
        204
    );
    // Another collection is not held.
    assert_eq!(dav(&["-T", &upload, &format!("{ws}/free.txt")]), 201);
}

/// `If-None-Match: *` makes a PUT create-only up to the moment its file is put in place: of
/// sixteen such PUTs of one new name sent together (50 kB each, all within chem's 1 MiB
/// quota), exactly one creates it and the others get 412; the file is the winner's, whole. Before, each was checked before any had written, and
/// several replaced each other's file, each told it had created it.
#[test]
fn of_concurrent_create_only_puts_exactly_one_wins() {
    let d = door();
    let url = format!("{}/new.bin", d.ws);
    let start = std::sync::Barrier::new(16);
    let results: Vec<(u16, String)> = std::thread::scope(|scope| {
        let puts: Vec<_> = (0..16)
            .map(|i| {
                let (url, auth, start) = (&url, &d.auth, &start);
                scope.spawn(move || {
                    let scratch = tempfile::tempdir().unwrap();
                    let body = scratch.path().join("body.bin");
                    let content = format!("{i:02}").repeat(25_000);
                    std::fs::write(&body, &content).unwrap();
                    let data = format!("@{}", body.display());
                    start.wait();
                    let args = ["-X", "PUT", "-H", auth, "-H", "If-None-Match: *"];
                    let mut args = args.to_vec();
                    args.extend(["--data-binary", &data, url]);
                    (curl(scratch.path(), &args).status, content)
                })
            })
            .collect();
        puts.into_iter().map(|put| put.join().unwrap()).collect()
    });
    let won: Vec<&(u16, String)> = results
        .iter()
        .filter(|(status, _)| *status == 201)
        .collect();
    let statuses: Vec<u16> = results.iter().map(|(status, _)| *status).collect();
    assert_eq!(won.len(), 1, "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 201 || *s == 412),
        "{statuses:?}"
    );
    let stored = std::fs::read_to_string(d.s.workspace.join("new.bin")).unwrap();
    assert!(stored == won[0].1, "the file is not the winner's whole");
}

/// DELETE asks `delete_path` for a recursive delete only of a collection with members, so a
/// policy that refuses recursive deletes (a Rego rule here) still lets a file and an empty
/// collection go. DELETE used to ask for `recursive` always, and such a policy refused every
/// DELETE.
#[test]
fn a_delete_is_recursive_only_for_a_collection_with_members() {
    let s = setup();
    std::fs::write(s.workspace.join("file.txt"), "x").unwrap();
    std::fs::create_dir(s.workspace.join("empty")).unwrap();
    std::fs::create_dir_all(s.workspace.join("full/sub")).unwrap();
    let config = with_rego(
        &s,
        "keep-trees",
        "deny contains \"no recursive deletes\" if {\n\
         \tinput.tool == \"delete_path\"\n\tinput.arguments.recursive == true\n}\n",
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let served = runtime.block_on(Served::http(s.dir.path(), &config));
    let scratch = tempfile::tempdir().unwrap();
    let auth = format!("Authorization: Bearer {}", s.chem);
    let ws = format!("http://{}/dav/instances/run1/workspace", served.authority());
    let delete = |path: &str| {
        let url = format!("{ws}/{path}");
        curl(scratch.path(), &["-X", "DELETE", "-H", &auth, &url])
    };
    assert_eq!(delete("file.txt").status, 204);
    assert_eq!(delete("empty").status, 204);
    let refused = delete("full");
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("no recursive deletes"),
        "{}",
        refused.body
    );
    assert!(s.workspace.join("full/sub").is_dir());
    assert!(!s.workspace.join("file.txt").exists() && !s.workspace.join("empty").exists());
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{stderr}");
    let asked: Vec<(String, bool)> = crate::code_mode::audit_records(s.dir.path())
        .iter()
        .filter(|r| r["call"]["tool"] == "delete_path" && r["decision"].is_object())
        .map(|r| {
            (
                r["call"]["arguments"]["path"].as_str().unwrap().to_owned(),
                r["call"]["arguments"]["recursive"] == true,
            )
        })
        .collect();
    assert_eq!(
        asked,
        [
            ("/workspace/file.txt".to_owned(), false),
            ("/workspace/empty".to_owned(), false),
            ("/workspace/full".to_owned(), false),
            ("/workspace/full".to_owned(), true),
        ],
        "the policies were asked for a recursive delete of the full collection only"
    );
}

/// The set-up's gateway configuration with one more policy, `name`: `stock:rego` with `rules`
/// (after the package and import lines); the configuration's path.
fn with_rego(s: &Setup, name: &str, rules: &str) -> std::path::PathBuf {
    let file = s.dir.path().join(format!("{name}.rego"));
    std::fs::write(&file, format!("package hpcgate\nimport rego.v1\n{rules}")).unwrap();
    let config = s.dir.path().join("gateway.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[[policies]]\nname = {name:?}\nmodule = \"stock:rego\"\n\
         [policies.config]\npolicy_file = {:?}\n",
        file.display().to_string()
    ));
    std::fs::write(&config, text).unwrap();
    config
}

/// A depth-infinity lock reaches only what its holder may write. A policy gives
/// `/workspace/proj/carol/` to carol alone; alice's lock on `proj`, which she may write, keeps
/// others from `proj`'s other members but not carol from her own files, which she may write
/// and lock. Before, a LOCK was judged at its collection only, so alice could lock carol out of
/// the files only carol may change, for an hour at a time.
#[test]
fn a_depth_infinity_lock_reaches_only_what_its_holder_may_write() {
    let s = setup();
    std::fs::create_dir_all(s.workspace.join("proj/carol")).unwrap();
    let config = with_rego(
        &s,
        "carols",
        "deny contains \"proj/carol is carol's\" if {\n\
         \tnot input.read_only\n\
         \tstartswith(input.arguments.path, \"/workspace/proj/carol/\")\n\
         \tinput.principal != \"token:carol\"\n}\n",
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let served = runtime.block_on(Served::http(s.dir.path(), &config));
    let scratch = tempfile::tempdir().unwrap();
    let ws = format!("http://{}/dav/instances/run1/workspace", served.authority());
    let upload = scratch.path().join("upload");
    std::fs::write(&upload, "new").unwrap();
    let upload = upload.to_str().unwrap();
    let as_ = |token: &str, extra: &[&str]| {
        let auth = format!("Authorization: Bearer {token}");
        let mut args = vec!["-H", auth.as_str()];
        args.extend_from_slice(extra);
        curl(scratch.path(), &args)
    };
    let lock_body = r#"<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockinfo>"#;
    let lock = |token: &str, path: &str, depth: &str| {
        let (url, depth) = (format!("{ws}/{path}"), format!("Depth: {depth}"));
        as_(
            token,
            &["-X", "LOCK", "-H", &depth, "--data-binary", lock_body, &url],
        )
        .status
    };
    let put = |token: &str, path: &str| as_(token, &["-T", upload, &format!("{ws}/{path}")]);

    assert_eq!(lock(&s.chem, "proj", "infinity"), 200, "alice locks proj");
    // carol writes and locks in her own folder, beneath alice's lock.
    let written = put(&s.carol, "proj/carol/notes.txt");
    assert_eq!(written.status, 201, "{}", written.body);
    assert_eq!(lock(&s.carol, "proj/carol/notes.txt", "0"), 200);
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("proj/carol/notes.txt")).unwrap(),
        "new"
    );
    // The rest of proj is alice's lock's.
    assert_eq!(put(&s.carol, "proj/shared.txt").status, 423);
    assert_eq!(lock(&s.carol, "proj/other.txt", "0"), 423);
    assert!(!s.workspace.join("proj/shared.txt").exists());
    // alice still may not write carol's folder.
    let refused = put(&s.chem, "proj/carol/hers.txt");
    assert_eq!(refused.status, 403, "{}", refused.body);
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{stderr}");
}

/// A WASI policy answers LOCK's question too (whether the caller may write what it locks).
/// WebDAV asks it from an async handler, where a WASI policy's functions, which block on a
/// Tokio runtime, panicked: with such a policy in the chain every LOCK was cut off unanswered.
/// Here the policy denies (with its report of what WASI gave it), and LOCK says so.
#[test]
fn a_wasi_policy_answers_a_lock() {
    let s = setup();
    std::fs::write(s.workspace.join("file.txt"), "x").unwrap();
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let guests = hpcgate_policy_build::build_guests(
        workspace,
        &["hostile"],
        hpcgate_policy_build::Target::Wasip2,
        s.dir.path(),
    );
    let config = s.dir.path().join("gateway.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[[policies]]\nname = \"probe\"\nmodule = {:?}\ntools = [\"write_file\"]\n\
         [policies.config]\nbehaviour = \"wasi-probe\"\n",
        guests[0].component.display().to_string()
    ));
    std::fs::write(&config, text).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let served = runtime.block_on(Served::http(s.dir.path(), &config));
    let scratch = tempfile::tempdir().unwrap();
    let url = format!(
        "http://{}/dav/instances/run1/workspace/file.txt",
        served.authority()
    );
    let auth = format!("Authorization: Bearer {}", s.chem);
    let lock_body = r#"<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockinfo>"#;
    let args = ["-X", "LOCK", "-H", &auth, "--data-binary", lock_body, &url];
    let locked = curl(scratch.path(), &args);
    assert_eq!(locked.status, 403, "{}", locked.body);
    assert!(
        locked.body.contains("would not let you write"),
        "{}",
        locked.body
    );
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
