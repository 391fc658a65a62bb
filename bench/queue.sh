#!/usr/bin/env bash
# The durable offline queue: enqueue latency with fdatasync (one thread: p50/p99/max; eight
# threads: group commit), the same on tmpfs (what the sync costs), and replay throughput to a
# local nginx against curl sending the same POSTs on one keep-alive connection. Usage:
#   bench/queue.sh [RUNS]      (default 3; medians). Results: bench/results/queue.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
runs="${1:-3}"
scripts/install-deps.sh
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-queue.XXXXXX)"
bin="$(scripts/build-static.sh tinyfire-bench)"
bench="$bin/tinyfire-bench"
[ -x "$bench" ] || { echo "build failed" >&2; exit 1; }

. scripts/local-nginx.sh
shm="$(mktemp -d /dev/shm/tinyfire-queue.XXXXXX)"
trap 'stop_local_nginx "$work"; rm -rf "$work" "$shm"' EXIT
mkdir -p "$work/www"
start_local_nginx "$work" 'location /ingest/ { return 204; }'

n=5000
body=200
python3 - "$bench" "$work" "$shm" "$base" "$n" "$body" "$runs" > "$work/figures.txt" <<'PY'
import os, re, shutil, statistics, subprocess, sys, time
bench, work, shm, base, n, body, runs = sys.argv[1:]
n, runs = int(n), int(runs)

def run(*args, env=None):
    out = subprocess.run([bench, *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)}: {out.stdout}{out.stderr}")
    return dict(re.findall(r"(\w+)=([0-9.]+)", out.stdout))

def enqueue(root, count, threads, size):
    figures = []
    for i in range(runs):
        d = f"{root}/q-{threads}-{size}-{i}"
        figures.append(run("enqueue", d, str(count), str(threads), str(size)))
        shutil.rmtree(d)
    return {k: statistics.median(float(f[k]) for f in figures) for k in figures[0]}

def rss(cmd):
    out = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True)
    return int(out.stderr.strip().splitlines()[-1])

seq = enqueue(work, n, 1, int(body))
par = enqueue(work, n, 8, int(body))
big = enqueue(work, 500, 1, 100 * 1024)
tmpfs = enqueue(shm, n, 1, int(body))

# Replay: TinyFire flushes n queued POSTs; curl sends the same n POSTs from one config file
# (one process, one keep-alive connection). Interleaved rounds.
env = dict(os.environ, TINYFIRE_BENCH_URL=f"{base}/ingest/bench")
payload = "a" * int(body)
with open(f"{work}/curl.txt", "w") as f:
    f.write("next\n".join(f'url = "{base}/ingest/bench/0-{i}"\ndata = "{payload}"\noutput = "/dev/null"\n' for i in range(n)))
tf, cu, tf_rss, cu_rss = [], [], [], []
for i in range(runs):
    d = f"{work}/replay-{i}"
    run("enqueue", d, str(n), "1", body, env=env)
    start = time.perf_counter()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", f"{work}/rss.txt", bench, "replay", d], check=True, capture_output=True)
    tf.append(time.perf_counter() - start)
    tf_rss.append(int(open(f"{work}/rss.txt").read().split()[-1]))
    shutil.rmtree(d)
    start = time.perf_counter()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", f"{work}/rss.txt", "curl", "-s", "-K", f"{work}/curl.txt"], check=True)
    cu.append(time.perf_counter() - start)
    cu_rss.append(int(open(f"{work}/rss.txt").read().split()[-1]))
tf_s, cu_s = statistics.median(tf), statistics.median(cu)
print(f"""| measure | figure |
|---|---:|
| enqueue, {body} B body, 1 thread, ext4 + fdatasync: p50 / p99 / max µs | {seq['p50_us']:.0f} / {seq['p99_us']:.0f} / {seq['max_us']:.0f} |
| enqueue, {body} B body, 1 thread: enqueues/s | {seq['per_second']:.0f} |
| enqueue, {body} B body, 8 threads (group commit): enqueues/s; p50 / p99 µs | {par['per_second']:.0f}; {par['p50_us']:.0f} / {par['p99_us']:.0f} |
| enqueue, 100 KiB body (a body file, synced, then the record), 1 thread: p50 / p99 µs | {big['p50_us']:.0f} / {big['p99_us']:.0f} |
| enqueue on tmpfs (sync is free there), {body} B, 1 thread: p50 / p99 µs | {tmpfs['p50_us']:.0f} / {tmpfs['p99_us']:.0f} |

| replay of {n} queued {body} B POSTs to local nginx | curl (same POSTs, one keep-alive connection) | TinyFire (flush) | ratio (TinyFire/curl) |
|---|---:|---:|---:|
| records/s (median of {runs} interleaved rounds) | {n/cu_s:.0f} | {n/tf_s:.0f} | {cu_s/tf_s:.2f} |
| peak RSS MiB | {statistics.median(cu_rss)/1024:.1f} | {statistics.median(tf_rss)/1024:.1f} | {statistics.median(tf_rss)/statistics.median(cu_rss):.2f} |""")
PY
{
    cat "$work/figures.txt"
    echo
    echo "Queue on $(df -T "$work" | awk 'NR==2 {print $2}') ($(findmnt -no SOURCE --target "$work" 2>/dev/null || echo ?)); $(curl --version | head -1 | cut -d' ' -f1-2); runs per figure: $runs (median); $(nproc) cores; $(date -u +%Y-%m-%d)."
} > "$work/report.md"
mkdir -p bench/results
cp "$work/report.md" bench/results/queue.md
cat bench/results/queue.md
