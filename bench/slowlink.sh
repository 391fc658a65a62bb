#!/usr/bin/env bash
# Draining a telemetry backlog over a bad link, whole processes as a board runs them:
# `fire-agent run` in a network namespace whose only way to influxd is a veth with random loss
# (iptables -m statistic, both directions) and a relay that holds every chunk for half the
# round trip in each direction (this kernel has no netem). The spool holds FILES files of LINES
# timestamped lines each; the time is from the agent's start until influxd holds every point.
#
#   bench/slowlink.sh [FILES] [LINES] [RTT_MS] [LOSS] [OLD_AGENT]
#       default 500 files, 10 lines, 500 ms, 0.05; OLD_AGENT: a fire-agent built from an
#       earlier commit, measured the same way ("before"). Results: bench/results/slowlink.md.
#
# Cases: the old agent (one batch per file, one in flight); this agent with queue.inFlight 1
# (batches filled across files); this agent as configured by default (filled, 4 in flight);
# and, where filling cannot help (files of lines the agent must stamp: each ends its batch),
# inFlight 1 against 4.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
files="${1:-500}"
lines="${2:-10}"
rtt="${3:-500}"
loss="${4:-0.05}"
old="${5:-${TINYFIRE_OLD_AGENT:-}}"
scripts/install-deps.sh
command -v iptables >/dev/null 2>&1 || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables >/dev/null
}
swift build -c release --product fire-agent >/dev/null
agent="$(swift build -c release --show-bin-path)/fire-agent"
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-slowlink.XXXXXX)"
ns="fa-slow-$$"
. scripts/local-influxd.sh
cleanup() {
    [ -n "${relay_pid:-}" ] && kill "$relay_pid" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    ip link del "vs$$" 2>/dev/null || true
    stop_local_influxd
    rm -rf "$work"
}
trap cleanup EXIT
start_local_influxd "$work"

# The namespace: 10.203.0.2 inside, 10.203.0.1 on the host end; loss on the inside's interface.
ip netns add "$ns"
ip link add "vs$$" type veth peer name "vi$$" netns "$ns"
ip addr add 10.203.0.1/24 dev "vs$$"
ip link set "vs$$" up
ip netns exec "$ns" ip addr add 10.203.0.2/24 dev "vi$$"
ip netns exec "$ns" ip link set "vi$$" up
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" iptables -A OUTPUT -o "vi$$" -m statistic --mode random --probability "$loss" -j DROP
ip netns exec "$ns" iptables -A INPUT -i "vi$$" -m statistic --mode random --probability "$loss" -j DROP

# The relay: 10.203.0.1:PORT → influxd, every chunk held RTT/2 each way, in order.
relay_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("10.203.0.1", 0)); print(s.getsockname()[1])')"
influx_port="${influx##*:}"
python3 bench/delay-relay.py 10.203.0.1 "$relay_port" "$influx_port" "$(python3 -c "print($rtt / 2000)")" > "$work/relay.log" 2>&1 &
relay_pid=$!
for _ in $(seq 100); do
    python3 -c "import socket,sys; socket.create_connection(('10.203.0.1', $relay_port), 1)" 2>/dev/null && break
    sleep 0.1
done

python3 - "$agent" "${old:-}" "$work" "$influx" "$ns" "$relay_port" "$files" "$lines" "$rtt" "$loss" <<'PY' | tee bench/results/slowlink.md
import json, os, shutil, signal, subprocess, sys, time, urllib.parse, urllib.request
agent, old, work, influx, ns, port, files, lines, rtt, loss = sys.argv[1:11]
files, lines = int(files), int(lines)

def query(q, db):
    url = influx + "/query?" + urllib.parse.urlencode({"db": db, "q": q})
    return json.load(urllib.request.urlopen(urllib.request.Request(url, method="POST")))

def count(db):
    series = query('SELECT count("v") FROM "slow"', db)["results"][0].get("series")
    return series[0]["values"][0][1] if series else 0

def run(name, binary, in_flight, stamped):
    db = "slow_" + name.replace("-", "_")
    query(f"CREATE DATABASE {db}", db)
    d = f"{work}/{name}"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d + "/spool")
    for index in range(files):
        with open(f"{d}/spool/.f{index:05d}", "w") as f:
            for line in range(lines):
                sequence = index * lines + line
                time_part = f" {1_700_000_000_000_000_000 + sequence}" if stamped else ""
                f.write(f"slow,file=f{index},line={line} v={sequence}i,seq={sequence}i{time_part}\n")
        os.rename(f"{d}/spool/.f{index:05d}", f"{d}/spool/f{index:05d}.lp")
    off = ("cpu: false, memory: false, load: false, uptime: false, disk: false, network: false, thermal: false, "
           "pressure: false, agent: false")
    extra = f"inFlight: {in_flight}," if in_flight else ""
    with open(d + "/agent.json5", "w") as f:
        f.write(f"""{{
  device: {{ id: "slow-board" }},
  server: {{ url: "http://10.203.0.1:{port}", connectTimeout: "10s", requestTimeout: "120s" }},
  telemetry: {{ interval: "1h", syncInterval: "1s", jitter: 0, spoolDirectory: "spool", collectors: {{ {off} }},
               influx: {{ database: "{db}", precision: "ns" }} }},
  queue: {{ directory: "queue", {extra} retry: {{ initial: "500ms", maximum: "5s" }} }},
  daemon: {{ statusFile: "status.json" }},
  logging: {{ level: "warning" }},
}}""")
    started = time.monotonic()
    process = subprocess.Popen(["ip", "netns", "exec", ns, binary, "run", "--config", d + "/agent.json5"],
                               stdout=subprocess.DEVNULL, stderr=open(d + "/agent.log", "w"))
    expected = files * lines
    seen = 0
    while time.monotonic() - started < 1800:
        seen = count(db)
        if seen >= expected:
            break
        time.sleep(0.2)
    took = time.monotonic() - started
    process.send_signal(signal.SIGTERM)
    process.wait()
    return took, seen, expected

print(f"# Draining {files} spool files ({lines} lines each) over {rtt} ms RTT and {float(loss) * 100:.0f} % loss each way\n")
print("`bench/slowlink.sh`: fire-agent run in a network namespace; influxd behind a relay that holds each chunk RTT/2 each way;")
print("iptables -m statistic drops packets at random in both directions. Time from the agent's start until influxd holds every point.\n")
print("| agent | lines | batches filled across files | in flight | drained in | points |")
print("|---|---|---|---|---|---|")
cases = []
if old:
    cases.append(("before", old, None, True, "no (one per file)", "1"))
cases += [
    ("filled-1", agent, 1, True, "yes", "1"),
    ("filled-4", agent, 4, True, "yes", "4 (default)"),
    ("stamping-1", agent, 1, False, "no (stamped by the agent)", "1"),
    ("stamping-4", agent, 4, False, "no (stamped by the agent)", "4 (default)"),
]
for name, binary, in_flight, stamped, filled, flight in cases:
    took, seen, expected = run(name, binary, in_flight, stamped)
    label = "before: " + os.environ.get("OLD_LABEL", "earlier build") if name == "before" else "this"
    status = f"{seen}/{expected}" + ("" if seen >= expected else " (gave up)")
    print(f"| {label} | {'timestamped' if stamped else 'no timestamps'} | {filled} | {flight} | {took:.1f} s | {status} |", flush=True)
PY
