//! State layer, instances: lifecycle, pagination edges, the identifier attack table, crash
//! leftovers, and results that never carry a host path. Real filesystem in temp dirs.

use std::fs;

use hpcgate::state::{
    InstanceId, JobId, NewInstance, PageRequest, State, StateError, TenantName, Timestamp,
};

use crate::support::state as support;
use support::{id, page, state, t};

fn named(name: &str, description: Option<&str>) -> NewInstance {
    NewInstance {
        id: Some(id(name)),
        description: description.map(str::to_owned),
        max_instances: None,
    }
}

#[test]
fn lifecycle_create_update_archive_unarchive_clean() {
    let (_dir, state) = state();
    let chem = t("chem");
    let created = state.create(&chem, named("run1", Some("first"))).unwrap();
    assert_eq!(created.id.as_str(), "run1");
    assert_eq!(created.description.as_deref(), Some("first"));
    assert_eq!(
        (created.workspace, created.output),
        ("/workspace", "/output")
    );
    assert!(!created.archived);

    let again = state.create(&chem, named("run1", None)).unwrap_err();
    assert!(matches!(again, StateError::AlreadyExists { .. }), "{again}");

    let generated = state.create(&chem, NewInstance::default()).unwrap();
    assert!(generated.id.as_str().starts_with("i-"), "{}", generated.id);
    assert_eq!(state.count(&chem).unwrap(), 2);

    // update: None reads, Some(Some) sets, Some(None) and Some("") clear.
    let run1 = id("run1");
    assert_eq!(
        state
            .update(&chem, &run1, None)
            .unwrap()
            .description
            .as_deref(),
        Some("first")
    );
    let set = state
        .update(&chem, &run1, Some(Some("second".into())))
        .unwrap();
    assert_eq!(set.description.as_deref(), Some("second"));
    assert!(set.updated_at >= set.created_at);
    assert_eq!(
        state.update(&chem, &run1, Some(None)).unwrap().description,
        None
    );
    state.update(&chem, &run1, Some(Some("x".into()))).unwrap();
    assert_eq!(
        state
            .update(&chem, &run1, Some(Some(String::new())))
            .unwrap()
            .description,
        None
    );
    let bad = state
        .update(&chem, &run1, Some(Some("a\u{1b}[2J".into())))
        .unwrap_err();
    assert!(
        matches!(bad, StateError::InvalidDescription { .. }),
        "{bad}"
    );

    let archived = state.archive(&chem, &run1, |_| None).unwrap();
    assert!(archived.archived && archived.archived_at.is_some());
    assert!(state.describe(&chem, &run1).unwrap().archived);
    assert_eq!(state.list(&chem, page(10, 0)).unwrap().total, 1);
    let listed = state.list_archived(&chem, page(10, 0)).unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].id, run1);
    // Archived ids are not live ones, and cannot be re-created while archived.
    for err in [
        state
            .update(&chem, &run1, Some(Some("y".into())))
            .unwrap_err(),
        state.instance_paths_ambient(&chem, &run1).unwrap_err(),
        state.archive(&chem, &run1, |_| None).unwrap_err(),
    ] {
        assert!(matches!(err, StateError::Archived { .. }), "{err}");
    }
    let recreate = state.create(&chem, named("run1", None)).unwrap_err();
    assert!(
        matches!(recreate, StateError::AlreadyExists { .. }),
        "{recreate}"
    );

    let back = state.unarchive(&chem, &run1, None).unwrap();
    assert!(!back.archived && back.archived_at.is_none());
    assert_eq!(back.created_at, created.created_at);
    assert!(
        state
            .instance_paths_ambient(&chem, &run1)
            .unwrap()
            .workspace
            .is_dir()
    );
    let missing = state.unarchive(&chem, &run1, None).unwrap_err();
    assert!(matches!(missing, StateError::NotFound { .. }), "{missing}");

    // clean: nothing is older than a past cutoff; everything is older than a future one.
    state.archive(&chem, &run1, |_| None).unwrap();
    assert!(
        state
            .clean_before(&chem, Timestamp::from_unix_ms(0))
            .unwrap()
            .is_empty()
    );
    assert!(state.clean(&chem, 1).unwrap().is_empty());
    let future = Timestamp::from_unix_ms(Timestamp::now().unix_ms() + 60_000);
    assert_eq!(
        state.clean_before(&chem, future).unwrap(),
        vec![run1.clone()]
    );
    assert!(matches!(
        state.describe(&chem, &run1).unwrap_err(),
        StateError::NotFound { .. }
    ));
    assert_eq!(state.list_archived(&chem, page(10, 0)).unwrap().total, 0);
    // The id is free again.
    state.create(&chem, named("run1", None)).unwrap();
}

#[test]
fn quota_counts_live_instances_only() {
    let (_dir, state) = state();
    let chem = t("chem");
    let limited = |name: &str| NewInstance {
        max_instances: Some(2),
        ..named(name, None)
    };
    state.create(&chem, limited("a")).unwrap();
    state.create(&chem, limited("b")).unwrap();
    let err = state.create(&chem, limited("c")).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::QuotaExceeded {
                count: 2,
                max: 2,
                ..
            }
        ),
        "{err}"
    );
    state.archive(&chem, &id("a"), |_| None).unwrap();
    state.create(&chem, limited("c")).unwrap();
    let err = state.unarchive(&chem, &id("a"), Some(2)).unwrap_err();
    assert!(matches!(err, StateError::QuotaExceeded { .. }), "{err}");
}

#[test]
fn pagination_never_produces_an_inverted_range() {
    let (_dir, state) = state();
    let chem = t("chem");
    let empty = state.list(&chem, page(15, 0)).unwrap();
    assert_eq!((empty.total, empty.range()), (0, None));
    assert_eq!(empty.summary("instances"), "no instances");
    for i in 0..15 {
        state
            .create(&chem, named(&format!("r{i:02}"), None))
            .unwrap();
    }
    let all = state.list(&chem, page(15, 0)).unwrap();
    assert_eq!(all.range(), Some((1, 15)));
    let ids: Vec<_> = all.items.iter().map(|i| i.id.to_string()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    let last = state.list(&chem, page(10, 14)).unwrap();
    assert_eq!((last.items.len(), last.range()), (1, Some((15, 15))));
    assert_eq!(last.items[0].id.as_str(), "r14");
    let past = state.list(&chem, page(15, 15)).unwrap();
    assert_eq!((past.items.len(), past.total, past.range()), (0, 15, None));
    assert_eq!(
        past.summary("instances"),
        "no instances at offset 15 (15 in total)"
    );
    let far = state.list(&chem, page(500, usize::MAX)).unwrap();
    assert_eq!(far.range(), None);
    assert!(PageRequest::new(0, 0).is_err());
    assert!(PageRequest::new(501, 0).is_err());
}

/// Hostile ids: each must be refused by the parser, which is the only way into the API.
#[test]
fn identifier_attack_table() {
    let long = "a".repeat(64);
    let hostile: &[&str] = &[
        "",
        "run1/x",
        "../run1",
        "..",
        ".",
        ".hidden",
        "run1\n",
        "run1\r",
        "\nrun1",
        "run1\0",
        "a;b",
        "$(id)",
        "`id`",
        "a b",
        "a\\b",
        "a:b",
        "a.b",
        "a*",
        "Run1",
        "r\u{057d}n1",  // Armenian small letter seh, looks like `u`
        "\u{ff52}un1",  // fullwidth r
        "run1\u{200b}", // zero-width space
        "ru\u{0301}n1", // combining accent
        "-rf",
        "_x",
        &long,
        "output",
        "archived",
        "jobs",
        "instances",
        "tenants",
        "workspace",
    ];
    for raw in hostile {
        let e = InstanceId::parse(raw).expect_err(raw);
        assert!(matches!(e, StateError::InvalidId { .. }), "{raw:?}: {e}");
        let message = e.to_string();
        assert!(
            !message.contains('\n') && !message.contains('\0'),
            "{message:?}"
        );
        assert!(TenantName::parse(raw).is_err(), "{raw:?}");
        assert!(serde_json::from_value::<InstanceId>(serde_json::json!(raw)).is_err());
    }
    for ok in ["run1", "a", "0", "a-b_c", "i-abc", &"a".repeat(63)] {
        InstanceId::parse(ok).expect(ok);
        TenantName::parse(ok).expect(ok);
    }
    for raw in [
        "",
        "j-",
        "j-aaaaaaaaaaaaaaa",
        "j-aaaaaaaaaaaaaaaaa",
        "j-aaaaaaaaaaaaaaa1",
        "j-AAAAAAAAAAAAAAAA",
        "j-aaaaaaaaaaaaaaaa\n",
        "j-../../../../etc",
        "k-aaaaaaaaaaaaaaaa",
        "run1",
    ] {
        assert!(JobId::parse(raw).is_err(), "{raw:?}");
    }
    JobId::parse("j-abcdefghijklmn27").unwrap();
}

#[test]
fn crash_leftovers_are_ignored_then_swept() {
    let (dir, state) = state();
    let chem = t("chem");
    state.create(&chem, named("keep", None)).unwrap();
    let tenant_dir = dir.path().join("state/tenants/chem");
    // A create that crashed before its rename, with complete-looking metadata inside.
    let leftover = tenant_dir.join("instances/.new-run1-abcdefgh");
    fs::create_dir_all(leftover.join("workspace")).unwrap();
    fs::copy(
        tenant_dir.join("instances/keep/meta.json"),
        leftover.join("meta.json"),
    )
    .unwrap();
    // A deletion that crashed after its rename, and junk with invalid names.
    let trash = tenant_dir.join("archived/.trash-old-abcdefgh");
    fs::create_dir_all(trash.join("workspace")).unwrap();
    fs::create_dir_all(tenant_dir.join("instances/Not-Valid")).unwrap();
    fs::write(tenant_dir.join("instances/plainfile"), b"x").unwrap();

    let listed = state.list(&chem, page(10, 0)).unwrap();
    assert_eq!(listed.total, 1);
    assert_eq!(state.count(&chem).unwrap(), 1);
    assert!(matches!(
        state.describe(&chem, &id("run1")).unwrap_err(),
        StateError::NotFound { .. }
    ));
    state.create(&chem, named("run1", None)).unwrap();
    assert!(!leftover.exists(), "create sweeps crashed creates");
    assert!(
        trash.exists(),
        "not trash: a tree can be large, and a create holds the tenant's lock"
    );
    state.clean(&chem, 30).unwrap();
    assert!(!trash.exists(), "clean sweeps trash");
    assert_eq!(state.list(&chem, page(10, 0)).unwrap().total, 2);
}

#[test]
fn an_archived_instance_without_archived_at_is_kept_and_stamped() {
    let (dir, state) = state();
    let chem = t("chem");
    state.create(&chem, named("run1", None)).unwrap();
    // Simulate a crash right after the archive rename: directory moved, metadata not updated.
    let tenant_dir = dir.path().join("state/tenants/chem");
    fs::rename(
        tenant_dir.join("instances/run1"),
        tenant_dir.join("archived/run1"),
    )
    .unwrap();
    let described = state.describe(&chem, &id("run1")).unwrap();
    assert!(described.archived, "the location decides, not the metadata");
    let future = Timestamp::from_unix_ms(Timestamp::now().unix_ms() + 86_400_000);
    assert!(state.clean_before(&chem, future).unwrap().is_empty());
    assert!(
        state
            .describe(&chem, &id("run1"))
            .unwrap()
            .archived_at
            .is_some()
    );
}

#[test]
fn results_and_errors_never_contain_host_paths() {
    let (dir, state) = state();
    let chem = t("chem");
    let root = dir.path().to_str().unwrap();
    let created = state.create(&chem, named("run1", Some("d"))).unwrap();
    let listed = state.list(&chem, page(10, 0)).unwrap();
    let archived = state.archive(&chem, &id("run1"), |_| None).unwrap();
    for json in [
        serde_json::to_string(&created).unwrap(),
        serde_json::to_string(&listed).unwrap(),
        serde_json::to_string(&archived).unwrap(),
    ] {
        assert!(!json.contains(root), "{json}");
    }
    // Make the filesystem fail: a file where the tenant's instances directory should be.
    fs::remove_dir_all(dir.path().join("state/tenants/chem/instances")).unwrap();
    fs::write(dir.path().join("state/tenants/chem/instances"), b"").unwrap();
    let err = state.create(&chem, named("run2", None)).unwrap_err();
    assert!(matches!(err, StateError::Io { .. }), "{err}");
    assert!(!err.to_string().contains(root), "{err}");
}

#[test]
fn directories_are_private_and_symlinks_are_not_instances() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let (dir, state) = state();
    let chem = t("chem");
    state.create(&chem, named("run1", None)).unwrap();
    let base = dir.path().join("state/tenants/chem");
    for sub in [
        "",
        "instances",
        "instances/run1",
        "instances/run1/workspace",
        "archived",
        "jobs",
    ] {
        let mode = fs::metadata(base.join(sub)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{sub}");
    }
    // A symlink in instances/ pointing at a real instance elsewhere is not an instance.
    symlink(base.join("instances/run1"), base.join("instances/alias")).unwrap();
    assert!(matches!(
        state.describe(&chem, &id("alias")).unwrap_err(),
        StateError::NotFound { .. }
    ));
    assert_eq!(state.list(&chem, page(10, 0)).unwrap().total, 1);
}

/// A state directory another user could change is refused when it is opened: one others may
/// write, or one below a directory anyone may write that is not sticky (there it could be
/// moved away and replaced). Below a sticky one (as `/tmp`) it is fine.
#[test]
fn a_state_directory_others_could_change_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let mode = |path: &std::path::Path, mode: u32| {
        fs::create_dir_all(path).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    };
    let shared = tmp.path().join("shared");
    mode(&shared, 0o777);
    let refused = State::open(&shared).expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("may be written by other users"),
        "{refused}"
    );

    let open = tmp.path().join("open");
    mode(&open.join("state"), 0o700);
    mode(&open, 0o777);
    let refused = State::open(open.join("state")).expect_err("refused");
    assert!(
        refused.to_string().contains("which anyone may write"),
        "{refused}"
    );

    let sticky = tmp.path().join("sticky");
    mode(&sticky.join("state"), 0o700);
    mode(&sticky, 0o1777);
    assert!(State::open(sticky.join("state")).is_ok());
}
