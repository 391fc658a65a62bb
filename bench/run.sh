#!/usr/bin/env bash
# TinyFire vs curl against the same local nginx, in one run. Reports ratios (the machine is
# shared and noisy: absolute figures drift, ratios hold). Usage:
#   bench/run.sh [RUNS]        (default 3 runs of each transfer; the median is reported)
# Results: a markdown table on stdout and in bench/results/latest.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
runs="${1:-3}"
scripts/install-deps.sh
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-bench.XXXXXX)"
# The shipping form: fully static release executables.
bin="$(scripts/build-static.sh fire-agent tinyfire-bench)"
agent="$bin/fire-agent"
[ -x "$agent" ] && [ -x "$bin/tinyfire-bench" ] || { echo "build failed" >&2; exit 1; }
size_bytes=$(stat -c %s "$agent")
strip -o "$work.stripped" "$agent" 2>/dev/null || cp "$agent" "$work.stripped"
stripped_bytes=$(stat -c %s "$work.stripped")
gzip_bytes=$(gzip -9 -c "$work.stripped" | wc -c)
rm -f "$work.stripped"


. scripts/local-nginx.sh
trap 'stop_local_nginx "$work"; rm -rf "$work"' EXIT
mkdir -p "$work/www"
head -c $((1024 * 1024 * 1024)) /dev/urandom > "$work/www/1g.bin"
head -c $((1024 * 1024)) /dev/urandom > "$work/www/1m.bin"
head -c 1024 /dev/urandom > "$work/www/1k.bin"
start_local_nginx "$work"
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"

# Warm the page cache so neither client pays for reading the file from disk.
cat "$work/www/1g.bin" > /dev/null

. bench/lib.sh

gib=1073741824
report="$work/report.md"
{
echo "| transfer | client | MB/s | CPU s/GiB | peak RSS MiB | ratio vs curl |"
echo "|---|---|---:|---:|---:|---:|"
} > "$report"
row() { # label client elapsed user sys rss bytes ratio
    python3 -c "
import sys
label, client, e, u, s, rss, size, ratio = sys.argv[1:]
e, u, s, rss, size = float(e), float(u), float(s), float(rss), float(size)
print(f'| {label} | {client} | {size/e/1e6:.0f} | {(u+s)/(size/$gib):.2f} | {rss/1024:.1f} | {ratio} |')
" "$@" >> "$report"
}
ratio() { python3 -c "import sys; print(f'{float(sys.argv[2])/float(sys.argv[1]):.2f}')" "$1" "$2"; }

for target in file discard; do
    if [ "$target" = file ]; then out="$work/out.bin"; else out=/dev/null; fi
    # Alternating runs, with `sync` before each so neither inherits the other's writeback.
    read -r te tu ts tr ce cu cs cr < <(measure_pair "$agent request -o $out $base/1g.bin" "curl -s -o $out $base/1g.bin")
    row "1 GiB to $target" curl "$ce" "$cu" "$cs" "$cr" $gib "1.00"
    row "1 GiB to $target" TinyFire "$te" "$tu" "$ts" "$tr" $gib "$(ratio "$te" "$ce") (throughput)"
done

read -r _ _ _ cr1m < <(measure curl -s -o "$work/out.bin" "$base/1m.bin")
read -r _ _ _ tr1m < <(measure "$agent" request -o "$work/out.bin" "$base/1m.bin")
read -r _ _ _ cr1g < <(measure curl -s -o "$work/out.bin" "$base/1g.bin")
read -r _ _ _ tr1g < <(measure "$agent" request -o "$work/out.bin" "$base/1g.bin")

# 10,000 sequential 1 KiB GETs on one keep-alive connection: five rounds, TinyFire and curl
# interleaved so both see the same background load; medians of the wall times.
n=10000
for _ in $(seq $n); do echo "url = \"$base/1k.bin\""; echo 'output = "/dev/null"'; done > "$work/curl-urls.txt"
read -r curl_ka tf_ka < <(python3 - "$bin/tinyfire-bench" "$base/1k.bin" "$n" "$work/curl-urls.txt" <<'PY'
import re, statistics, subprocess, sys, time
bench, url, n, urls = sys.argv[1:]
tf, cu = [], []
for _ in range(5):
    out = subprocess.run([bench, "keepalive", url, n], capture_output=True, text=True, check=True).stdout
    tf.append(float(re.search(r"seconds=([0-9.]+)", out).group(1)))
    t = time.perf_counter()
    subprocess.run(["curl", "-s", "-K", urls], check=True)
    cu.append(time.perf_counter() - t)
print(statistics.median(cu), statistics.median(tf))
PY
)

# One whole process for a 1 KiB GET (50 runs, mean wall time; peak RSS median).
one() { python3 - "$@" <<'PY'
import subprocess, sys, time
cmd = sys.argv[1:]
t = time.perf_counter()
for _ in range(50): subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
print((time.perf_counter() - t) / 50 * 1000)
PY
}
curl_one=$(one curl -s "$base/1k.bin")
tf_one=$(one "$agent" request "$base/1k.bin")
read -r _ _ _ curl_one_rss < <(measure curl -s "$base/1k.bin")
read -r _ _ _ tf_one_rss < <(measure "$agent" request "$base/1k.bin")

{
echo
echo "| measure | curl | TinyFire | ratio (TinyFire/curl) |"
echo "|---|---:|---:|---:|"
python3 - "$cr1m" "$tr1m" "$cr1g" "$tr1g" "$curl_ka" "$tf_ka" "$n" "$curl_one" "$tf_one" "$curl_one_rss" "$tf_one_rss" <<'PY'
import sys
cr1m, tr1m, cr1g, tr1g, cka, tka, n, c1, t1, c1r, t1r = map(float, sys.argv[1:])
print(f"| peak RSS, 1 MiB download (MiB) | {cr1m/1024:.1f} | {tr1m/1024:.1f} | {tr1m/cr1m:.2f} |")
print(f"| peak RSS, 1 GiB download (MiB) | {cr1g/1024:.1f} | {tr1g/1024:.1f} | {tr1g/cr1g:.2f} |")
print(f"| peak RSS growth 1 MiB → 1 GiB (KiB) | {cr1g-cr1m:.0f} | {tr1g-tr1m:.0f} | |")
print(f"| keep-alive 1 KiB GETs, requests/s ({int(n)} sequential, median of 5 interleaved rounds) | {n/cka:.0f} | {n/tka:.0f} | {(n/tka)/(n/cka):.2f} |")
print(f"| one process, 1 KiB GET, wall ms (mean of 50) | {c1:.2f} | {t1:.2f} | {t1/c1:.2f} |")
print(f"| one process, 1 KiB GET, peak RSS MiB | {c1r/1024:.1f} | {t1r/1024:.1f} | {t1r/c1r:.2f} |")
PY
echo
echo "fire-agent static binary: $((size_bytes / 1024)) KiB, stripped $((stripped_bytes / 1024)) KiB, stripped+gzip $((gzip_bytes / 1024)) KiB."
echo
echo "curl: $(curl --version | head -1 | cut -d' ' -f1-2); nginx $("$nginx_bin" -v 2>&1 | sed 's/.*nginx\///'); runs per figure: $runs (median); $(nproc) cores; $(date -u +%Y-%m-%d)."
} >> "$report"
mkdir -p bench/results
cp "$report" bench/results/latest.md
cat "$report"
