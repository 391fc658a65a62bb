#!/usr/bin/env bash
# fire-agent as a board runs it, whole processes against a real influxd on loopback:
#   - the static binary's size (as built, stripped, gzip'd);
#   - `fire-agent run` idle with the default periods (60 s collection and sync, every
#     collector on): CPU over IDLE_SECONDS extrapolated to an hour, RSS and its anonymous part
#     (Private_Dirty in /proc/PID/smaps_rollup: what a board cannot reclaim);
#   - the same while `fire-agent run` delivers a queue of 100,000 points (20 batches of 5,000);
#   - points/s delivered from the queue (`fire-agent sync --once`, a whole process) against curl
#     posting the same 20 gzip'd batches on one keep-alive connection, interleaved, medians.
# Usage: bench/agent.sh [RUNS] [IDLE_SECONDS]    (default 3 and 120). Results: bench/results/agent.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
runs="${1:-3}"
idle="${2:-120}"
scripts/install-deps.sh
agent="$(scripts/build-static.sh fire-agent)/fire-agent"
[ -x "$agent" ] || { echo "build failed" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-agent-bench.XXXXXX)"
. scripts/local-influxd.sh
trap 'stop_local_influxd; rm -rf "$work"' EXIT
start_local_influxd "$work"

python3 - "$agent" "$work" "$influx" "$runs" "$idle" <<'PY' | tee bench/results/agent.md
import gzip, json, os, signal, statistics, subprocess, sys, time, urllib.parse, urllib.request
agent, work, influx, runs, idle = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
POINTS, BATCH = 100_000, 5_000
TICK = os.sysconf("SC_CLK_TCK")

def query(q, db="bench"):
    url = influx + "/query?" + urllib.parse.urlencode({"db": db, "q": q})
    return json.load(urllib.request.urlopen(urllib.request.Request(url, method="POST")))

def count(db="bench"):
    series = query('SELECT count("v") FROM "bench"', db)["results"][0].get("series")
    return series[0]["values"][0][1] if series else 0

def fresh_db(db="bench"):
    query(f"DROP DATABASE {db}", db)
    query(f"CREATE DATABASE {db}", db)

def write_config(name, db, collectors_on, extra=""):
    d = f"{work}/{name}"
    os.makedirs(d + "/spool", exist_ok=True)
    off = "" if collectors_on else ("collectors: { cpu: false, memory: false, load: false, uptime: false, disk: false, "
                                    "network: false, thermal: false, pressure: false, agent: false },")
    with open(d + "/agent.json5", "w") as f:
        f.write(f"""{{
  device: {{ id: "bench-board" }},
  server: {{ url: "{influx}" }},
  telemetry: {{ {off} spoolDirectory: "spool", batch: {{ maxPoints: {BATCH} }},
               influx: {{ database: "{db}", precision: "ns" }} }},
  queue: {{ directory: "queue" }},
  daemon: {{ statusFile: "status.json" }},
  {extra}
}}""")
    return d

def smaps(pid):
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[-1] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1])
    return fields

def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])  # utime + stime

def mib(kb): return kb / 1024

# A binary just linked has dirty pages in the page cache, which smaps counts as Private_Dirty
# until they are written back: write them back first.
os.sync()

# --- size -----------------------------------------------------------------------------------
size = os.path.getsize(agent)
subprocess.run(["cp", agent, f"{work}/stripped"], check=True)
subprocess.run(["strip", f"{work}/stripped"], check=True)
stripped = os.path.getsize(f"{work}/stripped")
with open(f"{work}/stripped", "rb") as f:
    gz = len(gzip.compress(f.read(), 9))

# --- idle -----------------------------------------------------------------------------------
fresh_db("idle")
d = write_config("idle", "idle", True)
log = open(d + "/log", "w")
process = subprocess.Popen([agent, "run", "--config", d + "/agent.json5"], stderr=log)
time.sleep(10)  # started, first collection done
ticks0, t0 = cpu_ticks(process.pid), time.monotonic()
peak = {"Rss": 0, "Private_Dirty": 0, "Anonymous": 0, "Private_Clean": 0}
while time.monotonic() - t0 < idle:
    time.sleep(1)
    for k, v in smaps(process.pid).items():
        if k in peak: peak[k] = max(peak[k], v)
ticks1, t1 = cpu_ticks(process.pid), time.monotonic()
idle_cpu_seconds = (ticks1 - ticks0) / TICK
idle_share = idle_cpu_seconds / (t1 - t0)
process.send_signal(signal.SIGTERM); process.wait()
idle_peak = dict(peak)

# --- a queue of 100,000 points ----------------------------------------------------------------
lines = [f"bench,series=s{i % 1000} v={i}i {1_700_000_000_000_000_000 + i}" for i in range(POINTS)]
batches = ["\n".join(lines[i:i + BATCH]) + "\n" for i in range(0, POINTS, BATCH)]
for i, batch in enumerate(batches):
    with open(f"{work}/batch{i}.gz", "wb") as f: f.write(gzip.compress(batch.encode(), 6))

influxd = None
def stop_influxd():
    global influxd
    subprocess.run(["pkill", "-f", f"^influxd -config {work}/influxdb.conf"])
    if influxd: influxd.wait()
    influxd = None
    for _ in range(300):
        try:
            urllib.request.urlopen(influx + "/ping"); time.sleep(0.1)
        except Exception: return

def start_influxd():
    global influxd
    influxd = subprocess.Popen(["influxd", "-config", f"{work}/influxdb.conf"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            urllib.request.urlopen(influx + "/ping"); return
        except Exception: time.sleep(0.1)

def fill_queue(d):
    """Stops influxd, spools the points, lets `sync --once` queue them (its flush fails), starts influxd."""
    stop_influxd()
    for i, batch in enumerate(batches):
        with open(f"{d}/spool/.b{i}", "w") as f: f.write(batch)
        os.rename(f"{d}/spool/.b{i}", f"{d}/spool/b{i}.lp")
    r = subprocess.run([agent, "sync", "--once", "--config", d + "/agent.json5"], capture_output=True, text=True)
    assert r.returncode == 75 and f"spooled {POINTS} lines" in r.stdout, (r.returncode, r.stdout, r.stderr)
    start_influxd()

# Memory while the daemon delivers the full queue.
d = write_config("load", "bench", True)
fresh_db()
fill_queue(d)
fresh_db()
process = subprocess.Popen([agent, "run", "--config", d + "/agent.json5"], stderr=open(d + "/log", "w"))
start = time.monotonic()
peak = {"Rss": 0, "Private_Dirty": 0, "Anonymous": 0, "Private_Clean": 0}
while count() < POINTS and time.monotonic() - start < 120:
    for k, v in smaps(process.pid).items():
        if k in peak: peak[k] = max(peak[k], v)
    time.sleep(0.02)
load_seconds = time.monotonic() - start
process.send_signal(signal.SIGTERM); process.wait()
load_peak = dict(peak)
assert count() == POINTS, count()

# Throughput: the agent's flush vs curl posting the same gzip'd batches, interleaved.
d = write_config("flush", "bench", False)
url = f"{influx}/write?db=bench&precision=ns"
curl_args = ["curl", "-s", "-o", "/dev/null", "--fail"]
for i in range(len(batches)):
    if i: curl_args.append("--next")
    curl_args += ["-s", "-o", "/dev/null", "--fail", "-H", "Content-Encoding: gzip", "-H", "Content-Type: text/plain; charset=utf-8",
                  "--data-binary", f"@{work}/batch{i}.gz", url]
def timed(argv):
    """Runs argv; returns exit status, wall seconds, CPU seconds and peak RSS (KiB) of that process."""
    # GNU time forks and execs the program itself: its peak RSS is the program's alone (a
    # child forked from this Python would count Python's pages until the exec).
    start = time.monotonic()
    r = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", "-o", f"{work}/time.txt", *argv],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.monotonic() - start
    user, system, rss = open(f"{work}/time.txt").read().split()[-3:]
    return r.returncode, elapsed, float(user) + float(system), int(rss)
agent_rows, curl_rows = [], []
for _ in range(runs):
    fill_queue(d)
    fresh_db()
    code, elapsed, cpu, rss = timed([agent, "sync", "--once", "--config", d + "/agent.json5"])
    assert code == 0 and count() == POINTS, (code, count())
    agent_rows.append((POINTS / elapsed, cpu, rss))
    fresh_db()
    code, elapsed, cpu, rss = timed(curl_args)
    assert code == 0 and count() == POINTS, (code, count())
    curl_rows.append((POINTS / elapsed, cpu, rss))
stop_influxd()
med = lambda rows, i: statistics.median(r[i] for r in rows)

curl_version = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split()[1]
influx_version = subprocess.run(["influxd", "version"], capture_output=True, text=True).stdout.split()[1]
print(f"## fire-agent (bench/agent.sh {runs} {idle}; {time.strftime('%Y-%m-%d')}, influxd {influx_version}, curl {curl_version}, {os.cpu_count()} cores)\n")
print("| measure | figure | budget |")
print("|---|---:|---:|")
print(f"| static binary (x86_64): as built / stripped / stripped+gzip MiB | {mib(size/1024):.1f} / {mib(stripped/1024):.1f} / {mib(gz/1024):.1f} | |")
print(f"| idle `run` (60 s periods, all collectors), {idle} s: RSS peak MiB | {mib(idle_peak['Rss']):.1f} | ≤ 12 |")
print(f"| idle: anonymous (`Anonymous`; `Private_Dirty`) peak MiB | {mib(idle_peak['Anonymous']):.2f}; {mib(idle_peak['Private_Dirty']):.2f} | ≤ 2 |")
print(f"| idle: clean file pages (the binary's code and data, reclaimable) MiB | {mib(idle_peak['Private_Clean']):.1f} | |")
print(f"| idle: CPU s over {idle} s → per hour; share of one core | {idle_cpu_seconds:.2f} → {idle_cpu_seconds * 3600 / (t1 - t0):.1f} s; {idle_share * 100:.3f} % | < 0.1 % |")
print(f"| `run` delivering 100,000 queued points: RSS peak MiB | {mib(load_peak['Rss']):.1f} | ≤ 12 |")
print(f"| the same: anonymous (`Anonymous`; `Private_Dirty`) peak MiB | {mib(load_peak['Anonymous']):.2f}; {mib(load_peak['Private_Dirty']):.2f} | ≤ 4 |")
print(f"| the same: start to all points in InfluxDB, s | {load_seconds:.2f} | |")
print()
print(f"| 100,000 points in 20 gzip'd batches to influxd (medians of {runs}, interleaved) | curl (one process, keep-alive) | fire-agent sync --once (from its queue) | ratio |")
print("|---|---:|---:|---:|")
print(f"| points/s | {med(curl_rows, 0):,.0f} | {med(agent_rows, 0):,.0f} | {med(agent_rows, 0) / med(curl_rows, 0):.2f} |")
print(f"| wall s | {POINTS / med(curl_rows, 0):.3f} | {POINTS / med(agent_rows, 0):.3f} | |")
print(f"| peak RSS MiB of the client | {mib(med(curl_rows, 2)):.1f} | {mib(med(agent_rows, 2)):.1f} | {med(agent_rows, 2) / med(curl_rows, 2):.2f} |")
PY
