//! `scripts/package.sh`: the .deb installs (with dpkg, into a private root) and the installed
//! binary passes `doctor` and `config check` with the installed configuration; the .rpm lists
//! the same files; manual pages and completions come from the CLI.

use std::path::Path;
use std::process::Command;

const FILES: [&str; 9] = [
    "/usr/bin/hpcgate",
    "/etc/hpcgate/config.toml",
    "/lib/systemd/system/hpcgate.service",
    "/lib/systemd/system/hpcgate.socket",
    "/usr/lib/sysusers.d/hpcgate.conf",
    "/usr/share/man/man1/hpcgate.1.gz",
    "/usr/share/man/man1/hpcgate-run.1.gz",
    "/usr/share/bash-completion/completions/hpcgate",
    "/usr/share/zsh/vendor-completions/_hpcgate",
];

fn run(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{command:?}: {said}");
    said
}

#[test]
fn the_packages_install_and_the_installed_gateway_passes_doctor() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = dir.path().join("out");
    run(Command::new(workspace.join("scripts/package.sh"))
        .args(["--fast", "--binary", env!("CARGO_BIN_EXE_hpcgate"), "--out"])
        .arg(&out));
    let deb = out.join("hpcgate_0.1.0_amd64.deb");
    let rpm = out.join("hpcgate-0.1.0-1.x86_64.rpm");

    // dpkg installs into a root of its own: a package database there, the maintainer script
    // run outside it with DPKG_ROOT set (which it honours by changing nothing).
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("var/lib/dpkg/info")).unwrap();
    std::fs::create_dir_all(root.join("var/lib/dpkg/updates")).unwrap();
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-depends", "--force-script-chrootless", "-i"])
        .arg(&deb));
    let listed = run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["-L", "hpcgate"]));
    let conffiles = std::fs::read_to_string(root.join("var/lib/dpkg/info/hpcgate.conffiles"));
    assert_eq!(conffiles.unwrap().trim(), "/etc/hpcgate/config.toml");
    for file in FILES {
        assert!(listed.lines().any(|l| l == file), "{file} not in\n{listed}");
        let installed = root.join(file.trim_start_matches('/'));
        assert!(
            std::fs::metadata(&installed).unwrap().len() > 0,
            "{file} is empty"
        );
    }

    let hpcgate = root.join("usr/bin/hpcgate");
    let config = root.join("etc/hpcgate/config.toml");
    let checked = run(Command::new(&hpcgate)
        .args(["config", "check", "--config"])
        .arg(&config)
        .env("HOME", dir.path()));
    assert!(checked.contains("policies"), "{checked}");
    // doctor with the installed configuration, its state directory moved into this test.
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "state_dir = \"/var/lib/hpcgate\"",
        &format!(
            "state_dir = {:?}",
            dir.path().join("state").display().to_string()
        ),
    );
    let cache = dir.path().join("cache").display().to_string();
    let text = text.replace("/var/cache/hpcgate/policies", &cache);
    let local = dir.path().join("doctor.toml");
    std::fs::write(&local, text).unwrap();
    let doctor = run(Command::new(&hpcgate)
        .args(["doctor", "--config"])
        .arg(&local)
        .env("HOME", dir.path()));
    assert!(doctor.contains("all required checks passed"), "{doctor}");

    let info = run(Command::new("rpm").arg("-qip").arg(&rpm));
    assert!(info.contains("Name        : hpcgate"), "{info}");
    let rpm_files = run(Command::new("rpm").arg("-qlp").arg(&rpm));
    for file in FILES {
        assert!(
            rpm_files.lines().any(|l| l == file),
            "{file} not in\n{rpm_files}"
        );
    }
    let config_files = run(Command::new("rpm").arg("-qcp").arg(&rpm));
    assert_eq!(config_files.trim(), "/etc/hpcgate/config.toml");

    if crate::support::root_else_skip("running maintainer scripts in a mount namespace") {
        scripts_restart_on_upgrade_and_stop_on_removal(dir.path(), &deb, &rpm);
    }
}

/// The maintainer scripts of both packages, as a machine running systemd runs them: a fresh
/// install tells systemd about the units and starts nothing; an upgrade restarts a running
/// gateway on the new binary; a removal stops and disables the units; nothing else asks
/// anything of systemd.
fn scripts_restart_on_upgrade_and_stop_on_removal(dir: &Path, deb: &Path, rpm: &Path) {
    let control = dir.join("control");
    run(Command::new("dpkg-deb").arg("-e").arg(deb).arg(&control));
    let reload = "systemctl daemon-reload";
    let restart = "systemctl try-restart hpcgate.service";
    let stop = "systemctl stop hpcgate.socket hpcgate.service";
    let disable = "systemctl disable --now hpcgate.socket hpcgate.service";
    let sysusers = "systemd-sysusers hpcgate.conf";
    let deb_table: [(&str, &[&str], &[&str]); 7] = [
        ("postinst", &["configure", ""], &[sysusers, reload]),
        (
            "postinst",
            &["configure", "0.0.9"],
            &[sysusers, reload, restart],
        ),
        ("prerm", &["upgrade", "0.1.1"], &[]),
        ("prerm", &["remove"], &[stop]),
        ("postrm", &["upgrade", "0.1.1"], &[]),
        ("postrm", &["remove"], &[reload]),
        ("postrm", &["purge"], &[reload]),
    ];
    for (script, args, asked) in deb_table {
        let got = asks_of_systemd(dir, &control.join(script), args);
        assert_eq!(got, asked, "deb {script} {args:?}");
    }
    // `rpm --scripts` prints each scriptlet under a heading of its own (on stdout: anything
    // on stderr must not be taken for a script).
    let listed = Command::new("rpm")
        .args(["-qp", "--scripts"])
        .arg(rpm)
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    let scripts = String::from_utf8(listed.stdout).unwrap();
    let mut scriptlets = std::collections::HashMap::new();
    let mut current = None;
    for line in scripts.lines() {
        if let Some((name, _)) = line.split_once(" scriptlet (using /bin/sh):") {
            current = Some(name.to_owned());
            continue;
        }
        if let Some(name) = &current {
            let text: &mut String = scriptlets.entry(name.clone()).or_default();
            text.push_str(line);
            text.push('\n');
        }
    }
    let rpm_table: [(&str, &str, &[&str]); 5] = [
        ("postinstall", "1", &[reload, sysusers]),
        ("preuninstall", "1", &[]),
        ("preuninstall", "0", &[disable]),
        ("postuninstall", "1", &[reload, restart]),
        ("postuninstall", "0", &[reload]),
    ];
    for (name, count, asked) in rpm_table {
        let file = dir.join(format!("rpm-{name}"));
        std::fs::write(&file, &scriptlets[name]).unwrap();
        let got = asks_of_systemd(dir, &file, &[count]);
        assert_eq!(got, asked, "rpm {name} {count}");
    }
}

/// What the shell script `script` run with `args` asks of systemd, in a mount namespace of its
/// own where `/run/systemd/system` exists (systemd runs) and `systemctl` and
/// `systemd-sysusers` only write down their arguments.
fn asks_of_systemd(dir: &Path, script: &Path, args: &[&str]) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let fake = dir.join("fake-bin");
    std::fs::create_dir_all(&fake).unwrap();
    for program in ["systemctl", "systemd-sysusers"] {
        let path = fake.join(program);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho \"{program} $*\" >>\"$ASKED\"\n"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let asked = dir.join("asked");
    let _ = std::fs::remove_file(&asked);
    let systemd_runs = "mount -t tmpfs none /run && mkdir -p /run/systemd/system && exec sh \"$@\"";
    run(Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            systemd_runs,
            "sh",
        ])
        .arg(script)
        .args(args)
        .env(
            "PATH",
            format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", fake.display()),
        )
        .env("ASKED", &asked)
        .env_remove("DPKG_ROOT"));
    let text = std::fs::read_to_string(&asked).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}
