#!/usr/bin/env bash
# Builds TinyFireCore (and swift-http-types under it) in Embedded Swift for one architecture,
# with the machine's own Swift toolchain and no Swift runtime:
#   x86_64   the host (x86_64-unknown-linux-gnu), against the host's headers and libraries
#   armv7    armv7 hard-float Linux (armhf; i.MX6/7, STM32MP1, AM335x, 32-bit Raspberry Pi OS)
#   aarch64  64-bit ARM Linux
# The ARM sysroots are Debian bookworm packages (cross/embedded/sysroot.sh). Objects and modules
# go to OUT (default .build-embedded/ARCH); prints OUT. Usage:
#   cross/embedded/build.sh x86_64|armv7|aarch64 [OUT]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
project="$(cd "$here/../.." && pwd)"
log() { echo "embedded: $*" >&2; }
die() { echo "embedded: error: $*" >&2; exit 1; }

arch="${1:-}"
out="${2:-$project/.build-embedded/$arch}"
export PATH="/opt/swift/usr/bin:$PATH"
case "$arch" in
x86_64)
    swift_target=(-target x86_64-unknown-linux-gnu)
    clang_target=(--target=x86_64-unknown-linux-gnu)
    sysroot_flags=()
    ;;
armv7)
    # Embedded Swift's stdlib exists for the bare-metal triple only; with the hard-float ABI and
    # the Linux headers it is the armhf ABI (objects carry Tag_ABI_VFP_args: VFP registers).
    # 64-bit file offsets and inode numbers (readdir, stat, lseek): without them a listing on
    # a file system with large inode numbers fails with EOVERFLOW and files past 2 GiB cannot
    # be read. time_t stays 32-bit: bookworm's armhf mbedTLS is built that way, and its
    # structures (sessions, certificates) must have the layout it was compiled with.
    sysroot="$("$here/sysroot.sh" armv7)"
    # -arm-load-store-opt=false: this toolchain's ARM load/store optimizer merges two loads
    # through a method's self pointer (r10, Swift's self register, which the caller keeps
    # across calls) into an LDM that writes r10 back, without saving it; the caller's next call
    # on the same value then reads the wrong fields (cross/README.md, "armv7: the self register").
    # cross/embedded/selfreg-check.py refuses a build where any function does that.
    swift_target=(-target armv7-none-none-eabi -Xcc -mfloat-abi=hard -Xcc -mfpu=vfpv3-d16 -Xcc -D_FILE_OFFSET_BITS=64
        -Xllvm -arm-load-store-opt=false)
    clang_target=(--target=armv7-unknown-linux-gnueabihf -mfloat-abi=hard -mfpu=vfpv3-d16 -D_FILE_OFFSET_BITS=64)
    multiarch=arm-linux-gnueabihf
    ;;
aarch64)
    sysroot="$("$here/sysroot.sh" aarch64)"
    swift_target=(-target aarch64-none-none-elf)
    clang_target=(--target=aarch64-unknown-linux-gnu)
    multiarch=aarch64-linux-gnu
    ;;
*) die "usage: $0 x86_64|armv7|aarch64 [OUT]" ;;
esac
if [ "$arch" != x86_64 ]; then
    sysroot_flags=(-Xcc --sysroot="$sysroot" -Xcc -isystem -Xcc "$sysroot/usr/include/$multiarch"
        -Xcc -isystem -Xcc "$sysroot/usr/include" -Xcc -D__linux__ -Xcc -D__unix__)
    clang_target+=(--sysroot="$sysroot")
fi
mkdir -p "$out/modulemaps"
out="$(cd "$out" && pwd)"
# Every object is compiled again: the compiler can leave an existing object in place when only
# flags changed.
rm -f "$out"/*.o

# The project's C targets, as SwiftPM sees them: module maps over their include/ directories.
cat > "$out/modulemaps/module.modulemap" <<MAP
module CTinyFireSystem {
    umbrella "$project/Sources/CTinyFireSystem/include"
    export *
}
module CTinyFireTLS {
    header "$project/Sources/CTinyFireTLS/include/CTinyFireTLS.h"
    export *
}
MAP
c_flags=("${clang_target[@]}" -Os -ffunction-sections -fdata-sections -fPIC)
for source in "$project"/Sources/CTinyFireSystem/*.c "$project"/Sources/CTinyFireTLS/*.c "$here/runtime-stubs.c"; do
    clang "${c_flags[@]}" -I "$(dirname "$source")/include" -c "$source" -o "$out/$(basename "$source" .c).o"
done

swift_flags=(-enable-experimental-feature Embedded -wmo -Osize -parse-as-library "${swift_target[@]}"
    "${sysroot_flags[@]}" -I "$out" -I "$here/Glibc" -I "$out/modulemaps" -I "$project/Sources/CZlib"
    -Xcc -ffunction-sections -Xcc -fdata-sections -Xfrontend -function-sections)

find_http_types() { find "$project/.build" -path '*/checkouts/swift-http-types/Sources/HTTPTypes' -type d 2>/dev/null | head -1 || true; }
http_types="$(find_http_types)"
if [ -z "$http_types" ]; then
    log "resolving the package (swift-http-types)"
    (cd "$project" && swift package resolve >&2) || die "swift package resolve failed: no swift-http-types checkout under .build"
    http_types="$(find_http_types)"
fi
[ -n "$http_types" ] || die "no swift-http-types checkout under .build after swift package resolve"
# HTTPRequest+URL.swift needs Foundation; its availability macros are swift-http-types' own.
http_sources=()
for source in "$http_types"/*.swift; do
    case "$(basename "$source")" in HTTPRequest+URL.swift) ;; *) http_sources+=("$source") ;; esac
done
swiftc "${swift_flags[@]}" -module-name HTTPTypes \
    -enable-experimental-feature "AvailabilityMacro=HTTPTypes 1.0: macOS 10.0" \
    -enable-experimental-feature "AvailabilityMacro=HTTPTypes 1.1: macOS 10.0" \
    -enable-experimental-feature "AvailabilityMacro=HTTPTypes 1.2: macOS 10.0" \
    -enable-experimental-feature "AvailabilityMacro=HTTPTypes 1.3: macOS 10.0" \
    -enable-experimental-feature "AvailabilityMacro=HTTPTypes 1.6: macOS 10.0" \
    -enable-experimental-feature "AvailabilityMacro=HTTPTypes 1.7: macOS 10.0" \
    -emit-module -emit-module-path "$out/HTTPTypes.swiftmodule" -c "${http_sources[@]}" -o "$out/HTTPTypes.o"

mapfile -t core_sources < <(find "$project/Sources/TinyFireCore" -name '*.swift' | sort)
swiftc "${swift_flags[@]}" -module-name TinyFireCore -package-name TinyFire \
    -warnings-as-errors -emit-module -emit-module-path "$out/TinyFireCore.swiftmodule" -c "${core_sources[@]}" -o "$out/TinyFireCore.o"

# core-check: a static executable over the core (cross/embedded/check.sh runs it).
# fire-agent's logic that is in the subset already (issue 30, stage 2).
mapfile -t agent_sources < <(find "$project/Sources/FireAgent" -name '*.swift' | sort)
swiftc "${swift_flags[@]}" -module-name FireAgent -package-name TinyFire \
    -warnings-as-errors -emit-module -emit-module-path "$out/FireAgent.swiftmodule" -c "${agent_sources[@]}" -o "$out/FireAgent.o"

swiftc "${swift_flags[@]/-parse-as-library/}" -module-name CoreCheck -package-name TinyFire \
    -c "$here/core-check/main.swift" -o "$out/core-check.o"
if [ "$arch" = armv7 ]; then
    python3 "$here/selfreg-check.py" armv7 "$out"/*.o || die "armv7: a function clobbers Swift's self register (see cross/README.md)"
fi
link_flags=("${clang_target[@]}" -fuse-ld=lld -static -Wl,--gc-sections -s)
[ "$arch" = x86_64 ] || link_flags+=(-L "$sysroot/usr/lib/$multiarch")
unicode="/opt/swift/usr/lib/swift/embedded/${swift_target[1]}/libswiftUnicodeDataTables.a"
clang "${link_flags[@]}" "$out/core-check.o" "$out/FireAgent.o" "$out/TinyFireCore.o" "$out/HTTPTypes.o" "$out"/tinyfire_*.o "$out/runtime-stubs.o" \
    "$unicode" -lmbedtls -lmbedx509 -lmbedcrypto -lz -lm -lpthread -o "$out/core-check"
# fire-agent: every command (AgentCommandLine), from the full-Swift build's own entry point, static
# and stripped.
swiftc "${swift_flags[@]/-parse-as-library/}" -module-name FireAgentMain -package-name TinyFire \
    -c "$here/../../Sources/fire-agent/main.swift" -o "$out/fire-agent.o"
if [ "$arch" = armv7 ]; then
    python3 "$here/selfreg-check.py" armv7 "$out/fire-agent.o" || die "armv7: a function clobbers Swift's self register (see cross/README.md)"
fi
# The code an idle daemon runs laid out together (cross/embedded/fire-agent.order, made by
# cross/embedded/order.sh): the kernel maps a binary's pages around each one touched, so with hot
# and cold code interleaved nearly the whole file ends up resident. EMBEDDED_ORDER=none links in
# the compiler's order; EMBEDDED_SYMBOLS=1 keeps the symbols (what order.sh profiles).
agent_link=()
for flag in "${link_flags[@]}"; do
    [ "$flag" = -s ] && [ "${EMBEDDED_SYMBOLS:-}" = 1 ] && continue
    agent_link+=("$flag")
done
if [ "${EMBEDDED_ORDER:-}" != none ] && [ -f "$here/fire-agent.order" ]; then
    agent_link+=(-Wl,--symbol-ordering-file="$here/fire-agent.order" -Wl,--no-warn-symbol-ordering)
fi
clang "${agent_link[@]}" "$out/fire-agent.o" "$out/FireAgent.o" "$out/TinyFireCore.o" "$out/HTTPTypes.o" "$out"/tinyfire_*.o "$out/runtime-stubs.o" \
    "$unicode" -lmbedtls -lmbedx509 -lmbedcrypto -lz -lm -lpthread -o "$out/fire-agent"
log "$arch: TinyFireCore, FireAgent, core-check ($(stat -c %s "$out/core-check") bytes stripped) and fire-agent ($(stat -c %s "$out/fire-agent") bytes) built in $out"
echo "$out"
