//! What no sandbox may see: binds beside the state directory pass; a link to it, a secret in a
//! bound directory, the system directories and `..` are seen through.

use super::super::tests::settings;

#[test]
fn binds_beside_the_state_directory_are_kept_and_a_link_to_it_is_seen() {
    let allowed = settings(&[(
        "/c.toml",
        "state_dir = \"/srv/hpcgate\"\n[sandbox]\nextra_ro_binds = [{ source = \"/srv/data\" }, { source = \"/srv/hpcgate-scratch\" }]\n",
    )]);
    assert!(allowed.is_ok(), "{:?}", allowed.err());

    // A bind through a symbolic link shows what the link names.
    let top = tempfile::tempdir().unwrap();
    let real = top.path().join("real");
    std::fs::create_dir_all(real.join("state")).unwrap();
    std::os::unix::fs::symlink(&real, top.path().join("alias")).unwrap();
    let toml = format!(
        "state_dir = {:?}\n[sandbox]\nextra_ro_binds = [{{ source = {:?}, target = \"/a\" }}]\n",
        real.join("state").display().to_string(),
        top.path().join("alias").display().to_string(),
    );
    let err = settings(&[("/c.toml", &toml)]).unwrap_err().to_string();
    assert!(
        err.contains("`sandbox.extra_ro_binds[0].source`") && err.contains("state directory"),
        "{err}"
    );
}

#[test]
fn what_sandboxes_see_holds_neither_the_state_nor_an_hs256_secret() {
    let jwt = |key_file: &str| {
        format!(
            "[tenants.chem]\n[auth.jwt]\nalgorithm = \"HS256\"\nkey_file = \"{key_file}\"\nissuer = \"i\"\n\
             audience = [\"a\"]\ntenant_claim = \"scope\"\ntenant_map = {{ \"hpc:chem\" = \"chem\" }}\n"
        )
    };
    let cases = [
        // The system directories every sandbox sees.
        ("state_dir = \"/usr/local/var/hpcgate\"\n".to_owned(), "state_dir"),
        (jwt("/usr/local/etc/hpcgate/jwt.key"), "auth.jwt.key_file"),
        // A bind that holds the secret, or `..` that leads into the state directory.
        (
            format!(
                "{}[sandbox]\nextra_ro_binds = [{{ source = \"/etc/hpcgate\", target = \"/e\" }}]\n",
                jwt("/etc/hpcgate/jwt.key")
            ),
            "sandbox.extra_ro_binds[0].source",
        ),
        (
            "state_dir = \"/srv/x/../hpcgate\"\n[sandbox]\nextra_ro_binds = [{ source = \"/srv/hpcgate/tenants\", target = \"/t\" }]\n"
                .to_owned(),
            "sandbox.extra_ro_binds[0].source",
        ),
    ];
    for (toml, key) in cases {
        let err = settings(&[("/c.toml", &toml)]).unwrap_err().to_string();
        assert!(err.contains(&format!("`{key}`")), "{toml}: {err}");
    }
    // A bind beside the secret is fine.
    let fine = format!(
        "{}[sandbox]\nextra_ro_binds = [{{ source = \"/etc/hpcgate-data\", target = \"/d\" }}]\n",
        jwt("/etc/hpcgate/jwt.key")
    );
    let loaded = settings(&[("/c.toml", &fine)]);
    assert!(loaded.is_ok(), "{:?}", loaded.err());
}
