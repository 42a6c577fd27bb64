//! The WebDAV attack table (run by `dav::curl_uses_the_one_pipeline_and_attacks_fail` against
//! its running gateway): traversal spellings, objects a job plants, `Destination` escapes,
//! COPY and MOVE that fail, other tenants' names, archived instances, read-only extras,
//! oversized uploads, hostile XML, missing or wrong credentials.

use std::path::Path;

use crate::support::dav::{Reply, Setup, curl};

/// The attack table, against the running gateway.
pub fn attacks(s: &Setup, sc: &Path, base: &str, chem: &dyn Fn(&[&str]) -> Reply) {
    let ws = format!("{base}/instances/run1/workspace");
    let outside = s.dir.path().join("outside-secret.txt");
    std::fs::write(&outside, "TOP-SECRET").unwrap();
    // Traversal spellings: refused before any call (400) or naming nothing (404), never served.
    for path in [
        "/instances/run1/workspace/../../../../etc/passwd",
        "/instances/run1/workspace/%2e%2e/%2e%2e/etc/passwd",
        "/instances/run1/workspace/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
        "/instances/run1/workspace/a%2f..%2f..%2f..%2fetc%2fpasswd",
        "/instances/run1/workspace/%252e%252e/%252e%252e/etc/passwd",
        "/instances/run1/workspace//etc/passwd",
        "/instances/run1/workspace/%00",
        "/instances/run1/../../../etc/passwd",
        "/../etc/passwd",
    ] {
        let reply = chem(&["--path-as-is", &format!("{base}{path}")]);
        assert!(
            [400, 404].contains(&reply.status),
            "{path}: {} {}",
            reply.status,
            reply.body
        );
        assert!(!reply.body.contains("root:"), "{path}");
        let put = chem(&["--path-as-is", "-T", "/dev/null", &format!("{base}{path}")]);
        assert!(
            [400, 404, 405, 409].contains(&put.status),
            "PUT {path}: {}",
            put.status
        );
    }
    // Objects a job can plant in its workspace: never followed, opened or listed.
    std::os::unix::fs::symlink(&outside, s.workspace.join("link")).unwrap();
    std::os::unix::fs::symlink(s.dir.path(), s.workspace.join("linkdir")).unwrap();
    std::fs::hard_link(&outside, s.workspace.join("hard")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        s.workspace.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from(0o644),
        0,
    )
    .unwrap();
    for name in ["link", "linkdir/outside-secret.txt", "hard", "fifo"] {
        let reply = chem(&[&format!("{ws}/{name}")]);
        assert_eq!(reply.status, 403, "{name}: {}", reply.body);
        assert!(!reply.body.contains("TOP-SECRET"), "{name}");
        assert!(
            !reply.body.contains(s.dir.path().to_str().unwrap()),
            "{name} leaks a host path"
        );
    }
    assert_eq!(
        chem(&["-T", "/dev/null", &format!("{ws}/link")]).status,
        403
    );
    assert_eq!(
        chem(&["-T", "/dev/null", &format!("{ws}/linkdir/new.txt")]).status,
        403
    );
    assert!(!s.dir.path().join("new.txt").exists());
    // Asked about by name, each is there but not served, as GET says.
    for name in ["link", "fifo"] {
        let found = chem(&["-X", "PROPFIND", "-H", "Depth: 0", &format!("{ws}/{name}")]);
        assert_eq!(found.status, 403, "{name}: {}", found.body);
    }
    let listing = chem(&["-X", "PROPFIND", "-H", "Depth: 1", &format!("{ws}/")]);
    for name in ["/link<", "linkdir", "/fifo<"] {
        assert!(
            !listing.body.contains(name),
            "{name} listed: {}",
            listing.body
        );
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "TOP-SECRET");
    // Destination escapes.
    let copy = |destination: &str| {
        chem(&[
            "-X",
            "COPY",
            "-H",
            &format!("Destination: {destination}"),
            &format!("{ws}/data.bin"),
        ])
        .status
    };
    assert_eq!(copy(&format!("{base}/instances/secret1/workspace/x")), 403);
    assert_eq!(copy("/dav/instances/run2/workspace/x"), 403);
    assert_eq!(
        copy("http://elsewhere.example/dav/instances/run1/workspace/x"),
        502
    );
    // Behind a reverse proxy, which reaches the gateway on loopback and says the public name
    // the client used: a Destination by that name is this server.
    let proxied = chem(&[
        "-X",
        "COPY",
        "-H",
        "X-Forwarded-Host: files.example",
        "-H",
        "Destination: https://files.example/dav/instances/run1/workspace/proxied.bin",
        &format!("{ws}/data.bin"),
    ]);
    assert_eq!(proxied.status, 201, "{}", proxied.body);
    assert_eq!(copy("/etc/passwd"), 403);
    assert_eq!(
        copy(&format!(
            "{base}/instances/run1/workspace/../../secret1/workspace/x"
        )),
        400
    );
    assert_eq!(
        copy(&format!("{base}/instances/run1/workspace/%2e%2e/x")),
        400
    );
    assert_eq!(copy(&format!("{base}/instances/run1/workspace")), 403);
    // A COPY or MOVE that fails leaves its destination as it was: a missing source (404), a
    // policy refusal (403; `/workspace/inputs/` may not be written, nor moved or copied from),
    // a collection that was moved aside to be replaced (put back). Replacing one still works.
    let relocate = |method: &str, from: &str, to: &str| {
        chem(&[
            "-X",
            method,
            "-H",
            &format!("Destination: {ws}/{to}"),
            &format!("{ws}/{from}"),
        ])
    };
    std::fs::write(s.workspace.join("keep.txt"), "keep me").unwrap();
    std::fs::create_dir(s.workspace.join("keepdir")).unwrap();
    std::fs::write(s.workspace.join("keepdir/f.txt"), "keep me too").unwrap();
    std::fs::write(s.workspace.join("inputs/held.txt"), "held").unwrap();
    for (method, from, to, status) in [
        ("MOVE", "no-such-file", "keep.txt", 404),
        ("COPY", "no-such-file", "keepdir", 404),
        ("COPY", "inputs/held.txt", "keep.txt", 403),
        ("MOVE", "inputs/held.txt", "keep.txt", 403),
        ("COPY", "inputs/held.txt", "keepdir", 403),
        ("MOVE", "inputs/held.txt", "keepdir", 403),
    ] {
        let reply = relocate(method, from, to);
        assert_eq!(reply.status, status, "{method} {from} {to}: {}", reply.body);
        assert_eq!(
            std::fs::read_to_string(s.workspace.join("keep.txt")).unwrap(),
            "keep me",
            "{method} {from} {to}"
        );
        assert_eq!(
            std::fs::read_to_string(s.workspace.join("keepdir/f.txt")).unwrap(),
            "keep me too",
            "{method} {from} {to}"
        );
    }
    assert_eq!(relocate("COPY", "keep.txt", "keepdir").status, 204);
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("keepdir")).unwrap(),
        "keep me"
    );
    assert_eq!(relocate("MOVE", "keepdir", "keep.txt").status, 204);
    let left: Vec<_> = std::fs::read_dir(&s.workspace)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".hpcgate") || n.starts_with("keep"))
        .collect();
    assert_eq!(left, ["keep.txt"]);
    // Another tenant's instance, guessed: not found, not listed.
    let bio_auth = format!("Authorization: Bearer {}", s.bio);
    let bio = |args: &[&str]| {
        let mut all = vec!["-H", bio_auth.as_str()];
        all.extend_from_slice(args);
        curl(sc, &all)
    };
    assert_eq!(
        bio(&[&format!("{base}/instances/secret1/workspace/data.bin")]).status,
        404
    );
    assert_eq!(
        bio(&[
            "-X",
            "PROPFIND",
            "-H",
            "Depth: 0",
            &format!("{base}/instances/secret1/")
        ])
        .status,
        404
    );
    assert_eq!(
        bio(&[&format!("{base}/instances/run1/workspace/data.bin")]).status,
        404
    );
    let bio_list = bio(&[
        "-X",
        "PROPFIND",
        "-H",
        "Depth: 1",
        &format!("{base}/instances/"),
    ]);
    assert_eq!(bio_list.status, 207);
    assert!(
        bio_list.body.contains("/instances/run1/") && !bio_list.body.contains("secret1"),
        "{}",
        bio_list.body
    );
    let chem_list = chem(&[
        "-X",
        "PROPFIND",
        "-H",
        "Depth: 1",
        &format!("{base}/instances/"),
    ]);
    assert!(
        chem_list.body.contains("secret1") && !chem_list.body.contains("/old/"),
        "{}",
        chem_list.body
    );
    // An archived instance is gone from the tree.
    assert_eq!(
        chem(&[
            "-X",
            "PROPFIND",
            "-H",
            "Depth: 0",
            &format!("{base}/instances/old/")
        ])
        .status,
        404
    );
    assert_eq!(
        chem(&[
            "-T",
            "/dev/null",
            &format!("{base}/instances/old/workspace/x")
        ])
        .status,
        404
    );
    // Over the quota: refused before reading when announced, cut while streaming otherwise;
    // nothing is left behind either way.
    let big = sc.join("big.bin");
    std::fs::write(&big, vec![7u8; 3 << 20]).unwrap();
    let big = big.to_str().unwrap();
    assert_eq!(chem(&["-T", big, &format!("{ws}/big.bin")]).status, 507);
    let chunked = chem(&[
        "-T",
        big,
        "-H",
        "Transfer-Encoding: chunked",
        &format!("{ws}/big.bin"),
    ]);
    assert_eq!(chunked.status, 507, "{}", chunked.body);
    let leftovers: Vec<_> = std::fs::read_dir(&s.workspace)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".hpcgate-tmp") || n == "big.bin")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Into the workspace from the output (which has no quota): a MOVE of a file or a tree
    // counts as a COPY does, and what was refused stays where it was.
    let out = format!("{base}/instances/run1/output");
    assert_eq!(chem(&["-T", big, &format!("{out}/big.bin")]).status, 201);
    assert_eq!(chem(&["-X", "MKCOL", &format!("{out}/tree")]).status, 201);
    assert_eq!(
        chem(&["-T", big, &format!("{out}/tree/big.bin")]).status,
        201
    );
    for name in ["big.bin", "tree"] {
        for method in ["COPY", "MOVE"] {
            let reply = chem(&[
                "-X",
                method,
                "-H",
                &format!("Destination: {ws}/{name}"),
                &format!("{out}/{name}"),
            ]);
            assert_eq!(reply.status, 507, "{method} {name}: {}", reply.body);
        }
        assert!(!s.workspace.join(name).exists(), "{name}");
        assert_eq!(
            chem(&["-X", "DELETE", &format!("{out}/{name}")]).status,
            204
        );
    }
    // Extras: read-only, per tenant, beneath their directory.
    let refdata = format!("{base}/refdata");
    assert_eq!(chem(&[&format!("{refdata}/ref.txt")]).body, "refdata");
    assert_eq!(bio(&[&format!("{refdata}/ref.txt")]).body, "refdata");
    assert_eq!(
        chem(&[&format!("{base}/chemdata/ref.txt")]).body,
        "chemdata"
    );
    assert_eq!(bio(&[&format!("{base}/chemdata/ref.txt")]).status, 404);
    assert_eq!(
        bio(&[
            "-X",
            "PROPFIND",
            "-H",
            "Depth: 0",
            &format!("{base}/chemdata/")
        ])
        .status,
        404
    );
    let root = |who: &dyn Fn(&[&str]) -> Reply| {
        who(&["-X", "PROPFIND", "-H", "Depth: 1", &format!("{base}/")]).body
    };
    assert!(root(&chem).contains("/dav/chemdata/") && root(&chem).contains("/dav/refdata/"));
    assert!(!root(&bio).contains("chemdata") && root(&bio).contains("/dav/refdata/"));
    let listed = chem(&["-X", "PROPFIND", "-H", "Depth: 1", &format!("{refdata}/")]);
    assert!(
        listed.body.contains("/dav/refdata/ref.txt</D:href>"),
        "{}",
        listed.body
    );
    for args in [
        vec!["-T", "/dev/null", "REF/new.txt"],
        vec!["-X", "DELETE", "REF/ref.txt"],
        vec!["-X", "MKCOL", "REF/dir"],
        vec![
            "-X",
            "MOVE",
            "-H",
            "Destination: /dav/refdata/moved.txt",
            "REF/ref.txt",
        ],
        vec!["-X", "PROPPATCH", "REF/ref.txt"],
        vec!["-X", "LOCK", "REF/ref.txt"],
    ] {
        let args: Vec<String> = args.iter().map(|a| a.replace("REF", &refdata)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(chem(&args).status, 403, "{args:?}");
    }
    assert!(
        s.dir.path().join("refdata/ref.txt").exists()
            && !s.dir.path().join("refdata/new.txt").exists()
    );
    std::os::unix::fs::symlink(&outside, s.dir.path().join("refdata/link")).unwrap();
    assert_eq!(chem(&[&format!("{refdata}/link")]).status, 403);
    let found = chem(&[
        "-X",
        "PROPFIND",
        "-H",
        "Depth: 0",
        &format!("{refdata}/link"),
    ]);
    assert_eq!(found.status, 403, "{}", found.body);
    // Links inside an extra (an admin's dataset: `latest -> v2`) are followed, since no path
    // rule judges an extra; one that leaves it is not.
    std::fs::create_dir(s.dir.path().join("refdata/v2")).unwrap();
    std::fs::write(s.dir.path().join("refdata/v2/data.txt"), "v2 data").unwrap();
    std::os::unix::fs::symlink("v2", s.dir.path().join("refdata/latest")).unwrap();
    std::os::unix::fs::symlink("../outside-secret.txt", s.dir.path().join("refdata/up")).unwrap();
    let latest = chem(&[&format!("{refdata}/latest/data.txt")]);
    assert_eq!((latest.status, latest.body.as_str()), (200, "v2 data"));
    let listed = chem(&[
        "-X",
        "PROPFIND",
        "-H",
        "Depth: 1",
        &format!("{refdata}/latest/"),
    ]);
    assert!(listed.body.contains("data.txt"), "{}", listed.body);
    // And the link is listed as what it leads to, a collection; the one that leaves is not.
    let parent = chem(&["-X", "PROPFIND", "-H", "Depth: 1", &format!("{refdata}/")]);
    assert!(
        parent.body.contains("/dav/refdata/latest/</D:href>"),
        "{}",
        parent.body
    );
    assert!(!parent.body.contains("/dav/refdata/up"), "{}", parent.body);
    let up = chem(&[&format!("{refdata}/up")]);
    assert!(
        up.status >= 400 && !up.body.contains("TOP-SECRET"),
        "{} {}",
        up.status,
        up.body
    );
    let up = chem(&[
        "--path-as-is",
        &format!("{refdata}/../../outside-secret.txt"),
    ]);
    assert!(
        [400, 404].contains(&up.status) && !up.body.contains("TOP-SECRET"),
        "{}",
        up.status
    );
    assert_eq!(chem(&[&format!("{base}/nosuchextra/x")]).status, 404);
    // A body naming one property thousands of times (or thousands of properties) is answered
    // once a property, at most 64 of them: each is repeated in every entry of a listing.
    let repeated = format!(
        r#"<D:propfind xmlns:D="DAV:" xmlns:X="urn:x"><D:prop>{}{}</D:prop></D:propfind>"#,
        "<D:supportedlock/>".repeat(3000),
        (0..500).map(|i| format!("<X:p{i}/>")).collect::<String>()
    );
    let answered = chem(&[
        "-X",
        "PROPFIND",
        "-H",
        "Depth: 0",
        "--data-binary",
        &repeated,
        &format!("{ws}/"),
    ]);
    assert_eq!(answered.status, 207, "{}", answered.body);
    assert_eq!(answered.body.matches("<D:supportedlock>").count(), 1);
    assert_eq!(
        answered.body.matches(r#"xmlns="urn:x""#).count() + 1,
        64,
        "{}",
        answered.body.len()
    );
    // Hostile XML: entities are never expanded, bodies are capped.
    let laughs = format!(
        r#"<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">{}]><D:propfind xmlns:D="DAV:"><D:prop>&j;</D:prop></D:propfind>"#,
        (b'b'..=b'j')
            .map(|c| format!(
                r#"<!ENTITY {} "{}">"#,
                c as char,
                format!("&{};", (c - 1) as char).repeat(10)
            ))
            .collect::<String>()
    );
    let xml = chem(&[
        "-X",
        "PROPFIND",
        "-H",
        "Depth: 0",
        "--data-binary",
        &laughs,
        &format!("{ws}/"),
    ]);
    assert_eq!(xml.status, 400, "{}", xml.body);
    // A tag that starts with white space before a multibyte name, and elements nested past
    // the cap (a body of open tags only), are refused as bodies, not scanned.
    let deep = format!(
        "<D:propfind xmlns:D=\"DAV:\">{}",
        "<D:a>".repeat((64 * 1024 - 40) / 5)
    );
    for (body, says) in [
        (
            "<D:propfind xmlns:D=\"DAV:\">< a\u{e9}/></D:propfind>",
            "starts with white space",
        ),
        (deep.as_str(), "deeper than 32 levels"),
    ] {
        let refused = chem(&[
            "-X",
            "PROPFIND",
            "-H",
            "Depth: 0",
            "--data-binary",
            body,
            &format!("{ws}/"),
        ]);
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(refused.body.contains(says), "{}", refused.body);
    }
    let huge = format!(
        "<D:propfind xmlns:D=\"DAV:\">{}</D:propfind>",
        "<D:prop/>".repeat(10_000)
    );
    let huge_file = sc.join("huge.xml");
    std::fs::write(&huge_file, huge).unwrap();
    let huge_arg = format!("@{}", huge_file.display());
    assert_eq!(
        chem(&[
            "-X",
            "PROPFIND",
            "-H",
            "Depth: 0",
            "--data-binary",
            &huge_arg,
            &format!("{ws}/")
        ])
        .status,
        413
    );
    // The gateway's own temporary file (an upload or a write in progress, here planted as one):
    // never listed, read, moved or deleted by anyone, even its tenant.
    let temp = ".hpcgate-tmp-999-0-0";
    std::fs::write(s.workspace.join(temp), "half an upload").unwrap();
    let listing = chem(&["-X", "PROPFIND", "-H", "Depth: 1", &format!("{ws}/")]);
    assert_eq!(listing.status, 207);
    assert!(!listing.body.contains("hpcgate-tmp"), "{}", listing.body);
    for args in [
        vec![],
        vec!["-X", "DELETE"],
        vec![
            "-X",
            "MOVE",
            "-H",
            "Destination: /dav/instances/run1/workspace/stolen",
        ],
        vec![
            "-X",
            "COPY",
            "-H",
            "Destination: /dav/instances/run1/workspace/stolen",
        ],
    ] {
        let url = format!("{ws}/{temp}");
        let reply = chem(&[args.as_slice(), &[url.as_str()]].concat());
        assert_eq!(reply.status, 403, "{args:?}: {}", reply.body);
        assert!(
            reply.body.contains("temporary files"),
            "{args:?}: {}",
            reply.body
        );
    }
    assert!(s.workspace.join(temp).exists() && !s.workspace.join("stolen").exists());
    // `Overwrite` is `T` or `F` in any case; another value is refused, not read as `T`.
    std::fs::write(s.workspace.join("keep.txt"), "kept").unwrap();
    std::fs::write(s.workspace.join("other.txt"), "other").unwrap();
    let copy_over = |overwrite: &str| {
        chem(&[
            "-X",
            "COPY",
            "-H",
            "Destination: /dav/instances/run1/workspace/keep.txt",
            "-H",
            &format!("Overwrite: {overwrite}"),
            &format!("{ws}/other.txt"),
        ])
    };
    assert_eq!(copy_over("f").status, 412);
    assert_eq!(copy_over("false").status, 400);
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("keep.txt")).unwrap(),
        "kept"
    );
    // Characters XML does not allow, in a lock's owner or a file's name, never reach a
    // listing: it stays well-formed for everyone.
    std::fs::create_dir(s.workspace.join("shared")).unwrap();
    let odd = chem(&["-T", "/dev/null", &format!("{ws}/shared/odd%EF%BF%BFname")]);
    assert_eq!(odd.status, 201, "{}", odd.body);
    let owner = sc.join("owner.xml");
    std::fs::write(
        &owner,
        "<?xml version=\"1.0\"?><D:lockinfo xmlns:D=\"DAV:\"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype><D:owner>bad\u{1}owner</D:owner></D:lockinfo>",
    )
    .unwrap();
    let body = format!("@{}", owner.display());
    // A LOCK is of depth 0 or infinity.
    let lock = chem(&[
        "-X",
        "LOCK",
        "-H",
        "Depth: 1",
        "--data-binary",
        &body,
        &format!("{ws}/keep.txt"),
    ]);
    assert_eq!(lock.status, 400, "{}", lock.body);
    let locked = chem(&[
        "-X",
        "LOCK",
        "--data-binary",
        &body,
        &format!("{ws}/shared"),
    ]);
    assert_eq!(locked.status, 200, "{}", locked.body);
    let listing = chem(&["-X", "PROPFIND", "-H", "Depth: 1", &format!("{ws}/shared/")]);
    assert_eq!(listing.status, 207, "{}", listing.body);
    assert!(
        !listing.body.contains(['\u{1}', '\u{ffff}']) && listing.body.contains("odd"),
        "{:?}",
        listing.body
    );
    // No credentials, a wrong token, a wrong Basic password: 401 with a Basic challenge.
    for args in [
        vec![],
        vec!["-H", "Authorization: Bearer wrong"],
        vec!["-u", "x:wrong"],
    ] {
        let mut all = args.clone();
        let url = format!("{ws}/data.bin");
        all.push(&url);
        let reply = curl(sc, &all);
        assert_eq!(reply.status, 401, "{args:?}");
        assert!(
            reply
                .headers
                .contains("www-authenticate: basic realm=\"hpcgate\""),
            "{}",
            reply.headers
        );
    }
}
