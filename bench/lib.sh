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
