#!/usr/bin/env bash
# fire-agent's main job, end to end on this machine: installs what is missing, builds the
# static fire-agent, starts a real fleet backend on loopback (influxd, InfluxDB 1.x), runs
# `fire-agent run` with a demo config while a "sensor" program drops line-protocol files into
# the agent's spool, shows points arriving (counts per measurement), stops influxd and shows
# the queue growing, starts it again and shows every point delivered exactly once (counted),
# then stops everything (SIGTERM). Takes about a minute after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/install-deps.sh

echo "== building fire-agent (release, fully static)"
agent="$(scripts/build-static.sh fire-agent)/fire-agent"
[ -x "$agent" ] || { echo "build failed" >&2; exit 1; }
started=$(date +%s)

work="$(mktemp -d /tmp/fire-agent-demo.XXXXXX)"
agent_pid="" sensor_pid=""
cleanup() {
    [ -n "$sensor_pid" ] && kill "$sensor_pid" 2>/dev/null || true
    [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null || true
    declare -F stop_local_influxd >/dev/null && stop_local_influxd
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# --- the fleet backend -------------------------------------------------------------------
. scripts/local-influxd.sh
start_influxd() { start_local_influxd "$work"; }
stop_influxd() { stop_local_influxd; }
query() { influx_query "$1"; }
# Prints "measurement count" for each measurement (count of its first field).
counts() {
    python3 - "$influx" <<'PY'
import json, sys, urllib.parse, urllib.request
base = sys.argv[1]
def q(statement):
    url = base + "/query?" + urllib.parse.urlencode({"db": "fleet", "q": statement})
    return json.load(urllib.request.urlopen(url))["results"][0].get("series", [])
for series in q("SHOW MEASUREMENTS"):
    for (name,) in series["values"]:
        rows = q('SELECT count(*) FROM "%s"' % name)[0]["values"][0]
        print("   %-14s %6d points" % (name, max(v for v in rows[1:] if v is not None)))
PY
}
start_influxd
echo "== influxd (InfluxDB $(influxd version 2>/dev/null | awk '{print $2}')) on $influx"
query "CREATE DATABASE fleet" > /dev/null

# --- the agent ----------------------------------------------------------------------------
mkdir -p "$work/spool"
cat > "$work/fire-agent.json5" <<CONF
// The demo's config: short periods so the demo is quick (a board would use minutes).
{
  device: { id: "demo-board", labels: { site: "lab" } },
  server: { url: "$influx", connectTimeout: "1s" },
  telemetry: {
    interval: "2s", syncInterval: "2s", jitter: 0.1,
    spoolDirectory: "spool",
    influx: { database: "fleet", precision: "ns" },
  },
  queue: { directory: "queue", retry: { initial: "500ms", maximum: "2s" } },
  daemon: { statusFile: "status.json" },
}
CONF
"$agent" config check --config "$work/fire-agent.json5"
echo "== fire-agent run --config $work/fire-agent.json5"
"$agent" run --config "$work/fire-agent.json5" 2> "$work/agent.log" &
agent_pid=$!

# A sensor program: every 0.5 s a file of 10 points, written aside and renamed into the spool.
(
    n=0
    while true; do
        now=$(date +%s%N)
        for i in $(seq 0 9); do echo "sensor,probe=p$i reading=$((n * 10 + i))i $((now + i))"; done > "$work/spool/.s$n"
        mv "$work/spool/.s$n" "$work/spool/s$n.lp"
        n=$((n + 1))
        echo "$n" > "$work/sensor.count"
        sleep 0.5
    done
) &
sensor_pid=$!
status_json() { "$agent" status --config "$work/fire-agent.json5" --json 2>/dev/null || true; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

sleep 6
echo "== points in InfluxDB after 6 s"
counts
echo "== fire-agent status"
"$agent" status --config "$work/fire-agent.json5" | sed 's/^/   /'

echo "== stopping influxd (an outage): the agent keeps collecting and queueing"
outage_start=$(date +%s%N)
stop_influxd
for _ in 1 2 3 4; do
    sleep 2
    echo "   +$(python3 -c "print('%.0f' % (($(date +%s%N) - $outage_start) / 1e9))") s: $(status_json | field '"queue %d batches, %d bytes; last delivery %s" % (d["queue"]["records"], d["queue"]["bytes"], d["lastDelivery"]["result"])')"
done
echo "== starting influxd again"
outage_end=$(date +%s%N)
start_influxd
for _ in $(seq 120); do
    sleep 0.5
    records=$(status_json | field 'd["queue"]["records"]')
    [ "$records" = 0 ] && break
done
echo "   queue drained $(python3 -c "print('%.1f' % (($(date +%s%N) - $outage_end) / 1e9))") s after influxd came back"

echo "== stopping the sensor, a last sync, then SIGTERM to the agent"
kill "$sensor_pid"; wait "$sensor_pid" 2>/dev/null || true; sensor_pid=""
sleep 3
kill -TERM "$agent_pid"
term_start=$(date +%s%N)
wait "$agent_pid"; agent_status=$?; agent_pid=""
echo "   fire-agent exited with status $agent_status in $(python3 -c "print('%.2f' % (($(date +%s%N) - $term_start) / 1e9))") s"

echo "== every point, once"
counts
sent=$(( $(cat "$work/sensor.count") * 10 ))
stored=$(query 'SELECT count(reading) FROM sensor' | field 'd["results"][0]["series"][0]["values"][0][1]')
left=$(ls "$work/spool" | grep -vc rejected || true)
echo "   sensor points written to the spool: $sent; in InfluxDB: $stored; spool files left: $left"
echo "   agent log: $(grep -c . "$work/agent.log") lines ($(grep -c 'not delivered' "$work/agent.log" || true) failed attempts during the outage); last lines:"
tail -3 "$work/agent.log" | sed 's/^/     /'
[ "$agent_status" = 0 ] && [ "$sent" = "$stored" ] && [ "$left" = 0 ] || { echo "== demo FAILED" >&2; exit 1; }
echo "== demo passed in $(( $(date +%s) - started )) s after the build"
