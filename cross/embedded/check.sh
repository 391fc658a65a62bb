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

check_one() { # ARCH: build and check one architecture
    local arch="$1" start out version run
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
}

# The sysroots first, one after the other (they share one apt configuration); then the
# architectures side by side: each build is one compiler process for the whole module, so two
# or three of them use the cores one leaves idle. Each one's output is printed whole when it
# ends.
for arch in "$@"; do
    case "$arch" in armv7 | aarch64) "$here/sysroot.sh" "$arch" > /dev/null ;; esac
done
logs="$(mktemp -d "${TMPDIR:-/tmp}/embedded-check.XXXXXX")"
trap 'rm -rf "$logs"' EXIT
pids=()
for arch in "$@"; do
    (check_one "$arch") > "$logs/$arch.log" 2>&1 &
    pids+=("$!")
done
failed=()
for index in "${!pids[@]}"; do
    arch="${@:index+1:1}"
    wait "${pids[$index]}" || failed+=("$arch")
    cat "$logs/$arch.log" >&2
done
[ ${#failed[@]} -eq 0 ] || die "failed: ${failed[*]}"
