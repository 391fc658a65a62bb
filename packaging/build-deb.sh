#!/usr/bin/env bash
# Builds fire-agent's Debian package from a fire-agent binary (the Embedded build for boards,
# cross/embedded/build.sh), with dpkg-deb alone:
#   /usr/bin/fire-agent
#   /lib/systemd/system/fire-agent.service (runs as the fire-agent user), fire-agent-firmware@.service
#   /usr/lib/sysusers.d/fire-agent.conf     the fire-agent user, the fire-spool group
#   /usr/lib/tmpfiles.d/fire-agent.conf     /var/spool/fire-agent, 3770 fire-agent:fire-spool
#   /usr/share/dbus-1/system.d/fire-agent-rauc.conf   RAUC: install and mark, nothing else
#   /usr/share/polkit-1/rules.d/50-fire-agent.rules   logind: reboot, nothing else
#   /etc/fire-agent/fire-agent.json5        a conffile, 0600 fire-agent (it may hold a token)
# The package starts the agent only once its config passes `fire-agent config check`.
# Usage: packaging/build-deb.sh ARCH BINARY OUT_DIR     ARCH: armhf, arm64 or amd64
# Prints the package's path.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
project="$(cd "$here/.." && pwd)"
arch="${1:?usage: packaging/build-deb.sh ARCH BINARY OUT_DIR}"
binary="${2:?usage: packaging/build-deb.sh ARCH BINARY OUT_DIR}"
out="${3:?usage: packaging/build-deb.sh ARCH BINARY OUT_DIR}"
case "$arch" in armhf | arm64 | amd64) ;; *) echo "build-deb: unknown architecture '$arch' (armhf, arm64, amd64)" >&2; exit 2 ;; esac
[ -f "$binary" ] || { echo "build-deb: no binary at $binary" >&2; exit 2; }

version="$(sed -n 's/.*tinyFireVersion = "\(.*\)".*/\1/p' "$project/Sources/TinyFireCore/HTTP/HTTPHeaders.swift")"
[ -n "$version" ] || { echo "build-deb: cannot read the version" >&2; exit 1; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
root="$(mktemp -d "${TMPDIR:-/tmp}/fire-agent-deb.XXXXXX")"
chmod 0755 "$root"
trap 'rm -rf "$root"' EXIT

install -D -m 0755 "$binary" "$root/usr/bin/fire-agent"
install -D -m 0644 "$project/etc/fire-agent.service" "$root/lib/systemd/system/fire-agent.service"
install -D -m 0644 "$project/etc/fire-agent-firmware@.service" "$root/lib/systemd/system/fire-agent-firmware@.service"
install -D -m 0644 "$project/etc/fire-agent.sysusers" "$root/usr/lib/sysusers.d/fire-agent.conf"
install -D -m 0644 "$project/etc/fire-agent.tmpfiles" "$root/usr/lib/tmpfiles.d/fire-agent.conf"
install -D -m 0644 "$project/etc/fire-agent-rauc.conf" "$root/usr/share/dbus-1/system.d/fire-agent-rauc.conf"
install -D -m 0644 "$project/etc/fire-agent-reboot.rules" "$root/usr/share/polkit-1/rules.d/50-fire-agent.rules"
install -D -m 0600 "$project/etc/fire-agent.json5" "$root/etc/fire-agent/fire-agent.json5"
for doc in OPERATIONS.md FIRMWARE.md CONFIG.md; do
    install -D -m 0644 "$project/docs/$doc" "$root/usr/share/doc/fire-agent/$doc"
done

mkdir -p "$root/DEBIAN"
echo /etc/fire-agent/fire-agent.json5 > "$root/DEBIAN/conffiles"
size_kib="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
cat > "$root/DEBIAN/control" <<EOF
Package: fire-agent
Version: $version
Architecture: $arch
Maintainer: TinyFire <fire-agent@localhost>
Installed-Size: $size_kib
Section: net
Priority: optional
Depends: systemd (>= 247)
Recommends: rauc, polkitd
Description: device agent: telemetry through outages, signed firmware updates
 fire-agent delivers a board's telemetry to InfluxDB through outages (a durable queue on
 disk) and installs signed firmware (RAUC bundles on A/B boards), as the fire-agent user.
 One static binary, no shared libraries.
EOF
cat > "$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    systemd-sysusers fire-agent.conf
    systemd-tmpfiles --create fire-agent.conf
    # The config may hold a token: readable by the agent alone.
    chown fire-agent:fire-agent /etc/fire-agent/fire-agent.json5
    chmod 0600 /etc/fire-agent/fire-agent.json5
    # Enabled also where systemd does not run (an image being built): it starts at boot.
    systemctl enable fire-agent.service >/dev/null 2>&1 || true
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload
        systemctl reload dbus.service 2>/dev/null || true
        # Not with the shipped example config: what it queued would stay addressed to the
        # example's server. Started once the config is the board's own and passes its check.
        shipped="$(dpkg-query -W -f='${Conffiles}' fire-agent 2>/dev/null | awk '$1 == "/etc/fire-agent/fire-agent.json5" {print $2}')"
        current="$(md5sum /etc/fire-agent/fire-agent.json5 | cut -d' ' -f1)"
        if [ "$shipped" != "$current" ] && setpriv --reuid=fire-agent --regid=fire-agent --init-groups \
            /usr/bin/fire-agent config check --config /etc/fire-agent/fire-agent.json5 >/dev/null 2>&1; then
            systemctl restart fire-agent.service
        else
            echo "fire-agent: set the servers in /etc/fire-agent/fire-agent.json5, then: systemctl start fire-agent" >&2
        fi
    fi
fi
exit 0
EOF
cat > "$root/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    systemctl disable --now fire-agent.service >/dev/null 2>&1 || true
fi
exit 0
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm"
deb="$out/fire-agent_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
