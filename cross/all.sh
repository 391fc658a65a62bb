#!/usr/bin/env bash
# The whole cross route, as CI runs it: prepare (once), build fire-agent for aarch64 (static and
# dynamic), smoke-test both under qemu-aarch64, then cross-build the test bundle and run it under
# qemu. Usage: cross/all.sh [CACHE_DIR]. Needs root and about 6 GB free for the cache.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
cross_init "${1:-}"
free_kb=$(df -Pk "$cache" | awk 'NR==2 {print $4}')
if [ ! -f "$cache/stamps/sdk" ] && [ "$free_kb" -lt $((6 * 1024 * 1024)) ]; then
    die "$cache has $((free_kb / 1024)) MiB free; the chroot and SDK need about 6 GB (TINYFIRE_CROSS_CACHE picks another place; TINYFIRE_CROSS=0 leaves the cross route out of scripts/test.sh)"
fi
begin=$(date +%s)
"$here/prepare.sh" "$cache"
for variant in static dynamic; do
    binary="$("$here/build.sh" "$variant" "$cache")"
    TINYFIRE_CROSS_CACHE="$cache" "$here/smoke.sh" "$binary"
done
"$here/test.sh" "$cache"
log "cross route done in $(($(date +%s) - begin)) s"
