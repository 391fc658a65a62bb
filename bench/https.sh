#!/usr/bin/env bash
# HTTPS: TinyFire vs curl built against the same mbedTLS (Debian's 2.28), one local nginx
# (TLS 1.2, ECDHE-ECDSA-AES128-GCM-SHA256, P-256 certificate), in one run. Usage:
#   bench/https.sh [RUNS]     (default 3; medians). Results: bench/results/https.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
runs="${1:-3}"
scripts/install-deps.sh
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-https.XXXXXX)"
bin="$(scripts/build-static.sh fire-agent tinyfire-bench)"
agent="$bin/fire-agent"
curl_mbedtls="$(bench/build-curl-mbedtls.sh)"
gcc -O2 bench/gcm-ceiling.c -lmbedcrypto -o "$work/gcm-ceiling"

trap '[ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/www"
chmod 755 "$work"
head -c $((1024 * 1024 * 1024)) /dev/urandom > "$work/www/1g.bin"
head -c 1024 /dev/urandom > "$work/www/1k.bin"
chmod -R a+rX "$work/www"
. bench/lib.sh
make_test_ca "$work"
port="$(free_port)"
cat > "$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log;
events { worker_connections 64; }
http {
  access_log off; sendfile on; keepalive_requests 1000000;
  default_type application/octet-stream;
  client_body_temp_path $work/body; proxy_temp_path $work/proxy; fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi; scgi_temp_path $work/scgi;
  ssl_protocols TLSv1.2;
  ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256;
  ssl_session_cache shared:bench:10m;
  ssl_session_tickets off;
  server {
    listen 127.0.0.1:$port ssl;
    ssl_certificate $work/server.pem;
    ssl_certificate_key $work/server.key;
    root $work/www;
    location = /close { keepalive_timeout 0; return 200 "x"; }
  }
}
CONF
"$(command -v nginx || echo /usr/sbin/nginx)" -c "$work/nginx.conf" -e "$work/error.log"
base="https://localhost:$port"
for _ in $(seq 100); do "$curl_mbedtls" -s --cacert "$work/ca.pem" -o /dev/null "$base/1k.bin" && break; sleep 0.1; done
cat "$work/www/1g.bin" > /dev/null

# 1 GiB, alternating clients run by run.
read -r e_tf u_tf s_tf m_tf e_c u_c s_c m_c < <(measure_pair \
    "$agent request --cacert $work/ca.pem -o /dev/null $base/1g.bin" \
    "$curl_mbedtls -s --cacert $work/ca.pem -o /dev/null $base/1g.bin")
ceiling="$("$work/gcm-ceiling" 1024)"

# Handshakes: 1,000 new connections, with and without session resumption.
hs=1000
tf_resume="$(TINYFIRE_CACERT="$work/ca.pem" "$bin/tinyfire-bench" handshakes "$base/close" $hs resume)"
tf_full="$(TINYFIRE_CACERT="$work/ca.pem" "$bin/tinyfire-bench" handshakes "$base/close" $hs noresume)"
for i in $(seq $hs); do echo "url = \"$base/close\""; echo "output = \"/dev/null\""; done > "$work/urls.txt"
start=$(date +%s.%N); "$curl_mbedtls" -s --cacert "$work/ca.pem" -K "$work/urls.txt"; curl_resume=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
start=$(date +%s.%N); "$curl_mbedtls" -s --no-sessionid --cacert "$work/ca.pem" -K "$work/urls.txt"; curl_full=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")

# Keep-alive 1 KiB GETs over one TLS connection.
ka=5000
for i in $(seq $ka); do echo "url = \"$base/1k.bin\""; echo "output = \"/dev/null\""; done > "$work/ka.txt"
tf_ka=(); curl_ka=()
for _ in $(seq "$runs"); do
    tf_ka+=("$(TINYFIRE_CACERT="$work/ca.pem" "$bin/tinyfire-bench" keepalive "$base/1k.bin" $ka | sed 's/.*rps=//')")
    start=$(date +%s.%N); "$curl_mbedtls" -s --cacert "$work/ca.pem" -K "$work/ka.txt"
    curl_ka+=("$(python3 -c "import sys; print(int($ka / (float(sys.argv[2]) - float(sys.argv[1]))))" "$start" "$(date +%s.%N)")")
done

mkdir -p bench/results
python3 - "$e_tf" "$u_tf" "$s_tf" "$m_tf" "$e_c" "$u_c" "$s_c" "$m_c" "$ceiling" "$tf_resume" "$tf_full" "$curl_resume" "$curl_full" \
    "$(printf '%s\n' "${tf_ka[@]}" | column_medians)" "$(printf '%s\n' "${curl_ka[@]}" | column_medians)" "$("$curl_mbedtls" --version | head -1)" "$runs" > bench/results/https.md <<'PY'
import sys
(e_tf, u_tf, s_tf, m_tf, e_c, u_c, s_c, m_c, ceiling, tf_resume, tf_full, curl_resume, curl_full, tf_ka, curl_ka, curl_version, runs) = sys.argv[1:]
gib = 1073741824
def mbs(e): return gib / float(e) / 1e6
def kv(text): return dict(p.split("=") for p in text.split())
tr, tfu = kv(tf_resume), kv(tf_full)
hs = int(tr["handshakes"])
print("| 1 GiB over HTTPS (TLS 1.2, ECDHE-ECDSA-AES128-GCM) | MB/s | CPU s/GiB | peak RSS MiB | ratio vs curl+mbedTLS | share of the mbedTLS AES-GCM ceiling |")
print("|---|---:|---:|---:|---:|---:|")
print(f"| curl + mbedTLS | {mbs(e_c):.0f} | {float(u_c)+float(s_c):.2f} | {float(m_c)/1024:.1f} | 1.00 | {mbs(e_c)/float(ceiling):.2f} |")
print(f"| TinyFire (fire-agent) | {mbs(e_tf):.0f} | {float(u_tf)+float(s_tf):.2f} | {float(m_tf)/1024:.1f} | {float(e_c)/float(e_tf):.2f} | {mbs(e_tf)/float(ceiling):.2f} |")
print(f"| mbedTLS AES-128-GCM ceiling (16 KiB records, one core) | {float(ceiling):.0f} | | | | 1.00 |")
print()
print("| measure | curl + mbedTLS | TinyFire | ratio (TinyFire/curl) |")
print("|---|---:|---:|---:|")
print(f"| {hs} new TLS connections, full handshakes, ms each | {float(curl_full)/hs*1000:.2f} | {float(tfu['seconds'])/hs*1000:.2f} | {float(tfu['seconds'])/float(curl_full):.2f} |")
print(f"| {hs} new TLS connections, resumed sessions, ms each | {float(curl_resume)/hs*1000:.2f} | {float(tr['seconds'])/hs*1000:.2f} | {float(tr['seconds'])/float(curl_resume):.2f} |")
print(f"| TinyFire handshakes that resumed | | {tr['resumed']} of {hs} ({tfu['resumed']} with resumption off) | |")
print(f"| keep-alive 1 KiB GETs over one TLS connection, requests/s | {float(curl_ka):.0f} | {float(tf_ka):.0f} | {float(tf_ka)/float(curl_ka):.2f} |")
print()
print(f"{curl_version}; runs per figure: {runs} (median).")
PY
cat bench/results/https.md
