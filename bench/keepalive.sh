#!/usr/bin/env bash
# Keep-alive request rate as a user meets it: one whole process doing N sequential 1 KiB GETs
# on one keep-alive connection (start-up, connect and exit included), timed from outside,
# TinyFire (`tinyfire-bench keepalive`, Alamofire-style `await session.request(url)
# .serializingData().response` in a loop) against curl built on the same mbedTLS (`curl -K`
# with N URLs) and Debian's curl (OpenSSL), over plain HTTP and HTTPS to one local nginx.
# Rounds interleave the clients so they share the background load; medians are reported.
#   bench/keepalive.sh [ROUNDS] [N]       (default 5 rounds of 10,000 requests)
#   TINYFIRE_OLD_BENCH=PATH               also time an older tinyfire-bench binary in the same
#                                         rounds ("TinyFire (old)"), for before/after figures
#   bench/keepalive.sh --callgrind        instructions per request (marginal cost between a
#                                         1,000- and a 3,000-request run), TinyFire and curl+mbedTLS
# Results: bench/results/keepalive.md (or keepalive-callgrind.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
mode=time
if [ "${1:-}" = --callgrind ]; then mode=callgrind; shift; fi
rounds="${1:-5}"
n="${2:-10000}"
scripts/install-deps.sh >&2
command -v valgrind >/dev/null 2>&1 || { [ "$mode" = time ] || apt-get install -y -qq valgrind >/dev/null; }
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-keepalive.XXXXXX)"
. bench/lib.sh
bin="$(scripts/build-static.sh tinyfire-bench)"
curl_mbedtls="$(bench/build-curl-mbedtls.sh)"
trap '[ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null; rm -rf "$work"' EXIT
start_bench_nginx "keepalive_requests 1000000;"

http_url="http://127.0.0.1:$http_port/1k.bin"
https_url="https://localhost:$https_port/1k.bin"
export TINYFIRE_CACERT="$work/ca.pem"

if [ "$mode" = callgrind ]; then
    strip --strip-debug -o "$work/tfb" "$bin/tinyfire-bench"
    # Ir of one whole process; the bench's own warm-up request is one more than COUNT.
    tf_ir() { valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$work/tfb" keepalive "$1" "$2" >/dev/null 2>"$work/cg.err"; sed -n 's/.*Collected : //p' "$work/cg.err"; }
    curl_ir() {
        for _ in $(seq "$2"); do echo "url = \"$1\""; echo 'output = "/dev/null"'; done > "$work/cg-urls.txt"
        valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$curl_mbedtls" -s --cacert "$work/ca.pem" -K "$work/cg-urls.txt" 2>"$work/cg.err"
        sed -n 's/.*Collected : //p' "$work/cg.err"
    }
    {
        echo "| instructions per keep-alive request (callgrind, (Ir(3000) − Ir(1000)) / 2000) | TinyFire | curl + mbedTLS | ratio (TinyFire/curl) |"
        echo "|---|---:|---:|---:|"
        for scheme in http https; do
            url="$http_url"; [ "$scheme" = https ] && url="$https_url"
            t1=$(tf_ir "$url" 1000); t3=$(tf_ir "$url" 3000)
            c1=$(curl_ir "$url" 1000); c3=$(curl_ir "$url" 3000)
            python3 -c "
import sys
t1, t3, c1, c3 = map(int, sys.argv[2:])
t, c = (t3 - t1) / 2000, (c3 - c1) / 2000
print(f'| {sys.argv[1]} | {t/1000:.1f} K | {c/1000:.1f} K | {t/c:.2f} |')" "$scheme" "$t1" "$t3" "$c1" "$c3"
        done
        echo
        echo "valgrind $(valgrind --version | sed 's/valgrind-//'); $(date -u +%Y-%m-%d)."
    } > "$work/report.md"
    mkdir -p bench/results
    cp "$work/report.md" bench/results/keepalive-callgrind.md
    cat "$work/report.md"
    exit 0
fi

for scheme in http https; do
    url="$http_url"; [ "$scheme" = https ] && url="$https_url"
    for _ in $(seq "$n"); do echo "url = \"$url\""; echo 'output = "/dev/null"'; done > "$work/$scheme-urls.txt"
done

# One run under GNU time: "elapsed user sys".
timed() { /usr/bin/time -f "%e %U %S" -o "$work/time.txt" "$@" >/dev/null; cat "$work/time.txt"; }

for scheme in http https; do
    url="$http_url"; [ "$scheme" = https ] && url="$https_url"
    clients=(tinyfire curl-mbedtls curl)
    [ -n "${TINYFIRE_OLD_BENCH:-}" ] && clients+=(tinyfire-old)
    for round in $(seq "$rounds"); do
        # The order rotates round by round, so no client always runs after the same one.
        shift_by=$((round % ${#clients[@]}))
        for client in "${clients[@]:$shift_by}" "${clients[@]:0:$shift_by}"; do
            case "$client" in
                # The bench makes one warm-up request before its COUNT: n requests in all, as curl.
                tinyfire) echo "tinyfire $(timed "$bin/tinyfire-bench" keepalive "$url" $((n - 1)))" ;;
                tinyfire-old) echo "tinyfire-old $(timed "$TINYFIRE_OLD_BENCH" keepalive "$url" $((n - 1)))" ;;
                curl-mbedtls) echo "curl-mbedtls $(timed "$curl_mbedtls" -s --cacert "$work/ca.pem" -K "$work/$scheme-urls.txt")" ;;
                curl) echo "curl $(timed curl -s --cacert "$work/ca.pem" -K "$work/$scheme-urls.txt")" ;;
            esac
        done
    done > "$work/$scheme.txt"
done

mkdir -p bench/results
python3 - "$work" "$n" "$rounds" "$("$curl_mbedtls" --version | head -1 | cut -d' ' -f1-2)" "$(curl --version | head -1 | cut -d' ' -f1-2)" > "$work/report.md" <<'PY'
import statistics, sys
work, n, rounds, curl_mbedtls, curl = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
print(f"| {n:,} sequential 1 KiB GETs, one process, one keep-alive connection | client | requests/s | CPU s (user+sys) | TinyFire ratio (requests/s) |")
print("|---|---|---:|---:|---:|")
for scheme in ("http", "https"):
    rows = {}
    for line in open(f"{work}/{scheme}.txt"):
        client, e, u, s = line.split()
        rows.setdefault(client, []).append((float(e), float(u) + float(s)))
    med = {c: (statistics.median(e for e, _ in r), statistics.median(cpu for _, cpu in r)) for c, r in rows.items()}
    tf = med["tinyfire"][0]
    for client, label in (("tinyfire", "TinyFire"), ("tinyfire-old", "TinyFire (old)"), ("curl-mbedtls", "curl + mbedTLS"),
                          ("curl", "curl (OpenSSL)")):
        if client not in med:
            continue
        e, cpu = med[client]
        ratio = "" if client == "tinyfire" else f"{e / tf:.2f}"
        print(f"| {scheme.upper()} | {label} | {n / e:,.0f} | {cpu:.2f} | {ratio} |")
print()
print(f"Whole processes timed by GNU time, medians of {rounds} interleaved rounds; {curl_mbedtls} (mbedTLS), {curl}; ratio = TinyFire's requests/s over the client's.")
PY
cp "$work/report.md" bench/results/keepalive.md
cat "$work/report.md"
