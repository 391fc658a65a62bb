#!/usr/bin/env bash
# Regenerates cross/embedded/fire-agent.order: the symbols of the functions the Embedded
# `fire-agent run` executes while it runs as a board runs it — start-up, collection, spool,
# sync and delivery to influxd, a firmware poll (no offer) and its report queue, the status file
# — one per line, for lld's --symbol-ordering-file (cross/embedded/build.sh). The kernel maps a
# binary's pages around each one touched (fault-around), so an idle daemon whose code is spread
# over the file keeps nearly all of it resident; laid out together, the cold code (the other
# commands, error paths, the installer's and rollback's steps) stays on flash. Profiled on the
# x86_64 build with valgrind; the names are the same on armv7 and aarch64 (one source, one
# compiler); a name missing there is skipped. Functions not in the file are placed after; names
# that no longer exist are ignored. Rerun after large changes (about a minute after the build):
#   cross/embedded/order.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
project="$(cd "$here/../.." && pwd)"
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-embedded-order.XXXXXX)"
# Symbols kept, no order: what the compiler laid out.
EMBEDDED_SYMBOLS=1 EMBEDDED_ORDER=none "$here/build.sh" x86_64 "$work/build" >/dev/null
cd "$project"
. scripts/local-influxd.sh
trap 'stop_local_influxd; rm -rf "$work"' EXIT
start_local_influxd "$work"
influx_query "CREATE DATABASE fleet" > /dev/null
mkdir -p "$work/spool"
openssl ecparam -genkey -name prime256v1 2>/dev/null | openssl ec -pubout -out "$work/vendor.pub" 2>/dev/null
echo 1.0.0 > "$work/version"
cat > "$work/agent.json5" <<CONF
{ device: { id: "order-board" }, server: { url: "$influx" },
  telemetry: { interval: "2s", syncInterval: "2s", jitter: 0, spoolDirectory: "spool", influx: { database: "fleet" } },
  queue: { directory: "queue" }, daemon: { statusFile: "status.json" },
  firmware: { manifestURL: "$influx/manifest.json", keys: ["$work/vendor.pub"], deviceType: "order", versionFile: "$work/version",
              directory: "firmware", pollInterval: "2s", install: ["/bin/true", "{file}"], statusURL: "$influx/status" } }
CONF
chmod 600 "$work/agent.json5"
for i in 1 2 3; do printf 'app,unit=u%s v=%si\n' "$i" "$i" > "$work/spool/a$i.lp"; done
valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/callgrind.out" \
    "$work/build/fire-agent" run --config "$work/agent.json5" 2> "$work/valgrind.log" &
pid=$!
sleep 25
kill -TERM "$pid"
wait "$pid" || true
python3 "$project/scripts/callgrind-order.py" "$work/callgrind.out" > "$here/fire-agent.order"
echo "cross/embedded/fire-agent.order: $(wc -l < "$here/fire-agent.order") functions"
