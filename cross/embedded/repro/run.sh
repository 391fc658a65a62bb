#!/usr/bin/env bash
# The armv7 self-register miscompile, reduced (cross/README.md, "armv7: the self register"):
# builds armv7-self-register.swift for armv7 Linux in Embedded Swift with this toolchain, once as
# is and once with the ARM load/store optimizer off, runs both under qemu-arm and lists the
# functions that write r10 without saving it. With Swift 6.3.1 the first crashes (SIGSEGV) and
# the second prints "ok". Usage: cross/embedded/repro/run.sh [OUT]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
embedded="$here/.."
out="${1:-$(mktemp -d "${TMPDIR:-/tmp}/self-register.XXXXXX")}"
export PATH="/opt/swift/usr/bin:$PATH"
sysroot="$("$embedded/sysroot.sh" armv7)" || exit 1
for variant in as-is load-store-opt-off; do
    extra=()
    [ "$variant" = as-is ] || extra=(-Xllvm -arm-load-store-opt=false)
    swiftc -enable-experimental-feature Embedded -wmo -Osize -parse-as-library -target armv7-none-none-eabi \
        -Xcc -mfloat-abi=hard -Xcc -mfpu=vfpv3-d16 -Xcc --sysroot="$sysroot" "${extra[@]}" \
        -c "$here/armv7-self-register.swift" -o "$out/$variant.o" || exit 1
    clang --target=armv7-unknown-linux-gnueabihf -mfloat-abi=hard -mfpu=vfpv3-d16 --sysroot="$sysroot" -fuse-ld=lld \
        -static -L "$sysroot/usr/lib/arm-linux-gnueabihf" "$out/$variant.o" -lm -o "$out/$variant" || exit 1
    echo "== $variant"
    python3 "$embedded/selfreg-check.py" armv7 "$out/$variant.o"
    qemu-arm-static "$out/$variant"
    echo "exit status $?"
done
