#!/usr/bin/env bash
# Builds fire-agent (and tinyfire-bench) as fully static release executables, the form that
# ships to boards: Swift runtime, Foundation, glibc and zlib linked in; no shared libraries.
# Prints the directory holding the binaries. Scratch path: .build-static (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
flags=(-c release --static-swift-stdlib -Xswiftc -static-executable --scratch-path .build-static)
# glibc warns that getpwnam & co. need its shared NSS modules when linked statically;
# fire-agent does not look up users, so those warnings are filtered.
for product in "$@"; do
    swift build "${flags[@]}" --product "$product" 2>&1 | grep -vE "statically linked applications requires at runtime|the use of .mktemp. is dangerous" >&2 || true
done
swift build "${flags[@]}" --show-bin-path
