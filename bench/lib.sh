# Sourced by the bench scripts. Needs $work (a scratch directory) and $runs.

# column_medians: rows of numbers on stdin (a line "--" starts another group); prints the
# median of each column, group after group, on one line.
column_medians() {
    python3 -c '
import sys, statistics
out = []
for part in sys.stdin.read().split("--"):
    rows = [list(map(float, l.split())) for l in part.splitlines() if l.strip()]
    out += [str(statistics.median(c)) for c in zip(*rows)]
print(" ".join(out))'
}

# timed CMD...: one run under GNU time; prints "elapsed user sys maxrss_kb".
timed() {
    rm -f "$work/out.bin"
    sync
    /usr/bin/time -f "%e %U %S %M" -o "$work/time.txt" "$@" >/dev/null
    cat "$work/time.txt"
}

# measure CMD...: runs CMD $runs times; prints "elapsed user sys maxrss_kb" medians.
measure() {
    local rows=()
    for _ in $(seq "$runs"); do rows+=("$(timed "$@")"); done
    printf '%s\n' "${rows[@]}" | column_medians
}

# measure_pair "CMD A" "CMD B": runs A and B alternately $runs times each (same background
# load for both, `sync` before each so neither inherits the other's writeback); prints
# "A-medians B-medians" (elapsed user sys maxrss_kb each).
measure_pair() {
    local a=() b=()
    for _ in $(seq "$runs"); do
        a+=("$(timed bash -c "$1")")
        b+=("$(timed bash -c "$2")")
    done
    { printf '%s\n' "${a[@]}"; echo --; printf '%s\n' "${b[@]}"; } | column_medians
}

# free_port: an unused loopback TCP port.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# make_test_ca DIR: a P-256 test CA (DIR/ca.pem) and a certificate for localhost signed by it
# (DIR/server.pem, DIR/server.key), the shape nginx serves in the TLS benches.
make_test_ca() {
    (
        cd "$1"
        local ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
        openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 30 -subj "/CN=bench root" 2>/dev/null
        openssl req "${ec[@]}" -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
        echo "subjectAltName=DNS:localhost" > server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 30 \
            -extfile server.ext 2>/dev/null
    )
}

# start_bench_nginx [EXTRA]: a test CA in $work (make_test_ca), 1 KiB of random bytes at
# $work/www/1k.bin, and one nginx serving $work/www on $http_port (HTTP) and $https_port
# (TLS 1.2, ECDHE-ECDSA-AES128-GCM-SHA256) of 127.0.0.1; EXTRA goes into its http block
# (e.g. "keepalive_requests 1000000;"). Sets http_port and https_port; the caller's EXIT trap
# stops it (kill "$(cat "$work/nginx.pid")").
start_bench_nginx() {
    mkdir -p "$work/www"
    chmod 755 "$work"
    head -c 1024 /dev/urandom > "$work/www/1k.bin"
    chmod -R a+rX "$work/www"
    make_test_ca "$work"
    http_port="$(free_port)"
    https_port="$(free_port)"
    cat > "$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log;
events { worker_connections 64; }
http {
  access_log off; sendfile on; ${1:-}
  default_type application/octet-stream;
  client_body_temp_path $work/body; proxy_temp_path $work/proxy; fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi; scgi_temp_path $work/scgi;
  ssl_protocols TLSv1.2;
  ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256;
  server {
    listen 127.0.0.1:$http_port;
    listen 127.0.0.1:$https_port ssl;
    ssl_certificate $work/server.pem;
    ssl_certificate_key $work/server.key;
    root $work/www;
  }
}
CONF
    "$(command -v nginx || echo /usr/sbin/nginx)" -c "$work/nginx.conf" -e "$work/error.log"
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$http_port/1k.bin" && break; sleep 0.1; done
}
