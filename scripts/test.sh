#!/usr/bin/env bash
# The whole test suite, as CI runs it: install what is missing, lint strictly, build with
# warnings as errors, run every test (unit, integration against nginx/httpbin, hostile servers,
# CLI), then fuzz the response parser for a bounded time (FUZZ_SECONDS, default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/install-deps.sh

echo "== swift format lint --strict"
swift format lint --strict --recursive Sources Tests bench fuzz Package.swift

echo "== build (warnings are errors)"
swift build --build-tests -Xswiftc -warnings-as-errors

echo "== tests"
swift test --skip-build

echo "== fuzz (${FUZZ_SECONDS:-60} s)"
fuzz/run.sh "${FUZZ_SECONDS:-60}"
if [ -n "$(ls -A fuzz/crashes 2>/dev/null)" ]; then
    echo "fuzzer found crashing inputs in fuzz/crashes: copy them to fuzz/regressions and fix" >&2
    exit 1
fi
