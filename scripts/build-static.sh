#!/usr/bin/env bash
# Builds fire-agent (and tinyfire-bench) as fully static release executables, the form that
# ships to boards: Swift runtime, Foundation, glibc and zlib linked in; no shared libraries.
# Prints the directory holding the binaries. Scratch path: .build-static (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
flags=(-c release --static-swift-stdlib -Xswiftc -static-executable --scratch-path .build-static)
# fire-agent's hot functions laid out together (scripts/order-sections.sh explains why).
# Linked with lld, as the cross build is: it places the listed functions first, in order
# (gold's section ordering left most of them scattered: 122 of 64 KiB windows against 77).
order_flags=()
if [ -z "${TINYFIRE_NO_ORDER:-}" ] && [ -f scripts/fire-agent.order ]; then
    order_flags=(-Xswiftc -use-ld=lld -Xlinker "--symbol-ordering-file=$PWD/scripts/fire-agent.order" -Xlinker --no-warn-symbol-ordering)
fi
# glibc warns that getpwnam & co. need its shared NSS modules when linked statically;
# fire-agent does not look up users, so those warnings are filtered.
for product in "$@"; do
    extra=()
    [ "$product" = fire-agent ] && extra=("${order_flags[@]}")
    set +e
    swift build "${flags[@]}" ${extra[@]+"${extra[@]}"} --product "$product" 2>&1 | grep -vE "statically linked applications requires at runtime|the use of .mktemp. is dangerous" >&2
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" != 0 ]; then
        echo "build-static: swift build --product $product failed (exit $status)" >&2
        exit "$status"
    fi
done
swift build "${flags[@]}" --show-bin-path
