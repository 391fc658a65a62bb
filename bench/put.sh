#!/usr/bin/env bash
# PUT to nginx: `fire-agent request -T` vs `curl -T`, whole processes, the same nginx (WebDAV
# PUT into a tmpfs, one worker), alternating runs. Reports the median MB/s, the client's CPU
# seconds per GiB, and the nginx worker's CPU seconds per GiB for each client (read from
# /proc/PID/stat around each run: on loopback the server shares the machine, and what a
# client does changes what the server spends). Usage:
#   bench/put.sh [RUNS] [MIB]     (default 9 runs of a 256 MiB file). Results: bench/results/put.md.
# TF_NO_SENDFILE=1 in the environment does nothing unless the binary was built to read it
# (the experiment in docs/BENCHMARKS.md#put-to-nginx).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
runs="${1:-9}"
mib="${2:-256}"
scripts/install-deps.sh
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-put.XXXXXX)"
shm="$(mktemp -d /dev/shm/tinyfire-put.XXXXXX)"
agent="${FIRE_AGENT:-$(scripts/build-static.sh fire-agent)/fire-agent}"
mkdir -p "$shm/www" "$shm/body"
chmod -R 777 "$shm"
head -c $((mib * 1024 * 1024)) /dev/urandom > "$work/file.bin"
. bench/lib.sh
port="$(free_port)"
cat > "$work/nginx.conf" <<EOF
worker_processes 1;
error_log $work/error.log;
pid $work/nginx.pid;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $shm/body;
  client_max_body_size 0;
  server {
    listen 127.0.0.1:$port;
    root $shm/www;
    location /put/ { dav_methods PUT; create_full_put_path on; }
  }
}
EOF
nginx -c "$work/nginx.conf"
trap 'nginx -c "$work/nginx.conf" -s stop 2>/dev/null || true; rm -rf "$work" "$shm"' EXIT
for _ in $(seq 50); do [ -s "$work/nginx.pid" ] && curl -s -o /dev/null -T "$work/file.bin" "http://127.0.0.1:$port/put/warm" && break; sleep 0.1; done
worker="$(pgrep -P "$(cat "$work/nginx.pid")" | head -1)"
ticks="$(getconf CLK_TCK)"
worker_cpu() { awk '{print $14 + $15}' "/proc/$worker/stat"; }

# one CMD...: "elapsed client-cpu-seconds nginx-cpu-seconds" for one run.
one() {
    local before after
    before="$(worker_cpu)"
    /usr/bin/time -f "%e %U %S" -o "$work/time.txt" "$@" >/dev/null
    after="$(worker_cpu)"
    read -r elapsed user sys < "$work/time.txt"
    awk -v e="$elapsed" -v u="$user" -v s="$sys" -v a="$after" -v b="$before" -v t="$ticks" 'BEGIN { print e, u + s, (a - b) / t }'
}

url="http://127.0.0.1:$port/put"
tf=() cu=()
for i in $(seq "$runs"); do
    tf+=("$(one "$agent" request -o /dev/null -T "$work/file.bin" "$url/tf")")
    cu+=("$(one curl -s -o /dev/null -T "$work/file.bin" "$url/curl")")
done
read -r te tc tn ce cc cn < <({ printf '%s\n' "${tf[@]}"; echo --; printf '%s\n' "${cu[@]}"; } | column_medians)
mkdir -p bench/results
python3 - "$te" "$tc" "$tn" "$ce" "$cc" "$cn" "$mib" "$runs" "$(curl --version | head -1)" "$(nginx -v 2>&1)" > bench/results/put.md <<'PY'
import sys
te, tc, tn, ce, cc, cn = map(float, sys.argv[1:7])
mib, runs, curl, nginx = int(sys.argv[7]), sys.argv[8], sys.argv[9], sys.argv[10]
gib = mib / 1024
size = mib * 1048576
print(f"| PUT {mib} MiB to nginx (WebDAV, tmpfs), median of {runs} | curl | TinyFire | ratio (TinyFire/curl) |")
print("|---|---:|---:|---:|")
print(f"| MB/s | {size/ce/1e6:.0f} | {size/te/1e6:.0f} | {ce/te:.2f} |")
print(f"| client CPU s/GiB | {cc/gib:.2f} | {tc/gib:.2f} | {tc/cc:.2f} |")
print(f"| nginx worker CPU s/GiB | {cn/gib:.2f} | {tn/gib:.2f} | {tn/cn:.2f} |")
print()
print(f"{curl}; {nginx}.")
PY
cat bench/results/put.md
