#!/usr/bin/env bash
# The whole test suite, as CI runs it: install what is missing, lint strictly, build with
# warnings as errors, run every test (unit, integration against nginx/httpbin, hostile servers,
# CLI) in an empty TMPDIR of their own (scripts/run-contained.sh), then fuzz the response parser,
# the offline queue's reader and Content-Range parsing for a bounded total time (FUZZ_SECONDS,
# default 90) from the committed seeds only.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/install-deps.sh

# The emulated board's image (board/README.md) is built beside the Swift builds below: its
# debootstrap runs one emulated process at a time, and the builds leave a core idle for much of
# theirs. It is waited for before the tests start. TINYFIRE_BOARD=0 leaves the board out.
board_pid=
if [ "${TINYFIRE_BOARD:-1}" != 0 ]; then
    board_log="$(mktemp "${TMPDIR:-/tmp}/board-image.XXXXXX")"
    board/build-image.sh armv7 > "$board_log" 2>&1 &
    board_pid=$!
    trap 'kill "$board_pid" 2>/dev/null || true' EXIT
fi

echo "== swift format lint --strict"
swift format lint --strict --recursive Sources Tests bench fuzz Package.swift

echo "== Sources import FoundationEssentials only (full Foundation links ICU's data: +48 MiB static)"
# (Sources/TinyFireFoundation is the one module that does: InputStream uploads for apps that
# have full Foundation anyway.)
if grep -rln --include='*.swift' -E '^import Foundation$' Sources | grep -v '^Sources/TinyFireFoundation/'; then
    echo "these files import Foundation outside '#if canImport(FoundationEssentials) … #else'" >&2
    exit 1
fi

echo "== build (warnings are errors)"
# Except deprecation: the tests and Examples/Alamofire4x call Alamofire's deprecated API
# (responseJSON, ParameterEncoding) on purpose, to show that code written for it ports.
swift build --build-tests -Xswiftc -warnings-as-errors -Xswiftc -Wwarning -Xswiftc DeprecatedDeclaration

echo "== embedded: TinyFireCore and FireAgent in Embedded Swift for x86_64, armv7 and aarch64, checked under qemu"
# (cross/README.md, "Embedded Swift": no Swift runtime; bookworm armhf/arm64 C sysroots, ~40 s
# on a fresh machine for the packages.)
cross/embedded/check.sh

if [ -n "$board_pid" ]; then
    echo "== board image (built beside the builds above)"
    board_status=0
    wait "$board_pid" || board_status=$?
    trap - EXIT
    cat "$board_log"
    [ "$board_status" = 0 ] || { echo "board/build-image.sh armv7 failed ($board_status)" >&2; exit 1; }
fi

echo "== tests"
# In a session of their own: whatever the tests leave running is stopped when they end.
scripts/run-contained.sh swift test --skip-build

echo "== fuzz (${FUZZ_SECONDS:-90} s)"
# Work corpora and crashes in an empty directory of this run's: earlier runs' finds do not count.
fuzz_work="$(mktemp -d "${TMPDIR:-/tmp}/tinyfire-fuzz.XXXXXX")"
trap 'rm -rf "$fuzz_work"' EXIT
FUZZ_WORK="$fuzz_work" fuzz/run.sh "${FUZZ_SECONDS:-90}"
if [ -n "$(ls -A "$fuzz_work/crashes" 2>/dev/null)" ]; then
    mkdir -p fuzz/crashes
    cp "$fuzz_work/crashes/"* fuzz/crashes/
    echo "fuzzer found crashing inputs, copied to fuzz/crashes: move them to fuzz/regressions and fix" >&2
    ls -l "$fuzz_work/crashes" >&2
    exit 1
fi

# The emulated board (board/README.md): fire-agent's package on Debian bookworm's armhf with
# U-Boot, RAUC and systemd under qemu-system-arm, driven through its serial console: telemetry
# from an application, an update A -> B through a real reboot, a power cut (about 4 minutes; the
# image was built above, into /var/cache/tinyfire-board). TINYFIRE_BOARD=0 leaves it out (say so
# when you do). The full run (a rollback, a kernel that panics, 24 power cuts) is by hand:
# python3 board/test.py armv7 --full.
if [ -n "$board_pid" ]; then
    echo "== board: fire-agent on an emulated armv7 board (U-Boot, RAUC, systemd): a real reboot into B, a power cut"
    timeout 1500 python3 board/test.py armv7
else
    echo "== board: left out (TINYFIRE_BOARD=0)"
fi

# The aarch64 route (cross/README.md): Debian's Swift 6.2.3 builds the package for aarch64,
# fire-agent is smoke-tested under qemu, and the test suite runs under qemu. It proves the
# code still builds with the older cross compiler. About 4 GB and a few minutes on first run;
# TINYFIRE_CROSS=0 leaves it out (say so when you do).
if [ "${TINYFIRE_CROSS:-1}" != 0 ]; then
    echo "== cross: aarch64 build, smoke test and test suite under qemu"
    cross/all.sh
else
    echo "== cross: left out (TINYFIRE_CROSS=0)"
fi
