#!/usr/bin/env bash
# Through a proxy, as a user runs it: TinyFire and curl through the same local squid to the same
# local nginx, whole processes, interleaved round by round, medians.
#   - 10,000 sequential 1 KiB GETs on one keep-alive connection: http:// in absolute form,
#     https:// through one CONNECT tunnel (`tinyfire-bench keepalive` with TINYFIRE_PROXY, against
#     curl built on the same mbedTLS with `-x` and `-K` listing the URLs);
#   - a 1 GiB download: http:// and https:// (`fire-agent request -x … -o /dev/null` against
#     curl+mbedTLS `-x … -o /dev/null`).
#   bench/proxy.sh [ROUNDS] [N]       (default 5 rounds, 10,000 requests)
# Results: bench/results/proxy.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
rounds="${1:-5}"
n="${2:-10000}"
runs="$rounds"
scripts/install-deps.sh >&2
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-proxy.XXXXXX)"
. bench/lib.sh
bench_bin="$(scripts/build-static.sh tinyfire-bench)/tinyfire-bench"
agent_bin="$(scripts/build-static.sh fire-agent)/fire-agent"
curl_mbedtls="$(bench/build-curl-mbedtls.sh)"
squid_name="tinyfirebench$$"
cleanup() {
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null
    [ -f "$work/squid.pid" ] && kill "$(cat "$work/squid.pid")" 2>/dev/null
    sleep 0.5
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/www"
head -c 1024 /dev/urandom > "$work/www/1k.bin"
head -c $((1024 * 1024 * 1024)) /dev/urandom > "$work/www/1g.bin"
make_test_ca "$work"
https_port="$(free_port)"
proxy_port="$(free_port)"
. scripts/local-nginx.sh
start_local_nginx "$work" \
    "listen 127.0.0.1:$https_port ssl; ssl_certificate $work/server.pem; ssl_certificate_key $work/server.key;" \
    "ssl_protocols TLSv1.2; ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256;"
http_port="$port"
# squid started by root drops to its own user: it must reach the scratch directory.
chmod 777 "$work"
cat > "$work/squid.conf" <<CONF
http_port 127.0.0.1:$proxy_port
pid_filename $work/squid.pid
cache deny all
cache_mem 8 MB
access_log none
cache_log $work/squid-cache.log
cache_store_log none
coredump_dir $work
netdb_filename none
http_access allow all
shutdown_lifetime 0 seconds
CONF
"$(command -v squid || echo /usr/sbin/squid)" -n "$squid_name" -f "$work/squid.conf"
proxy="http://127.0.0.1:$proxy_port"
for _ in $(seq 100); do curl -s -o /dev/null -x "$proxy" "http://127.0.0.1:$http_port/1k.bin" && break; sleep 0.2; done
cat "$work/www/1g.bin" > /dev/null

export TINYFIRE_CACERT="$work/ca.pem"
for scheme in http https; do
    port="$http_port"; host=127.0.0.1
    [ "$scheme" = https ] && { port="$https_port"; host=localhost; }
    for _ in $(seq "$n"); do echo "url = \"$scheme://$host:$port/1k.bin\""; echo 'output = "/dev/null"'; done > "$work/urls-$scheme.txt"
done

# Rows: case client elapsed user sys maxrss_kb.
: > "$work/rows.txt"
row() {
    local case="$1" client="$2"
    shift 2
    echo "$case $client $(timed "$@")" >> "$work/rows.txt"
}
for round in $(seq "$rounds"); do
    clients=(tinyfire curl)
    [ $((round % 2)) = 0 ] && clients=(curl tinyfire)
    for client in "${clients[@]}"; do
        for scheme in http https; do
            port="$http_port"; host=127.0.0.1
            [ "$scheme" = https ] && { port="$https_port"; host=localhost; }
            if [ "$client" = tinyfire ]; then
                row "keepalive-$scheme" tinyfire env TINYFIRE_PROXY="$proxy" "$bench_bin" keepalive "$scheme://$host:$port/1k.bin" "$n"
                row "download-$scheme" tinyfire "$agent_bin" request --cacert "$work/ca.pem" -x "$proxy" -o /dev/null "$scheme://$host:$port/1g.bin"
            else
                row "keepalive-$scheme" curl "$curl_mbedtls" -s --cacert "$work/ca.pem" -x "$proxy" -K "$work/urls-$scheme.txt"
                row "download-$scheme" curl "$curl_mbedtls" -s --cacert "$work/ca.pem" -x "$proxy" -o /dev/null "$scheme://$host:$port/1g.bin"
            fi
        done
    done
done

python3 - "$work/rows.txt" "$n" > bench/results/proxy.md <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
n = int(sys.argv[2])
def med(case, client, column):
    return statistics.median(float(r[column]) for r in rows if r[0] == case and r[1] == client)
print(f"| through squid (medians of {len(rows) // 8} rounds) | TinyFire | curl + mbedTLS | ratio (curl time / TinyFire time) | CPU s TinyFire vs curl | max RSS TinyFire vs curl |")
print("|---|---:|---:|---:|---|---|")
for case, label in [("keepalive-http", f"{n:,} keep-alive GETs, http:// (absolute form)"),
                    ("keepalive-https", f"{n:,} keep-alive GETs, https:// (one CONNECT tunnel)"),
                    ("download-http", "1 GiB, http://"), ("download-https", "1 GiB, https://")]:
    t, c = med(case, "tinyfire", 2), med(case, "curl", 2)
    tcpu = med(case, "tinyfire", 3) + med(case, "tinyfire", 4)
    ccpu = med(case, "curl", 3) + med(case, "curl", 4)
    trss, crss = med(case, "tinyfire", 5), med(case, "curl", 5)
    if case.startswith("keepalive"):
        figures = f"{n / t:,.0f} req/s", f"{n / c:,.0f} req/s"
    else:
        figures = f"{1024 / t:,.0f} MiB/s", f"{1024 / c:,.0f} MiB/s"
    print(f"| {label} | {figures[0]} | {figures[1]} | {c / t:.2f} | {tcpu:.2f} vs {ccpu:.2f} | {trss / 1024:.1f} vs {crss / 1024:.1f} MiB |")
PY
cat bench/results/proxy.md
