#!/usr/bin/env bash
# Cross-builds fire-agent for aarch64 Linux with Debian's Swift 6.2.3 in the chroot that
# cross/prepare.sh makes (run first if missing; a no-op once done). Usage:
#   cross/build.sh [static|dynamic] [CACHE_DIR]
#     static  (default) fully static executable: runs on any aarch64 Linux, whatever its libc
#     dynamic Swift runtime, mbedTLS and zlib as shared libraries: for boards with a Debian
#             sid-like userland (glibc >= 2.38, libswiftlang, libmbedtls21, zlib1g installed)
# Output: cross/out/fire-agent-aarch64-VARIANT (and .stripped); prints its path.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
variant="${1:-static}"
cross_init "${2:-}"
case "$variant" in static | dynamic) ;; *) die "unknown variant '$variant' (static or dynamic)" ;; esac
[ "$(id -u)" = 0 ] || die "run as root (the build runs in a chroot)"

"$here/prepare.sh" "$cache"

static_deps="$chroot_sysroot/usr/lib/aarch64-linux-gnu/static-deps"
flags=(--swift-sdks-path /sdk --swift-sdk "$sdk_name" -c release --product fire-agent --scratch-path ".build-aarch64-$variant")
if [ "$variant" = static ]; then
    flags+=(--static-swift-stdlib -Xswiftc -static-executable -Xlinker "-L$static_deps"
        -Xswiftc -Xclang-linker -Xswiftc -static-libgcc)
fi

# The agent's hot functions laid out together (scripts/order-sections.sh explains why); the
# symbols are the same on every architecture. This toolchain links with lld; symbols the file
# names that this build lacks are skipped without a warning.
if [ -f "$project/scripts/fire-agent.order" ]; then
    flags+=(-Xlinker "--symbol-ordering-file=$project/scripts/fire-agent.order" -Xlinker --no-warn-symbol-ordering)
fi

mount_chroot_build
trap unmount_chroot EXIT
start=$(date +%s)
log "swift build ${flags[*]}"
# glibc's warnings about NSS functions in a static link are expected: fire-agent looks up no users.
set +e
in_chroot "swift build $(printf '%q ' "${flags[@]}")" 2>&1 |
    grep -vE "statically linked applications requires at runtime|the use of .mktemp. is dangerous" >&2
status=${PIPESTATUS[0]}
set -e
# A failed build must not pass off the binary an earlier build left behind.
[ "$status" = 0 ] || die "swift build failed (exit $status)"
bin="$project/.build-aarch64-$variant/aarch64-unknown-linux-gnu/release/fire-agent"
[ -x "$bin" ] || die "the build produced no $bin"
out="$here/out"
mkdir -p "$out"
cp "$bin" "$out/fire-agent-aarch64-$variant"
chroot_run /usr/libexec/swift/bin/llvm-objcopy --strip-all "$out/fire-agent-aarch64-$variant" "$out/fire-agent-aarch64-$variant.stripped"
log "built in $(($(date +%s) - start)) s: $out/fire-agent-aarch64-$variant ($(stat -c %s "$out/fire-agent-aarch64-$variant") bytes; stripped $(stat -c %s "$out/fire-agent-aarch64-$variant.stripped"), gzip -9 $(gzip -9 -c "$out/fire-agent-aarch64-$variant.stripped" | wc -c))"
echo "$out/fire-agent-aarch64-$variant"
