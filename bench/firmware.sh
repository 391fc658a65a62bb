#!/usr/bin/env bash
# Firmware updates as a board runs them, whole processes against nginx on loopback:
#   - peak RSS of `fire-agent run` (VmHWM) through a whole update (poll, download with the
#     digest built as bytes arrive, verify, install) of a 1 MiB, a 64 MiB and a 1 GiB image;
#   - the update's time from start to "installed", against what a shell script does with curl:
#     `curl -o image && sha256sum image` (medians of RUNS);
#   - verifying a 1 GiB image read from the page cache: `fire-agent firmware verify --image`
#     (signature, then mbedTLS SHA-256 through one 256 KiB buffer) against `sha256sum`;
#   - the receive-rate limit: `fire-agent request --limit-rate` against `curl --limit-rate`
#     (32 MiB at 4 MiB/s, 1 MiB at 512 KiB/s), the rate reached as a ratio of the limit;
#   - the static binary's size with the agent complete (and the aarch64 one, when cross/out has it).
# Usage: bench/firmware.sh [RUNS]    (default 3). Results: bench/results/firmware.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
runs="${1:-3}"
scripts/install-deps.sh
agent="$(scripts/build-static.sh fire-agent)/fire-agent"
[ -x "$agent" ] || { echo "build failed" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-fw-bench.XXXXXX)"
chmod 755 "$work"
mkdir -p "$work/www"
. scripts/local-nginx.sh
trap 'stop_local_nginx "$work"; rm -rf "$work"' EXIT
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/vendor.key" 2>/dev/null
openssl pkey -in "$work/vendor.key" -pubout -out "$work/vendor.pub"
for size in 1 64 1024; do head -c "$((size << 20))" /dev/urandom > "$work/www/image-$size.bin"; done
start_local_nginx "$work"

python3 - "$agent" "$work" "$base" "$runs" <<'PY' | tee bench/results/firmware.md
import json, os, signal, statistics, subprocess, sys, time
agent, work, base, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout

def publish(size_mib, version):
    image = f"{work}/www/image-{size_mib}.bin"
    digest = sh("sha256sum", image).split()[0]
    manifest = json.dumps({"version": version, "compatible": ["bench"], "image": f"image-{size_mib}.bin",
                           "size": os.path.getsize(image), "sha256": digest})
    with open(f"{work}/www/manifest.json", "w") as f:
        f.write(manifest)
    sh("openssl", "dgst", "-sha256", "-sign", f"{work}/vendor.key", "-out", f"{work}/www/manifest.json.sig",
       f"{work}/www/manifest.json")
    os.chmod(f"{work}/www/manifest.json", 0o644)
    os.chmod(f"{work}/www/manifest.json.sig", 0o644)

def update(size_mib, run):
    """One whole update in a fresh agent: seconds from start to 'installed', peak RSS in KiB."""
    d = f"{work}/agent-{size_mib}-{run}"
    os.makedirs(d + "/spool")
    with open(d + "/version", "w") as f:
        f.write("1.0.0\n")
    publish(size_mib, f"1.0.{run + 1}")
    with open(d + "/agent.json5", "w") as f:
        f.write(f"""{{
  device: {{ id: "bench-board" }},
  server: {{ url: "{base}/ingest" }},
  telemetry: {{ interval: "1h", syncInterval: "1h", influx: {{ database: "bench" }},
               collectors: {{ cpu: false, memory: false, load: false, uptime: false, disk: false, network: false,
                              thermal: false, pressure: false, agent: false }} }},
  queue: {{ directory: "queue" }},
  daemon: {{ statusFile: "status.json" }},
  firmware: {{ manifestURL: "{base}/manifest.json", keys: ["{work}/vendor.pub"], deviceType: "bench",
              versionFile: "version", directory: "firmware", pollInterval: "1h", install: ["touch", "{{file}}.installed"] }},
}}""")
    # The time: until the installer (touch) leaves its mark beside the verified image; the
    # status file is written at most once a second, too coarse to time by.
    marker = d + "/firmware/staging/image.bin.installed"
    started = time.monotonic()
    process = subprocess.Popen([agent, "run", "--config", d + "/agent.json5"], stderr=subprocess.DEVNULL)
    while time.monotonic() - started < 600 and not os.path.exists(marker) and process.poll() is None:
        time.sleep(0.002)
    elapsed = time.monotonic() - started
    installed = None
    while time.monotonic() - started < 600:
        try:
            with open(d + "/status.json") as f:
                firmware = json.load(f).get("firmware", {})
            if firmware.get("phase") in ("installed", "failed"):
                installed = firmware["phase"]
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    with open(f"/proc/{process.pid}/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    process.send_signal(signal.SIGTERM)
    process.wait()
    sh("rm", "-rf", d)
    if installed != "installed":
        sys.exit(f"the {size_mib} MiB update ended {installed}")
    return elapsed, hwm

def curl_and_sha(size_mib):
    target = f"{work}/curl.bin"
    started = time.monotonic()
    sh("curl", "-s", "-o", target, f"{base}/image-{size_mib}.bin")
    sh("sha256sum", target)
    elapsed = time.monotonic() - started
    os.unlink(target)
    return elapsed

print("# Firmware update benchmark\n")
print(f"fire-agent static, nginx on loopback, {runs} runs each (medians); {os.cpu_count()} cores.\n")
print("## A whole update: peak RSS and time\n")
print("`fire-agent run` from its start until the installer runs (process start, config, poll, signature,")
print("download with the digest built as the bytes arrive, verify, `touch` as the installer); peak RSS is the")
print("agent's VmHWM once `installed`. Against it, a shell script's `curl -o image && sha256sum image`")
print("(no signature, no install).\n")
print("| image | agent peak RSS | agent time | curl + sha256sum time | ratio |")
print("|---|---|---|---|---|")
for size in (1, 64, 1024):
    results, curls = [], []
    for run in range(runs):
        results.append(update(size, run))
        curls.append(curl_and_sha(size))
    seconds = statistics.median(r[0] for r in results)
    hwm = statistics.median(r[1] for r in results)
    curl = statistics.median(curls)
    print(f"| {size} MiB | {hwm / 1024:.1f} MiB | {seconds:.2f} s | {curl:.2f} s | {seconds / curl:.2f}× |")

print("\n## Verifying a 1 GiB image (page cache warm)\n")
image = f"{work}/www/image-1024.bin"
publish(1024, "9.9.9")
subprocess.run(["cat", image], stdout=subprocess.DEVNULL)  # into the page cache
def timed(*args):
    started = time.monotonic()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started
verify, sums = [], []
for _ in range(runs):
    verify.append(timed(agent, "firmware", "verify", "--key", f"{work}/vendor.pub", f"{work}/www/manifest.json", "--image", image))
    sums.append(timed("sha256sum", image))
v, s = statistics.median(verify), statistics.median(sums)
print("| command | time | GiB/s |")
print("|---|---|---|")
print(f"| `fire-agent firmware verify --image` (signature + SHA-256) | {v:.2f} s | {1 / v:.2f} |")
print(f"| `sha256sum` | {s:.2f} s | {1 / s:.2f} |")
print(f"\nratio fire-agent / sha256sum: {v / s:.2f}×\n")

print("## Receive-rate limit (`--limit-rate`)\n")
print("Whole transfers to /dev/null; the rate reached as a fraction of the limit (1.00 = exact).\n")
print("| transfer | limit | fire-agent | curl |")
print("|---|---|---|---|")
# (MiB transferred, limit, the limit as both tools spell it): 32 MiB as the first half of the
# 64 MiB image (a Range request), 1 MiB as the 1 MiB image.
for size, limit, label in ((32, 4 << 20, "4M"), (1, 512 << 10, "512k")):
    url = f"{base}/image-64.bin" if size == 32 else f"{base}/image-1.bin"
    headers = ["-H", "Range: bytes=0-33554431"] if size == 32 else []
    rows = {}
    for name, command in (("fire-agent", [agent, "request", "-o", "/dev/null", "--limit-rate", label] + headers + [url]),
                          ("curl", ["curl", "-s", "-o", "/dev/null", "--limit-rate", label] + headers + [url])):
        times = []
        for _ in range(runs):
            times.append(timed(*command))
        rows[name] = statistics.median(times)
    transferred = size << 20
    print(f"| {size} MiB | {label}/s | {transferred / rows['fire-agent'] / limit:.2f} | {transferred / rows['curl'] / limit:.2f} |")

print("\n## Static binary with the agent complete\n")
print("| binary | as built | stripped | gzip -9 |")
print("|---|---|---|---|")
def sizes(path):
    stripped = path + ".bench-stripped"
    subprocess.run(["strip", "-o", stripped, path], check=True)
    gz = len(subprocess.run(["gzip", "-9", "-c", stripped], check=True, capture_output=True).stdout)
    row = (os.path.getsize(path), os.path.getsize(stripped), gz)
    os.unlink(stripped)
    return row
mib = lambda n: f"{n / (1 << 20):.1f} MiB"
built = sizes(agent)
print(f"| x86_64 static | {mib(built[0])} | {mib(built[1])} | {mib(built[2])} |")
cross = "cross/out/fire-agent-aarch64-static"
if os.path.exists(cross) and os.path.exists(cross + ".stripped"):
    gz = len(subprocess.run(["gzip", "-9", "-c", cross + ".stripped"], check=True, capture_output=True).stdout)
    print(f"| aarch64 static (cross/out) | {mib(os.path.getsize(cross))} | {mib(os.path.getsize(cross + '.stripped'))} | {mib(gz)} |")
PY
