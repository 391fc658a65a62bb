#!/usr/bin/env bash
# Builds TinyFireCore in Embedded Swift for x86_64, armv7 and aarch64 (cross/embedded/build.sh)
# and runs core-check on each: natively on x86_64, under qemu-arm / qemu-aarch64 for the boards.
# Fails when a build fails or a check does not give its known answer. Usage:
#   cross/embedded/check.sh [x86_64|armv7|aarch64 …]      (default: all three)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "embedded: $*" >&2; }
die() { echo "embedded: error: $*" >&2; exit 1; }
if ! command -v qemu-arm-static >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then
    log "apt-get install qemu-user-static"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
fi
[ $# -gt 0 ] || set -- x86_64 armv7 aarch64
for arch in "$@"; do
    start=$(date +%s)
    out="$("$here/build.sh" "$arch")"
    case "$arch" in
    x86_64) run=() ;;
    armv7) run=(qemu-arm-static) ;;
    aarch64) run=(qemu-aarch64-static) ;;
    esac
    # Static binaries: qemu needs no sysroot.
    "${run[@]}" "$out/core-check" || die "$arch: core-check failed"
    # The Embedded fire-agent starts and knows its version (Tests/…/EmbeddedAgentTests runs its
    # commands against influxd).
    version="$("${run[@]}" "$out/fire-agent" --version)" || die "$arch: fire-agent --version failed"
    log "$arch: $version"
    # Crash points are for test builds only (CrashPoints.swift); a board's binary has none.
    ! grep -q FIRE_AGENT_FIRMWARE_EXIT_AT "$out/fire-agent" || die "$arch: fire-agent carries the tests' crash points"
    log "$arch: built and checked in $(($(date +%s) - start)) s"
done
