#!/usr/bin/env bash
# package.sh [--binary PATH] [--out DIR] [--no-rpm] [--fast]: build hpcgate's .deb and .rpm.
# --fast compresses with gzip -1 instead of xz (the tests package a debug binary).
#
# Without --binary it builds the release binary first. Both packages hold the same tree:
#   /usr/bin/hpcgate
#   /etc/hpcgate/config.toml                 (a conffile: the site layer over the defaults)
#   /lib/systemd/system/hpcgate.{service,socket}
#   /usr/lib/sysusers.d/hpcgate.conf         (user `hpcgate`, group `hpcgate-users`)
#   /usr/share/man/man1/hpcgate*.1.gz        (generated from the CLI: `hpcgate man`)
#   bash, zsh and fish completions           (`hpcgate completions SHELL`)
#   /usr/share/doc/hpcgate/README.md
# The .deb is made with dpkg-deb, the .rpm with rpmbuild (Debian's `rpm` package; installed
# when missing, as root). Output: DIR (default target/package)/hpcgate_<version>_<arch>.deb and
# hpcgate-<version>-1.<arch>.rpm.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'package: %s\n' "$*" >&2; }
binary=""
out="${CARGO_TARGET_DIR:-target}/package"
rpm=yes
fast=no
while [ $# -gt 0 ]; do
    case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-rpm) rpm=no; shift ;;
    --fast) fast=yes; shift ;;
    *) log "unknown argument \`$1\`; usage: scripts/package.sh [--binary PATH] [--out DIR] [--no-rpm] [--fast]"; exit 2 ;;
    esac
done
if [ -z "$binary" ]; then
    cargo build --release --locked -p hpcgate >&2
    binary="${CARGO_TARGET_DIR:-target}/release/hpcgate"
fi
[ -x "$binary" ] || { log "\`$binary\` is not an executable"; exit 1; }
missing=()
command -v dpkg-deb >/dev/null 2>&1 || missing+=(dpkg)
[ "$rpm" = no ] || command -v rpmbuild >/dev/null 2>&1 || missing+=(rpm)
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || { log "missing ${missing[*]}: apt-get install ${missing[*]}"; exit 1; }
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
arch="$(dpkg --print-architecture)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/root"

install -D -m 0755 "$binary" "$root/usr/bin/hpcgate"
install -D -m 0644 contrib/package/config.toml "$root/etc/hpcgate/config.toml"
install -D -m 0644 contrib/systemd/hpcgate.service "$root/lib/systemd/system/hpcgate.service"
install -D -m 0644 contrib/systemd/hpcgate.socket "$root/lib/systemd/system/hpcgate.socket"
install -D -m 0644 contrib/package/sysusers.conf "$root/usr/lib/sysusers.d/hpcgate.conf"
install -D -m 0644 README.md "$root/usr/share/doc/hpcgate/README.md"
mkdir -p "$root/usr/share/man/man1"
"$binary" man --out "$root/usr/share/man/man1" >/dev/null
gzip -9n "$root"/usr/share/man/man1/*.1
mkdir -p "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d"
"$binary" completions bash >"$root/usr/share/bash-completion/completions/hpcgate"
"$binary" completions zsh >"$root/usr/share/zsh/vendor-completions/_hpcgate"
"$binary" completions fish >"$root/usr/share/fish/vendor_completions.d/hpcgate.fish"

# Debian: control, conffiles, and maintainer scripts. postinst creates the user and group
# (sysusers) and tells systemd about the units; neither is enabled: the admin enables
# hpcgate.socket. An upgrade restarts a running gateway on the new binary (its local jobs run
# on, KillMode=process, and it re-attaches them); a removal stops the units (an admin's enable
# stays, for a reinstall), a purge disables them too; state and audit log are kept, purge
# included, and local jobs run on (their supervisors outlive the gateway).
mkdir -p "$root/DEBIAN"
cat >"$root/DEBIAN/control" <<EOF
Package: hpcgate
Version: $version
Architecture: $arch
Maintainer: hpcgate developers <hpcgate@example.invalid>
Depends: bubblewrap, libc6
Recommends: systemd
Suggests: slurm-client
Section: admin
Priority: optional
Installed-Size: $(du -sk "$root" | cut -f1)
Description: MCP gateway that lets AI agents use an HPC cluster safely
 Every tool call is judged by WebAssembly policies, run in a bubblewrap
 sandbox, as a Slurm job or as a capability-scoped file operation, and
 recorded in a tamper-evident audit log that can be replayed offline.
EOF
echo /etc/hpcgate/config.toml >"$root/DEBIAN/conffiles"
cat >"$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -z "${DPKG_ROOT:-}" ]; then
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers hpcgate.conf
    fi
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
        if [ -n "${2:-}" ]; then
            systemctl try-restart hpcgate.service || true
        fi
    fi
fi
EOF
cat >"$root/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
    systemctl stop hpcgate.socket hpcgate.service || true
fi
EOF
cat >"$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = purge ] && [ -z "${DPKG_ROOT:-}" ]; then
    # The unit files are gone: what enabling them made is removed by hand.
    rm -f /etc/systemd/system/sockets.target.wants/hpcgate.socket \
        /etc/systemd/system/multi-user.target.wants/hpcgate.service
fi
if { [ "$1" = remove ] || [ "$1" = purge ]; } && [ -z "${DPKG_ROOT:-}" ] \
    && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
deb="$out/hpcgate_${version}_${arch}.deb"
if [ "$fast" = yes ]; then deb_z=(-Zgzip -z1); rpm_z="w1.gzdio"; else deb_z=(-Zxz); rpm_z="w6.xzdio"; fi
dpkg-deb --root-owner-group "${deb_z[@]}" --build "$root" "$deb" >&2
rm -rf "$root/DEBIAN"
log "built $deb"

if [ "$rpm" = yes ]; then
    rpm_arch="$(uname -m)"
    files="$(cd "$root" && find . -type f | sed 's|^\.||' | sort | sed 's|^/etc/hpcgate/config.toml$|%config(noreplace) &|')"
    cat >"$stage/hpcgate.spec" <<EOF
Name: hpcgate
Version: $version
Release: 1
Summary: MCP gateway that lets AI agents use an HPC cluster safely
License: Apache-2.0
Requires: bubblewrap
%description
Every tool call is judged by WebAssembly policies, run in a bubblewrap sandbox, as a Slurm
job or as a capability-scoped file operation, and recorded in a tamper-evident audit log.
%install
cp -a $root/. %{buildroot}/
%post
if [ -d /run/systemd/system ]; then systemctl daemon-reload || :; fi
if command -v systemd-sysusers >/dev/null 2>&1; then systemd-sysusers hpcgate.conf; fi
%preun
if [ "\$1" -eq 0 ] && [ -d /run/systemd/system ]; then
    systemctl disable --now hpcgate.socket hpcgate.service || :
fi
%postun
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || :
    if [ "\$1" -ge 1 ]; then systemctl try-restart hpcgate.service || :; fi
fi
%files
$files
EOF
    rpmbuild --quiet -bb --target "$rpm_arch" \
        --define "_topdir $stage/rpm" --define "_rpmdir $out" \
        --define "_build_id_links none" --define "__os_install_post %{nil}" \
        --define "_binary_payload $rpm_z" \
        "$stage/hpcgate.spec" >&2
    mv "$out/$rpm_arch/hpcgate-$version-1.$rpm_arch.rpm" "$out/"
    rmdir "$out/$rpm_arch" 2>/dev/null || true
    log "built $out/hpcgate-$version-1.$rpm_arch.rpm"
fi
