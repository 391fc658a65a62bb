#!/usr/bin/env bash
# fire-agent's main job, end to end on this machine: installs what is missing, builds the
# static fire-agent, starts a real fleet backend on loopback (influxd, InfluxDB 1.x), runs
# `fire-agent run` with a demo config while a "sensor" program drops line-protocol files into
# the agent's spool, shows points arriving (counts per measurement), stops influxd and shows
# the queue growing, starts it again and shows every point delivered exactly once (counted).
# Then firmware: nginx serves a 64 MiB image and a manifest signed with a key made on the
# spot; the agent, reloaded with a firmware section, downloads it (progress in its log),
# verifies it, runs a demo installer, "reboots" (restarted with the new version in its
# version file), runs the health check, commits, and the reports that reached the server are
# shown. Then SIGTERM, and a broken release (its health check fails) installed and rolled back
# by `fire-agent firmware update --once` cycles, each exit status shown.
# Takes under a minute after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/install-deps.sh

echo "== building fire-agent (release, fully static)"
agent="$(scripts/build-static.sh fire-agent)/fire-agent"
[ -x "$agent" ] || { echo "build failed" >&2; exit 1; }
started=$(date +%s)

work="$(mktemp -d "${TMPDIR:-/tmp}"/fire-agent-demo.XXXXXX)"
agent_pid="" sensor_pid=""
cleanup() {
    [ -n "$sensor_pid" ] && kill "$sensor_pid" 2>/dev/null || true
    [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null || true
    declare -F stop_local_influxd >/dev/null && stop_local_influxd
    declare -F stop_local_nginx >/dev/null && stop_local_nginx "$work/fw"
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

echo "== stopping the sensor; a last sync"
kill "$sensor_pid"; wait "$sensor_pid" 2>/dev/null || true; sensor_pid=""
sleep 3
echo "== every point, once"
counts
sent=$(( $(cat "$work/sensor.count") * 10 ))
stored=$(query 'SELECT count(reading) FROM sensor' | field 'd["results"][0]["series"][0]["values"][0][1]')
left=$(ls "$work/spool" | grep -vc rejected || true)
echo "   sensor points written to the spool: $sent; in InfluxDB: $stored; spool files left: $left"
echo "   agent log: $(grep -c . "$work/agent.log") lines ($(grep -c 'not delivered' "$work/agent.log" || true) failed attempts during the outage)"
[ "$sent" = "$stored" ] && [ "$left" = 0 ] || { echo "== demo FAILED (telemetry)" >&2; exit 1; }

# --- firmware -----------------------------------------------------------------------------
# The vendor's side: a key made on the spot, an image, a manifest signed with openssl, all
# served by nginx, which also takes the agent's status reports at /status (logged).
. scripts/local-nginx.sh
fw="$work/fw"
mkdir -p "$fw/www" "$work/board"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$fw/vendor.key" 2>/dev/null
openssl pkey -in "$fw/vendor.key" -pubout -out "$work/board/vendor.pub"
python3 -c "import random, sys; random.seed(7); sys.stdout.buffer.write(random.randbytes(64 << 20))" > "$fw/www/gw-1.1.0.img"
chmod 755 "$work"     # nginx workers (www-data) reach $work/fw/www through it
start_local_nginx "$fw" \
    "location = /status { access_log $fw/status.log report; proxy_pass http://127.0.0.1:\$server_port/status-sink; }
     location = /status-sink { return 204; }" \
    "log_format report escape=none '\$request_body';"
image_sha=$(sha256sum "$fw/www/gw-1.1.0.img" | cut -c1-64)
cat > "$fw/www/manifest.json" <<MANIFEST
{ "version": "1.1.0", "compatible": ["demo-gw"], "image": "gw-1.1.0.img", "size": $((64 << 20)),
  "sha256": "$image_sha", "expires": "$(date -u -d '+30 days' +%Y-%m-%dT%H:%M:%SZ)", "notes": "demo release" }
MANIFEST
openssl dgst -sha256 -sign "$fw/vendor.key" -out "$fw/www/manifest.json.sig" "$fw/www/manifest.json"
chmod -R a+rX "$fw/www"
echo "== firmware: nginx on $base serves manifest.json (1.1.0, signed with a P-256 key made just now) and a 64 MiB image"
"$agent" firmware verify --key "$work/board/vendor.pub" "$fw/www/manifest.json" --image "$fw/www/gw-1.1.0.img" | sed 's/^/   /'

# The board: its version file and boot ID, an installer that writes "the other slot", a
# commit command (rauc install / rauc status mark-good on a real A/B board).
echo "1.0.0" > "$work/board/version"
cat /proc/sys/kernel/random/uuid > "$work/board/boot_id"
cat > "$work/board/install.sh" <<'INSTALL'
#!/bin/sh
# demo installer: $1 is the verified image, $2 its version
board="$(dirname "$0")"
cp "$1" "$board/slot-b.img" && echo "$2" > "$board/slot-b.version" && echo "wrote $(wc -c < "$1") bytes to slot B"
INSTALL
printf '#!/bin/sh\necho "marked slot B good"\n' > "$work/board/commit.sh"
# The health check the commit waits for: is the application up on the new version? (1.2.0,
# published later, is a release whose application dies at start.)
cat > "$work/board/health.sh" <<'HEALTH'
#!/bin/sh
if [ "$1" = "1.2.0" ]; then echo "app: exited with status 1 at start"; exit 1; fi
echo "app: answering on :8080"
HEALTH
printf '#!/bin/sh\ntouch "$(dirname "$0")/slot-b.bad"\necho "marked slot B bad"\n' > "$work/board/rollback.sh"
chmod +x "$work/board/install.sh" "$work/board/commit.sh" "$work/board/health.sh" "$work/board/rollback.sh"

# The same agent, reloaded (SIGHUP) with a firmware section.
sed -i '$d' "$work/fire-agent.json5"
cat >> "$work/fire-agent.json5" <<CONF
  // The manifest has an expiry; it is checked only against a clock an NTP client has
  // synchronized. A build machine may run none: trust the clock above its floor anyway. On a
  // board with an NTP client, leave clock.requireSync at its default (true).
  clock: { requireSync: false },
  firmware: {
    manifestURL: "$base/manifest.json",
    keys: ["board/vendor.pub"], deviceType: "demo-gw",
    versionFile: "board/version", bootIDFile: "board/boot_id", directory: "firmware",
    pollInterval: "2s", jitter: 0, maxBytesPerSecond: "24MiB",
    install: ["board/install.sh", "{file}", "{version}"], commit: ["board/commit.sh"],
    healthCheck: { command: ["board/health.sh", "{version}"], attempts: 2, interval: "1s", timeout: "10s" },
    rollback: ["board/rollback.sh"], confirmTimeout: "10m",
    statusURL: "$base/status",
  },
}
CONF
"$agent" config check --config "$work/fire-agent.json5" | sed 's/^/   /'
echo "== SIGHUP: the agent reloads its config with firmware updates on (board runs 1.0.0)"
kill -HUP "$agent_pid"
phase() { status_json | field 'd.get("firmware", {}).get("phase", "-") + " " + str(d.get("firmware", {}).get("version", ""))'; }
watch_until() {
    local want="$1" last="" now
    for _ in $(seq 600); do
        now=$(phase)
        [ "$now" != "$last" ] && echo "   status: firmware $now" && last="$now"
        case "$now" in "$want"*) return 0 ;; failed*) return 1 ;; esac
        sleep 0.2
    done
    return 1
}
watch_until installed || { echo "== demo FAILED (firmware)" >&2; tail -20 "$work/agent.log" >&2; exit 1; }
echo "   agent log:"
grep -E "firmware (offered|download|image verified|installer|update installed|installed:)" "$work/agent.log" | cut -c1-160 | sed 's/^/     /'

echo "== \"reboot\": SIGTERM, slot B's version boots (board/version), a new boot ID, the agent starts again"
kill -TERM "$agent_pid"; wait "$agent_pid" || true
cp "$work/board/slot-b.version" "$work/board/version"
cat /proc/sys/kernel/random/uuid > "$work/board/boot_id"
"$agent" run --config "$work/fire-agent.json5" 2>> "$work/agent.log" &
agent_pid=$!
watch_until done || { echo "== demo FAILED (firmware)" >&2; tail -20 "$work/agent.log" >&2; exit 1; }
grep -E "firmware (health check|commit|update done)" "$work/agent.log" | cut -c1-160 | sed 's/^/     /'
echo "== the reports that reached the server (nginx /status):"
for _ in $(seq 50); do [ "$(grep -c . "$fw/status.log" 2>/dev/null)" -ge 7 ] && break; sleep 0.2; done
python3 - "$fw/status.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    print("   %s %-11s %s -> %s%s" % (e["time"], e["state"], e.get("fromVersion", "?"), e["version"],
                                   (" (" + e["reason"] + ")") if "reason" in e else ""))
PY
"$agent" status --config "$work/fire-agent.json5" | grep -A3 '^firmware' | sed 's/^/   /'
installed_sha=$(sha256sum "$work/board/slot-b.img" | cut -c1-64)

echo "== SIGTERM to the agent"
kill -TERM "$agent_pid"
term_start=$(date +%s%N)
wait "$agent_pid"; agent_status=$?; agent_pid=""
echo "   fire-agent exited with status $agent_status in $(python3 -c "print('%.2f' % (($(date +%s%N) - $term_start) / 1e9))") s"
reports=$(grep -c . "$fw/status.log")
echo "   slot B holds the signed image: $([ "$installed_sha" = "$image_sha" ] && echo yes || echo NO); board runs $(cat "$work/board/version"); $reports reports"
[ "$agent_status" = 0 ] && [ "$installed_sha" = "$image_sha" ] && [ "$(cat "$work/board/version")" = 1.1.0 ] && [ "$reports" = 7 ] ||
    { echo "== demo FAILED" >&2; exit 1; }

# --- a broken release, rolled back, by one-shot cycles ----------------------------------------
python3 -c "import random, sys; random.seed(8); sys.stdout.buffer.write(random.randbytes(1 << 20))" > "$fw/www/gw-1.2.0.img"
cat > "$fw/www/manifest.json" <<MANIFEST
{ "version": "1.2.0", "compatible": ["demo-gw"], "image": "gw-1.2.0.img", "size": $((1 << 20)),
  "sha256": "$(sha256sum "$fw/www/gw-1.2.0.img" | cut -c1-64)", "expires": "$(date -u -d '+30 days' +%Y-%m-%dT%H:%M:%SZ)", "notes": "broken app" }
MANIFEST
openssl dgst -sha256 -sign "$fw/vendor.key" -out "$fw/www/manifest.json.sig" "$fw/www/manifest.json"
chmod -R a+rX "$fw/www"
# One cycle; the exit status it must give.
cycle() {
    local want="$1" code=0
    "$agent" firmware update --once --config "$work/fire-agent.json5" > "$work/cycle.out" 2> "$work/cycle.err" || code=$?
    cat "$work/cycle.err" >> "$work/agent.log"
    echo "   firmware update --once: exit $code: $(cat "$work/cycle.out"; grep '^fire-agent:' "$work/cycle.err" | cut -c13-220)"
    [ "$code" = "$want" ] || { echo "== demo FAILED (expected exit $want)" >&2; tail -20 "$work/cycle.err" >&2; exit 1; }
}
echo "== 1.2.0 published (its application dies at start): one-shot cycles, the daemon stopped"
cycle 10
echo "   \"reboot\" into 1.2.0"
cp "$work/board/slot-b.version" "$work/board/version"; cat /proc/sys/kernel/random/uuid > "$work/board/boot_id"
cycle 14
grep -E "firmware (health check (starts|failed)|rollback)" "$work/agent.log" | tail -5 | cut -c1-160 | sed 's/^/     /'
echo "   \"reboot\": slot B is marked bad, the bootloader boots 1.1.0"
[ -f "$work/board/slot-b.bad" ] && echo 1.1.0 > "$work/board/version"; cat /proc/sys/kernel/random/uuid > "$work/board/boot_id"
cycle 14
cycle 0
stop_local_nginx "$fw"
[ "$(cat "$work/board/version")" = 1.1.0 ] || { echo "== demo FAILED" >&2; exit 1; }
echo "== demo passed in $(( $(date +%s) - started )) s after the build"
