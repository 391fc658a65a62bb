#!/usr/bin/env bash
# Regenerates scripts/fire-agent.order: the symbols of the functions `fire-agent run` executes
# (startup, collection, sync, delivery to influxd, status, stop), one per line, the order the
# linker lays them out in (gold: --section-ordering-file with ".text." in front, which
# scripts/build-static.sh adds; lld, the cross build's linker: --symbol-ordering-file). Why: the kernel maps a binary's code 64 KiB at a time around each
# page fault ("fault-around"), so a daemon whose hot functions are scattered over 12 MiB of
# code keeps most of it resident; laid out together they fit in far fewer 64 KiB windows
# (docs/BENCHMARKS.md, "The agent"). Functions missing from the file (new ones, other commands)
# are placed after; names that no longer exist are ignored. Rerun after large changes:
#   scripts/order-sections.sh      (needs valgrind and influxd; about a minute after the build)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
agent="$(TINYFIRE_NO_ORDER=1 scripts/build-static.sh fire-agent)/fire-agent"
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-order.XXXXXX)"
. scripts/local-influxd.sh
trap 'stop_local_influxd; rm -rf "$work"' EXIT
start_local_influxd "$work"
influx_query "CREATE DATABASE fleet" > /dev/null
# valgrind cannot read the debug info of the static binary: profile a copy without it.
strip --strip-debug -o "$work/fire-agent" "$agent"
mkdir -p "$work/spool"
cat > "$work/agent.json5" <<CONF
{
  device: { id: "order-board" },
  server: { url: "$influx" },
  telemetry: { interval: "1s", syncInterval: "1s", jitter: 0, spoolDirectory: "spool", influx: { database: "fleet" } },
  queue: { directory: "queue" },
  daemon: { statusFile: "status.json" },
}
CONF
for i in 1 2 3; do printf 'app,unit=u%s v=%si\n' "$i" "$i" > "$work/spool/a$i.lp"; done
valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/callgrind.out" \
    "$work/fire-agent" run --config "$work/agent.json5" 2> "$work/valgrind.log" &
pid=$!
sleep 30
kill -TERM "$pid"
wait "$pid" || true
python3 scripts/callgrind-order.py "$work/callgrind.out" > scripts/fire-agent.order
echo "scripts/fire-agent.order: $(wc -l < scripts/fire-agent.order) functions"
