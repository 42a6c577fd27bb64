//! Unit tests of parsing, layering, removal and resolution (no file outside temp dirs is read).

use std::path::PathBuf;

use super::*;

fn env() -> Environment {
    Environment {
        home: Some(PathBuf::from("/home/u")),
        ..Environment::default()
    }
}

fn layered(layers: &[(&str, &str)]) -> Result<(Config, Origins), ConfigError> {
    let mut texts = vec![(None, DEFAULT_CONFIG.to_owned())];
    texts.extend(
        layers
            .iter()
            .map(|(path, text)| (Some(PathBuf::from(path)), (*text).to_owned())),
    );
    let (merged, origins) = merge_texts(&texts, &env())?;
    Ok((Config::from_merged(merged, &origins)?, origins))
}

pub(super) fn settings(layers: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let (config, origins) = layered(layers)?;
    Settings::resolve(&config, &env(), &origins)
}

#[test]
fn unknown_keys_are_named_with_their_dotted_path() {
    let err = Config::parse("[policy_engine]\ndeadline = 3\n", "x.toml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "`x.toml`: unknown key `policy_engine.deadline`; remove it or check its spelling"
    );
    let err = Config::parse(
        "[[policies]]\nname = \"a\"\nmodule = \"stock:tool-filter\"\nmdoe = \"monitor\"\n",
        "x.toml",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("unknown key `policies[0].mdoe`"),
        "{err}"
    );
    let err = Config::parse("bogus = 1\n", "x.toml").unwrap_err();
    assert!(err.to_string().contains("unknown key `bogus`"), "{err}");
    let err = Config::parse("[dav]\nenable = true\n", "x.toml").unwrap_err();
    assert!(
        err.to_string().contains("unknown key `dav.enable`"),
        "{err}"
    );
}

#[test]
fn dav_is_off_by_default_and_its_cap_must_be_positive() {
    let on = settings(&[("x.toml", "[dav]\nenabled = true\n")]).unwrap();
    assert!(on.dav.enabled && on.dav.max_upload_bytes == 64 << 30);
    assert!(!settings(&[("x.toml", "")]).unwrap().dav.enabled);
    let err = settings(&[("x.toml", "[dav]\nmax_upload_bytes = 0\n")]).unwrap_err();
    assert!(err.to_string().contains("dav.max_upload_bytes"), "{err}");
    let extra = |body: &str| settings(&[("x.toml", &format!("[dav.extras.ref]\n{body}"))]);
    let ok = extra("path = \"/srv/ref\"\n").unwrap();
    let tenant = crate::state::TenantName::parse("chem").unwrap();
    assert!(ok.dav.extras["ref"].visible_to(&tenant));
    let only_bio = extra("path = \"/srv/ref\"\ntenants = [\"bio\"]\n").unwrap();
    assert!(!only_bio.dav.extras["ref"].visible_to(&tenant));
    for (body, key) in [
        ("path = \"/srv/ref\"\nro = false\n", "dav.extras.ref.ro"),
        ("path = \"srv/ref\"\n", "dav.extras.ref.path"),
        ("ro = true\n", "dav.extras.ref.path"),
        (
            "path = \"/srv\"\nwritable = true\n",
            "dav.extras.ref.writable",
        ),
    ] {
        let err = extra(body).unwrap_err().to_string();
        assert!(err.contains(key), "{body}: {err}");
    }
    let err = settings(&[("x.toml", "[dav.extras.instances]\npath = \"/srv\"\n")]).unwrap_err();
    assert!(err.to_string().contains("dav.extras.instances"), "{err}");
}

#[test]
fn wrong_types_name_the_key() {
    let err = Config::parse(
        "[[policies]]\nname = \"a\"\nmodule = \"stock:x\"\nmode = \"loud\"\n",
        "x.toml",
    )
    .unwrap_err();
    assert!(err.to_string().contains("policies[0].mode"), "{err}");
}

#[test]
fn the_defaults_alone_resolve_to_a_login_node_setup() {
    let s = settings(&[]).unwrap();
    assert_eq!(s.stdio_tenant.as_str(), "default");
    assert_eq!(
        s.fixed.state_dir,
        PathBuf::from("/home/u/.local/share/hpcgate")
    );
    assert_eq!(s.fixed.audit_dir, s.fixed.state_dir.join("audit"));
    assert_eq!(s.result_type, ResultType::Both);
    let names: Vec<_> = s.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["tools", "paths", "caps"]);
    assert!(s.fixed.slurm.is_none() && s.single_tenant() && s.host_commands.is_empty());
    assert_eq!(
        s.fixed.sandbox.network,
        hpcgate_executors::sandbox::Network::None
    );
    assert_eq!(
        s.fixed.sandbox.limits,
        hpcgate_executors::sandbox::Limits::default()
    );
    assert_eq!(s.files, hpcgate_executors::files::FileLimits::default());
    // The code's fallbacks agree with the embedded file.
    let bare = Settings::resolve(&Config::default(), &env(), &Origins::single("x")).unwrap();
    assert_eq!(bare.fixed.sandbox, s.fixed.sandbox);
    assert_eq!(
        bare.fixed.audit.max_file_bytes,
        s.fixed.audit.max_file_bytes
    );
}

#[test]
fn xdg_data_home_moves_the_default_state_dir() {
    let env = Environment {
        data_home: Some(PathBuf::from("/data")),
        ..env()
    };
    assert_eq!(
        env.default_state_dir(),
        Some(PathBuf::from("/data/hpcgate"))
    );
    let relative = Environment {
        data_home: Some(PathBuf::from("rel")),
        ..env.clone()
    };
    assert_eq!(
        relative.default_state_dir(),
        Some(PathBuf::from("/home/u/.local/share/hpcgate")),
        "a relative XDG_DATA_HOME is ignored"
    );
}

#[test]
fn tables_merge_and_lists_replace() {
    let s = settings(&[
        (
            "/etc/u.toml",
            "[sandbox.limits]\ncpus = 4\n[sandbox]\nenv_allow = [\"LANG\"]\n",
        ),
        ("/x/top.toml", "[sandbox.limits]\nmemory_mb = 1024\n"),
    ])
    .unwrap();
    assert_eq!(s.fixed.sandbox.limits.cpus, 4);
    assert_eq!(s.fixed.sandbox.limits.memory_mb, 1024);
    assert_eq!(s.fixed.sandbox.limits.pids, 256, "untouched default stays");
    assert_eq!(s.fixed.sandbox.env_allow, ["LANG"]);

    let s = settings(&[(
        "/x/top.toml",
        "[[policies]]\nname = \"only\"\nmodule = \"stock:tool-filter\"\n",
    )])
    .unwrap();
    let names: Vec<_> = s.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["only"],
        "a layer's [[policies]] replaces the default chain"
    );
    assert!(
        settings(&[("/x/top.toml", "policies = []\n")])
            .unwrap()
            .policies
            .is_empty()
    );
}

#[test]
fn a_higher_layer_removes_a_keyed_entry_with_false() {
    let lower = "[proxied_mcps.fs]\ncommand = \"npx\"\ninclude = [\"read_*\"]\n\
                 [host_commands.quota]\nargv = [\"/usr/bin/quota\"]\n\
                 [tenants.chem]\nunix_uids = [1001]\n";
    let s = settings(&[("/u.toml", lower)]).unwrap();
    assert!(s.fixed.proxied_mcps.contains_key("fs") && s.host_commands.contains_key("quota"));
    assert_eq!(s.policies.last().unwrap().name, "proxied_mcps");
    let s = settings(&[
        ("/u.toml", lower),
        ("/top.toml", "proxied_mcps.fs = false\nhost_commands.quota = false\n[tenants]\nchem = false\nbio = false\n"),
    ])
    .unwrap();
    assert!(s.fixed.proxied_mcps.is_empty() && s.host_commands.is_empty() && s.tenants.is_empty());
    assert_eq!(s.policies.len(), 3, "no implicit proxy filter is left");
    // A removed entry can be added back by a still higher layer, and `false` elsewhere is a value.
    let s = settings(&[
        (
            "/u.toml",
            "proxied_mcps.fs = false\n[slurm]\nenabled = false\n",
        ),
        ("/top.toml", "[proxied_mcps.fs]\ncommand = \"other\"\n"),
    ])
    .unwrap();
    assert_eq!(s.fixed.proxied_mcps["fs"].argv, ["other"]);
}

#[test]
fn errors_after_merging_name_the_file_the_key_came_from() {
    let err = layered(&[
        (
            "/home/u/.config/hpcgate/config.toml",
            "[sandbox]\nnetwrok = \"host\"\n",
        ),
        ("/x/top.toml", "[sandbox.limits]\ncpus = 2\n"),
    ])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`/home/u/.config/hpcgate/config.toml`: unknown key `sandbox.netwrok`; remove it or check its spelling"
    );
    let err = layered(&[("/x/top.toml", "[mcp]\nresult_type = \"html\"\n")]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("`/x/top.toml`: key `mcp.result_type`"),
        "{err}"
    );
    let err = settings(&[
        ("/u.toml", "[sandbox.limits]\npids = 0\n"),
        ("/t.toml", "[sandbox.limits]\ncpus = 2\n"),
    ])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`/u.toml`: key `sandbox.limits.pids`: must be positive"
    );
    let err = layered(&[("/t.toml", "[sandbox]\nbogus = 1\n")]).unwrap_err();
    assert!(err.to_string().starts_with("`/t.toml`"), "{err}");
    let err = layered(&[("/t.toml", "x = ")]).unwrap_err();
    assert!(
        err.to_string().starts_with("`/t.toml` is not valid TOML"),
        "{err}"
    );
}

#[test]
fn paths_are_relative_to_their_file_and_tilde_is_home() {
    let s = settings(&[(
        "/etc/hpc/top.toml",
        "state_dir = \"state\"\n[sandbox]\nbwrap = \"~/bin/bwrap\"\nextra_ro_binds = [{ source = \"data\", target = \"/data\" }, { source = \"/scratch\" }]\n\
         [[policies]]\nname = \"mine\"\nmodule = \"p/mine.wasm\"\n[[policies]]\nname = \"t\"\nmodule = \"stock:tool-filter\"\n",
    )])
    .unwrap();
    assert_eq!(s.fixed.state_dir, PathBuf::from("/etc/hpc/state"));
    assert_eq!(s.fixed.sandbox.bwrap, PathBuf::from("/home/u/bin/bwrap"));
    assert_eq!(
        s.fixed.sandbox.extra_ro_binds[0].source,
        PathBuf::from("/etc/hpc/data")
    );
    assert_eq!(
        s.fixed.sandbox.extra_ro_binds[1].target,
        PathBuf::from("/scratch")
    );
    assert_eq!(s.policies[0].module, "/etc/hpc/p/mine.wasm");
    assert_eq!(s.policies[1].module, "stock:tool-filter");
}

#[test]
fn gateway_keys_are_validated() {
    let cases = [
        ("stdio_tenant = \"Bad Name\"\n", "stdio_tenant"),
        (
            "[sandbox]\nextra_ro_binds = [{ source = \"/d\", target = \"/workspace/d\" }]\n",
            "sandbox.extra_ro_binds[0].target",
        ),
        // `..` would take a bind where the check of the written path does not look.
        (
            "[sandbox]\nextra_ro_binds = [{ source = \"/d\", target = \"/opt/../workspace/d\" }]\n",
            "sandbox.extra_ro_binds[0].target",
        ),
        (
            "[sandbox]\nextra_ro_binds = [{ source = \"/usr/../tmp\" }]\n",
            "sandbox.extra_ro_binds[0].target",
        ),
        ("[sandbox]\nenv_allow = [\"A=B\"]\n", "sandbox.env_allow"),
        (
            "[slurm]\nenabled = true\npartition = \"a;b\"\n",
            "slurm.partition",
        ),
        ("[files]\nmax_read_bytes = 0\n", "files.max_read_bytes"),
        ("[audit]\nmax_file_bytes = 0\n", "audit.max_file_bytes"),
        ("[host_commands.q]\nargv = []\n", "host_commands.q.argv"),
        (
            "[host_commands.q]\nargv = [\"quota\"]\n",
            "host_commands.q.argv",
        ),
        ("[host_commands.Q]\nargv = [\"/q\"]\n", "host_commands.Q"),
        (
            "[host_commands.q]\nargv = [\"/q\"]\ntimeout_s = 0\n",
            "host_commands.q.timeout_s",
        ),
        ("[tenants.Chem]\n", "tenants.Chem"),
        ("[tenants.output]\n", "tenants.output"),
        (
            "[tenants.chem]\ntokens = [{ label = \"a\", sha256 = \"abc\" }]\n",
            "tenants.chem.tokens[0].sha256",
        ),
        (
            "[tenants.chem]\nquotas = { max_instances = 0 }\n",
            "tenants.chem.quotas.max_instances",
        ),
        (
            "[tenants.a]\nunix_uids = [7]\n[tenants.b]\nunix_uids = [7]\n",
            "tenants.b.unix_uids",
        ),
        (
            "[[policies]]\nname = \"a\"\nmodule = \"stock:tool-filter\"\n[[policies]]\nname = \"a\"\nmodule = \"stock:path-rules\"\n",
            "policies[1].name",
        ),
    ];
    for (text, key) in cases {
        let err = settings(&[("/t.toml", text)]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("`/t.toml`: key `{key}`: ")),
            "{text:?} → {err}"
        );
    }
}

#[test]
fn tenants_resolve_with_hashed_tokens_and_quotas() {
    let hash = "AB".repeat(32);
    let s = settings(&[(
        "/t.toml",
        &format!(
            "[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{hash}\" }}]\nunix_uids = [1001]\n\
             quotas = {{ max_instances = 20, max_running_jobs = 4 }}\n[tenants.bio]\n"
        ),
    )])
    .unwrap();
    let chem = &s.tenants[&crate::state::TenantName::parse("chem").unwrap()];
    assert_eq!(chem.tokens[0].sha256, [0xab; 32]);
    assert_eq!(chem.quotas.max_instances, Some(20));
    assert_eq!(chem.quotas.max_running_jobs, Some(4));
    assert_eq!(s.tenants.len(), 2);
    assert!(!s.single_tenant());
}

#[test]
fn slurm_settings_resolve_only_when_enabled() {
    let s = settings(&[(
        "/t.toml",
        "[slurm]\nenabled = true\npartition = \"cpu\"\nbin_dir = \"/opt/slurm/bin\"\ncommand_timeout_s = 5\n",
    )])
    .unwrap();
    let slurm = s.fixed.slurm.unwrap();
    assert_eq!(slurm.partition.as_deref(), Some("cpu"));
    assert_eq!(slurm.client.bin_dir, Some(PathBuf::from("/opt/slurm/bin")));
    assert_eq!(slurm.client.timeout, std::time::Duration::from_secs(5));
}

#[test]
fn proxied_mcps_resolve_and_bad_entries_name_the_key() {
    let s = settings(&[(
        "/c.toml",
        "[proxied_mcps.fs]\ncommand = \"npx\"\nargs = [\"-y\", \"srv\"]\nenv = { A = \"1\" }\n\
         idle_timeout = 0\ncall_timeout = 2.5\nnetwork = \"host\"\nbinds = [\"/opt/mcp\"]\n",
    )])
    .unwrap();
    let fs = &s.fixed.proxied_mcps["fs"];
    assert_eq!(fs.argv, ["npx", "-y", "srv"]);
    assert_eq!(fs.env, [("A".to_owned(), "1".to_owned())]);
    assert_eq!(fs.idle_timeout, None, "0 = never");
    assert_eq!(fs.call_timeout, std::time::Duration::from_millis(2500));
    assert_eq!(fs.network, hpcgate_executors::sandbox::Network::Host);
    assert_eq!(fs.binds[0].target, PathBuf::from("/opt/mcp"));
    assert_eq!(fs.max_result_bytes, s.fixed.sandbox.limits.output_bytes);

    for (toml, key) in [
        (
            "[proxied_mcps.a__b]\ncommand = \"x\"\n",
            "proxied_mcps.a__b",
        ),
        (
            "[proxied_mcps.fs]\nargs = [\"x\"]\n",
            "proxied_mcps.fs.command",
        ),
        (
            "[proxied_mcps.fs]\ncommand = \" \"\n",
            "proxied_mcps.fs.command",
        ),
        (
            "[proxied_mcps.fs]\ncommand = \"x\"\nargs = [\"a\\u0000b\"]\n",
            "proxied_mcps.fs.args",
        ),
        (
            "[proxied_mcps.fs]\ncommand = \"x\"\nnetwork = \"lan\"\n",
            "proxied_mcps.fs.network",
        ),
        (
            "[proxied_mcps.fs]\ncommand = \"x\"\nbinds = [\"rel\"]\n",
            "proxied_mcps.fs.binds[0]",
        ),
        (
            "[proxied_mcps.fs]\ncommand = \"x\"\nbinds = [\"/workspace/x\"]\n",
            "proxied_mcps.fs.binds[0]",
        ),
        (
            "[proxied_mcps.fs]\ncommand = \"x\"\nbinds = [\"/opt/../output\"]\n",
            "proxied_mcps.fs.binds[0]",
        ),
        (
            "[proxied_mcps.fs]\ncommand = \"x\"\ncall_timeout = -1\n",
            "proxied_mcps.fs.call_timeout",
        ),
        // Binds that would show a sandbox the state directory (`/home/u/.local/share/hpcgate`
        // by default here), from above or from inside.
        (
            "[sandbox]\nextra_ro_binds = [{ source = \"/scratch\" }, { source = \"/home\", target = \"/h\" }]\n",
            "sandbox.extra_ro_binds[1].source",
        ),
        (
            "state_dir = \"/srv/hpcgate\"\n[sandbox]\nextra_ro_binds = [{ source = \"/srv/hpcgate/tenants/chem\", target = \"/c\" }]\n",
            "sandbox.extra_ro_binds[0].source",
        ),
        (
            "state_dir = \"/srv/hpcgate\"\n[proxied_mcps.fs]\ncommand = \"x\"\nbinds = [\"/srv\"]\n",
            "proxied_mcps.fs.binds[0]",
        ),
        (
            "[proxied_mcps.fs]\ncommand = \"x\"\nenv = { \"A-B\" = \"1\" }\n",
            "proxied_mcps.fs.env.A-B",
        ),
    ] {
        let err = settings(&[("/c.toml", toml)]).unwrap_err().to_string();
        assert!(err.contains(&format!("`{key}`")), "{toml}: {err}");
    }
}

#[test]
fn fixed_settings_name_exactly_what_differs() {
    let base = settings(&[]).unwrap();
    assert!(
        base.fixed
            .differences(&settings(&[]).unwrap().fixed)
            .is_empty()
    );
    assert_eq!(base.fixed, settings(&[]).unwrap().fixed);
    let changed = settings(&[(
        "x.toml",
        "state_dir = \"/srv/hpcgate\"\n[sandbox]\nnetwork = \"host\"\n[policy_engine]\ncache_dir = \"/srv/cache\"\n",
    )])
    .unwrap();
    assert_eq!(
        base.fixed.differences(&changed.fixed),
        ["state_dir", "audit_dir", "sandbox", "engine"]
    );
    // What a reload may change is not part of the comparison.
    let reloadable = settings(&[("x.toml", "[files]\nmax_read_bytes = 7\n")]).unwrap();
    assert_eq!(base.fixed, reloadable.fixed);
}

#[test]
fn checkpoint_export_needs_an_interval_and_a_sink_outside_the_state_dir() {
    let state = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let config = |audit: &str| {
        format!(
            "state_dir = \"{}\"\n[audit]\n{audit}\n",
            state.path().display()
        )
    };
    let ok = settings(&[(
        "/etc/x.toml",
        &config(&format!(
            "checkpoint_every = \"10m\"\ncheckpoint_sink = \"{}/cps.jsonl\"",
            outside.path().display()
        )),
    )])
    .unwrap();
    assert_eq!(
        ok.fixed.audit.checkpoints,
        Some(crate::audit::CheckpointOptions {
            every: std::time::Duration::from_secs(600),
            sink: crate::audit::CheckpointSink::File(outside.path().join("cps.jsonl")),
        })
    );
    let syslog = settings(&[(
        "/etc/x.toml",
        &config("checkpoint_every = \"1h\"\ncheckpoint_sink = \"syslog\""),
    )])
    .unwrap();
    assert_eq!(
        syslog.fixed.audit.checkpoints.unwrap().sink,
        crate::audit::CheckpointSink::Syslog
    );
    std::fs::create_dir(state.path().join("sub")).unwrap();
    std::os::unix::fs::symlink(state.path().join("sub"), outside.path().join("link")).unwrap();
    for (audit, key, says) in [
        (
            format!(
                "checkpoint_every = \"10m\"\ncheckpoint_sink = \"{}/audit/cps\"",
                state.path().display()
            ),
            "audit.checkpoint_sink",
            "inside the state directory",
        ),
        (
            format!(
                "checkpoint_every = \"10m\"\ncheckpoint_sink = \"{}/link/cps\"",
                outside.path().display()
            ),
            "audit.checkpoint_sink",
            "inside the state directory",
        ),
        (
            "checkpoint_every = \"10m\"".to_owned(),
            "audit.checkpoint_sink",
            "needs a `checkpoint_sink`",
        ),
        (
            "checkpoint_sink = \"syslog\"".to_owned(),
            "audit.checkpoint_every",
            "needs a `checkpoint_every`",
        ),
        (
            "checkpoint_every = \"10 minutes\"\ncheckpoint_sink = \"syslog\"".to_owned(),
            "audit.checkpoint_every",
            "not an interval",
        ),
        (
            "checkpoint_every = \"0s\"\ncheckpoint_sink = \"syslog\"".to_owned(),
            "audit.checkpoint_every",
            "not an interval",
        ),
        (
            "checkpoint_every = \"1m\"\ncheckpoint_sink = \"cps.jsonl\"".to_owned(),
            "audit.checkpoint_sink",
            "absolute path",
        ),
    ] {
        let error = settings(&[("/etc/x.toml", &config(&audit))])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(key) && error.contains(says),
            "{audit}: {error}"
        );
    }
}

#[test]
fn closed_segments_are_compressed_only_when_asked() {
    let state = tempfile::tempdir().unwrap();
    let config = |audit: &str| {
        format!(
            "state_dir = \"{}\"\n[audit]\n{audit}\n",
            state.path().display()
        )
    };
    for (audit, compress) in [
        ("", false),
        ("compress = \"none\"", false),
        ("compress = \"zstd\"", true),
    ] {
        let s = settings(&[("/etc/x.toml", &config(audit))]).unwrap();
        assert_eq!(s.fixed.audit.compress, compress, "{audit}");
    }
    let error = settings(&[("/etc/x.toml", &config("compress = \"gzip\""))])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("audit.compress") && error.contains("`gzip` is not a compression"),
        "{error}"
    );
}

#[test]
fn a_peers_share_of_connections_is_at_most_all_of_them() {
    let limits = |text: &str| settings(&[("/t.toml", text)]).map(|s| s.fixed.connections);
    let default = limits("").unwrap();
    assert_eq!((default.max, default.per_peer), (512, 128));
    // A lower `max_connections` lowers the default share with it.
    let few = limits("[http]\nmax_connections = 64\n").unwrap();
    assert_eq!((few.max, few.per_peer), (64, 64));
    let err = limits("[http]\nmax_connections = 64\nmax_connections_per_peer = 65\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "`/t.toml`: key `http.max_connections_per_peer`: must be at most `http.max_connections` (64)"
    );
}
