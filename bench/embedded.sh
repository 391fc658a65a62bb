#!/usr/bin/env bash
# The Embedded fire-agent (cross/embedded/build.sh) beside the full-Swift static one, whole
# processes as a board runs them, x86_64 natively (the ARM builds' sizes are listed; their
# times under qemu-user would measure qemu):
#   - sizes: static, stripped, gzip -9;
#   - `fire-agent sync --once` taking a 100,000-point spool file to a local influxd (20 gzip'd
#     batches): wall time and peak RSS, interleaved runs, medians;
#   - `fire-agent config check`: a whole process's start-up and a config read, 50 runs a round;
#   - `fire-agent run` idle: the daemon with every collector on (collect every 10 s, sync every
#     60 s), its resident memory (VmRSS, RssAnon, RssFile) and threads after 15 s; again with a
#     firmware section polling every 5 s (influxd answers 404: no offer) and a report queue.
# Usage: bench/embedded.sh [RUNS]   (default 3). Results: bench/results/embedded.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
runs="${1:-3}"
scripts/install-deps.sh
full="$(scripts/build-static.sh fire-agent)/fire-agent"
[ -x .build-embedded/x86_64/fire-agent ] || cross/embedded/build.sh x86_64 >/dev/null
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-embedded-bench.XXXXXX)"
. scripts/local-influxd.sh
trap 'stop_local_influxd; rm -rf "$work"' EXIT
start_local_influxd "$work"
strip -o "$work/full" "$full"
cp .build-embedded/x86_64/fire-agent "$work/embedded"

python3 - "$work" "$influx" "$runs" <<'PY' | tee bench/results/embedded.md
import gzip, os, statistics, subprocess, sys, time
work, influx, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
agents = {"Embedded": work + "/embedded", "full Swift": work + "/full"}
spool = "".join(f"bench,n={i % 100} v={i}i {1700000000000000000 + i}\n" for i in range(100_000))

def size(path):
    data = open(path, "rb").read()
    return len(data), len(gzip.compress(data, 9))

print("## Embedded fire-agent beside the full-Swift one (bench/embedded.sh)\n")
print("| binary | static, stripped | gzip -9 |\n|---|---:|---:|")
for arch in ["armv7", "aarch64", "x86_64"]:
    path = f".build-embedded/{arch}/fire-agent"
    if os.path.exists(path):
        raw, packed = size(path)
        print(f"| Embedded, {arch} | {raw:,} | {packed:,} |")
raw, packed = size(agents["full Swift"])
print(f"| full Swift, x86_64 | {raw:,} | {packed:,} |\n")

def config(directory):
    os.makedirs(directory + "/spool", exist_ok=True)
    off = ", ".join(f"{c}: false" for c in ["cpu", "memory", "load", "uptime", "disk", "network", "thermal", "pressure", "agent"])
    path = directory + "/agent.json5"
    with open(path, "w") as f:
        f.write(f'{{ device: {{ id: "b" }}, server: {{ url: "{influx}" }}, telemetry: {{ influx: {{ database: "bench", '
                f'precision: "ns" }}, spoolDirectory: "spool", collectors: {{ {off} }} }}, queue: {{ directory: "queue" }} }}')
    os.chmod(path, 0o600)
    return path

results = {name: {"s": [], "rss": []} for name in agents}
for round in range(runs):
    for name, binary in agents.items():
        directory = f"{work}/{name.replace(' ', '-')}-{round}"
        path = config(directory)
        with open(directory + "/spool/.b.lp", "w") as f:
            f.write(spool)
        os.rename(directory + "/spool/.b.lp", directory + "/spool/b.lp")
        timed = subprocess.run(["/usr/bin/time", "-f", "%e %M", binary, "sync", "--once", "--config", path],
                               capture_output=True, text=True)
        out = timed.stdout
        assert "spooled 100000 lines" in out and "remaining 0" in out, out + timed.stderr
        seconds, kib = timed.stderr.strip().splitlines()[-1].split()
        results[name]["s"].append(float(seconds))
        results[name]["rss"].append(int(kib))

print(f"`sync --once` of a 100,000-point spool file to influxd (20 batches), {runs} interleaved runs, medians:\n")
print("| agent | wall time | peak RSS |\n|---|---:|---:|")
for name, r in results.items():
    print(f"| {name} | {statistics.median(r['s']):.2f} s | {statistics.median(r['rss']) / 1024:.1f} MiB |")
ratio = statistics.median(results["Embedded"]["s"]) / statistics.median(results["full Swift"]["s"])
print(f"\nEmbedded / full Swift, wall time: {ratio:.2f}\n")

path = config(work + "/check")
checks = {name: [] for name in agents}
for round in range(5):
    for name, binary in agents.items():
        start = time.perf_counter()
        for _ in range(50):
            subprocess.run([binary, "config", "check", path], stdout=subprocess.DEVNULL, check=True)
        checks[name].append((time.perf_counter() - start) / 50 * 1000)
print("`config check`, a whole process (start-up, a config read), 5 rounds of 50, median per run:\n")
print("| agent | per run |\n|---|---:|")
for name, values in checks.items():
    print(f"| {name} | {statistics.median(values):.2f} ms |")

def status_fields(pid):
    fields = {}
    for line in open(f"/proc/{pid}/status"):
        key, _, value = line.partition(":")
        fields[key] = value.split()[0] if value.split() else ""
    return fields

print("\n`run` idle after 15 s (every collector on, collect every 10 s, sync every 60 s), kB from /proc/PID/status:\n")
print("| agent | firmware | VmRSS | RssAnon | RssFile | threads |\n|---|---|---:|---:|---:|---:|")
key = work + "/vendor.pub"
subprocess.run(f"openssl ecparam -genkey -name prime256v1 2>/dev/null | openssl ec -pubout -out {key} 2>/dev/null", shell=True, check=True)
for firmware in [False, True]:
    for name, binary in agents.items():
        directory = f"{work}/idle-{name.replace(' ', '-')}-{firmware}"
        os.makedirs(directory + "/spool", exist_ok=True)
        path = directory + "/agent.json5"
        section = ""
        if firmware:
            with open(directory + "/version", "w") as f:
                f.write("1.0.0\n")
            section = (f'firmware: {{ manifestURL: "{influx}/manifest.json", keys: ["{key}"], deviceType: "bench", '
                       f'versionFile: "{directory}/version", directory: "firmware", pollInterval: "5s", '
                       f'install: ["/bin/true", "{{file}}"], statusURL: "{influx}/status" }}, ')
        with open(path, "w") as f:
            f.write(f'{{ device: {{ id: "idle" }}, server: {{ url: "{influx}" }}, telemetry: {{ interval: "10s", syncInterval: "60s", '
                    f'influx: {{ database: "bench" }}, spoolDirectory: "spool" }}, queue: {{ directory: "queue" }}, {section}'
                    f'daemon: {{ statusFile: "status.json" }} }}')
        os.chmod(path, 0o600)
        daemon = subprocess.Popen([binary, "run", "--config", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(15)
        fields = status_fields(daemon.pid)
        daemon.terminate()
        assert daemon.wait(30) == 0
        print(f"| {name} | {'polls every 5 s' if firmware else 'none'} | {int(fields['VmRSS']):,} | {int(fields['RssAnon']):,} "
              f"| {int(fields['RssFile']):,} | {fields['Threads']} |")
PY
