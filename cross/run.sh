#!/usr/bin/env bash
# Runs a cross-built fire-agent under qemu-aarch64 on this host, with any arguments. Usage:
#   cross/run.sh [static|dynamic] [FIRE-AGENT ARGUMENTS...]     e.g. cross/run.sh static --version
# The dynamic build finds its Swift runtime, mbedTLS and zlib in the SDK's sysroot.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
variant=static
case "${1:-}" in static | dynamic) variant="$1"; shift ;; esac
cross_init "${TINYFIRE_CROSS_CACHE:-}"
binary="$here/out/fire-agent-aarch64-$variant"
[ -x "$binary" ] || die "no $binary: run cross/build.sh $variant first"
command -v qemu-aarch64-static >/dev/null || die "qemu-aarch64-static is missing (cross/prepare.sh installs it)"
if [ "$variant" = dynamic ]; then
    exec qemu-aarch64-static -L "$sysroot" "$binary" "$@"
fi
exec qemu-aarch64-static "$binary" "$@"
