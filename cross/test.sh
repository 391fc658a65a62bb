#!/usr/bin/env bash
# Cross-builds TinyFire's test bundle for aarch64 (debug, Swift runtime as shared libraries from
# the SDK) and runs it under qemu-aarch64. binfmt_misc runs the aarch64 children the tests
# start (fire-agent) under qemu too; nginx, httpbin, openssl and ip stay native. Usage:
#   cross/test.sh [CACHE_DIR] [-- TEST-RUNNER ARGUMENTS]     e.g. -- --filter ResponseParser
# Needs root. Registers qemu-aarch64 with binfmt_misc only for its own run when it was not.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
cache_arg=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then cache_arg="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
cross_init "$cache_arg"
[ "$(id -u)" = 0 ] || die "run as root"
"$here/prepare.sh" "$cache"
"$project/scripts/install-deps.sh" >/dev/null

mount_chroot_build
trap unmount_chroot EXIT
start=$(date +%s)
test_deps="$chroot_sysroot/usr/lib/aarch64-linux-gnu/test-deps"
in_chroot "swift build --swift-sdks-path /sdk --swift-sdk $sdk_name --build-tests --scratch-path .build-aarch64-tests -Xlinker -L$test_deps" >&2
unmount_chroot
trap - EXIT
log "test bundle built in $(($(date +%s) - start)) s"
bundle_bin="$project/.build-aarch64-tests/aarch64-unknown-linux-gnu/debug/TinyFirePackageTests.xctest"
[ -x "$bundle_bin" ] || die "no test bundle at $bundle_bin"

binfmt=/proc/sys/fs/binfmt_misc
registered_here=0
mountpoint -q "$binfmt" || mount -t binfmt_misc binfmt_misc "$binfmt"
if [ ! -e "$binfmt/qemu-aarch64" ]; then
    conf=/usr/lib/binfmt.d/qemu-aarch64.conf
    [ -f "$conf" ] || die "no $conf (qemu-user-static)"
    cat "$conf" > "$binfmt/register"
    registered_here=1
fi
cleanup() { [ "$registered_here" = 1 ] && echo -1 > "$binfmt/qemu-aarch64" || true; }
trap cleanup EXIT

# Libraries of the dynamic test bundle and of the children come from the SDK's sysroot.
export QEMU_LD_PREFIX="$sysroot"
# qemu 7.2 does not implement TCGETS2, which glibc 2.43's isatty uses, so under qemu fire-agent
# never sees a terminal; the progress-bar test needs one (a real kernel has TCGETS2).
# The Embedded agents' tests (EmbeddedAgentTests, EmbeddedDaemonTests, EmbeddedFirmwareTests)
# run the .build-embedded binaries (native, or under qemu-user themselves) beside the host's
# fire-agent: the host suite runs them; under this emulation they would only repeat that, with a
# test process too slow to catch a download in the middle.
# Under qemu-user, /proc/PID/cmdline is the emulator's own command line (qemu, the loader, the
# guest's arguments), which the guest cannot reach: hiding -x/-U passwords there is checked by the
# host suite, on a real kernel.
skip=(--skip progressBarOnTerminal --skip 'Embedded(Agent|Daemon|Firmware|Request)Tests' --skip passwordsLeaveTheCommandLine)
start=$(date +%s)
status=0
"$project/scripts/run-contained.sh" "$bundle_bin" --testing-library swift-testing "${skip[@]}" "$@" || status=$?
log "tests under qemu-aarch64 took $(($(date +%s) - start)) s (exit $status)"
exit "$status"
