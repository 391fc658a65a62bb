#!/usr/bin/env bash
# Builds the libFuzzer targets (response parser with gzip/deflate decoding, the offline queue's
# journal and cursor reader, Content-Range parsing, the manifest's strict JSON reader) and runs them
# for a bounded total time. Usage: fuzz/run.sh [SECONDS]   (default 60)
# Crashing inputs land in fuzz/crashes/; turn each into a regression test in
# Tests/TinyFireTests/FuzzRegressionTests.swift (fuzz/regressions/ holds them as files).
# FUZZ_WORK=DIR puts the work corpora and the crashes there instead (scripts/test.sh gives each run
# an empty one, so a run starts from the committed seeds only and finds no earlier run's crashes).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
out=.build-fuzz
work="${FUZZ_WORK:-fuzz}"
crashes="$work/crashes"
mkdir -p "$out" "$crashes" "$work/corpus-work" "$work/corpus-work-queue" "$work/corpus-work-range" "$work/corpus-work-manifest"
flags=(-sanitize=fuzzer,address -parse-as-library -package-name TinyFire -O -g -I Sources/CZlib -lz)
http=(Sources/TinyFireCore/HTTP/ResponseParser.swift Sources/TinyFireCore/HTTP/ResponseHead.swift
    Sources/TinyFireCore/HTTP/HTTPParseError.swift Sources/TinyFireCore/HTTP/ContentDecoder.swift Sources/TinyFireCore/Support/Quoting.swift
    Sources/TinyFireCore/Support/TypedBytes.swift)
swiftc "${flags[@]}" -module-name TinyFireFuzz "${http[@]}" fuzz/ResponseParserFuzz.swift -o "$out/response-parser-fuzz"
swiftc "${flags[@]}" -module-name TinyFireRangeFuzz "${http[@]}" Sources/TinyFireCore/HTTP/ContentRange.swift \
    fuzz/ContentRangeFuzz.swift -o "$out/content-range-fuzz"
swiftc "${flags[@]}" -module-name TinyFireQueueFuzz Sources/TinyFireCore/OfflineQueue/OfflineQueueJournal.swift Sources/TinyFireCore/Support/BootInstant.swift \
    fuzz/QueueJournalFuzz.swift -o "$out/queue-journal-fuzz"
swiftc "${flags[@]}" -module-name TinyFireManifestFuzz Sources/TinyFireCore/Support/StrictJSON.swift \
    fuzz/ManifestJSONFuzz.swift -o "$out/manifest-json-fuzz"
# The response parser gets half the time, the queue reader, Content-Range and the manifest reader a
# sixth each.
# Seeds are committed in fuzz/corpus*; new interesting inputs go to untracked work corpora.
run() {
    "$out/$1" "$2" "$3" -max_total_time="$4" -max_len=8192 -rss_limit_mb=2048 \
        -artifact_prefix="$crashes/" -print_final_stats=1 2>&1 | tail -n 12
}
run response-parser-fuzz "$work/corpus-work" fuzz/corpus $(( (seconds + 1) / 2 ))
run queue-journal-fuzz "$work/corpus-work-queue" fuzz/corpus-queue $(( (seconds + 5) / 6 ))
run content-range-fuzz "$work/corpus-work-range" fuzz/corpus-range $(( (seconds + 5) / 6 ))
run manifest-json-fuzz "$work/corpus-work-manifest" fuzz/corpus-manifest $(( (seconds + 5) / 6 ))
