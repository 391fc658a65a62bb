#!/usr/bin/env bash
# Builds the libFuzzer target for the response parser and gzip/deflate decoding, and runs it
# for a bounded time. Usage: fuzz/run.sh [SECONDS]   (default 60)
# Crashing inputs land in fuzz/crashes/; turn each into a regression test in
# Tests/TinyFireTests/FuzzRegressionTests.swift (fuzz/regressions/ holds them as files).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
out=.build-fuzz
mkdir -p "$out" fuzz/crashes fuzz/corpus-work
swiftc -sanitize=fuzzer,address -parse-as-library -O -g \
    -module-name TinyFireFuzz \
    -I Sources/CZlib -lz \
    Sources/TinyFire/HTTP/ResponseParser.swift \
    Sources/TinyFire/HTTP/ResponseHead.swift \
    Sources/TinyFire/HTTP/HTTPParseError.swift \
    Sources/TinyFire/HTTP/ContentDecoder.swift \
    fuzz/ResponseParserFuzz.swift \
    -o "$out/response-parser-fuzz"
# Seeds are committed in fuzz/corpus; new interesting inputs go to the untracked work corpus.
"$out/response-parser-fuzz" fuzz/corpus-work fuzz/corpus \
    -max_total_time="$seconds" -max_len=8192 -rss_limit_mb=2048 \
    -artifact_prefix=fuzz/crashes/ -print_final_stats=1 2>&1 | tail -n 25
