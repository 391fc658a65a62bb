#!/usr/bin/env bash
# Uploads: TinyFire (fire-agent request -T, -F) vs curl (-T, -F) to the same local sink server
# (Python, answers 100-continue, reads and discards the body; nginx's `return` would answer
# before reading, so neither client would send the body). Peak RSS for 1 MiB and 1 GiB files
# and multipart bodies (flatness) and MB/s. A third row streams standard input (length unknown,
# chunked): `tinyfire-bench stream-upload` (`upload(_ stream:)` over FileDescriptorByteStream)
# against `curl -T -`. Usage:
#   bench/upload.sh [RUNS]     (default 3; medians). Results: bench/results/upload.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
runs="${1:-3}"
scripts/install-deps.sh
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-upload.XXXXXX)"
bin="$(scripts/build-static.sh fire-agent tinyfire-bench)"
agent="$bin/fire-agent"
mkdir -p "$work/files"
head -c $((1024 * 1024 * 1024)) /dev/urandom > "$work/files/1g.bin"
head -c $((1024 * 1024)) /dev/urandom > "$work/files/1m.bin"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat > "$work/sink.py" <<'PY'
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.do_PUT()
    def do_PUT(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                remaining = size + 2
                while remaining > 0:
                    chunk = self.rfile.read(min(remaining, 1 << 20))
                    if not chunk:
                        break
                    remaining -= len(chunk)
                if size == 0:
                    break
        else:
            remaining = int(self.headers.get("Content-Length", "0"))
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                remaining -= len(chunk)
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
PY
python3 "$work/sink.py" "$port" & sink=$!
trap 'kill $sink 2>/dev/null; rm -rf "$work"' EXIT
base="http://127.0.0.1:$port"
for _ in $(seq 50); do curl -s -T "$work/files/1m.bin" -o /dev/null "$base/sink" && break; sleep 0.1; done
cat "$work/files/1g.bin" > /dev/null

. bench/lib.sh

declare -A rows
for size in 1m 1g; do
    read -r te _ _ tm ce _ _ cm < <(measure_pair "$agent request -T $work/files/$size.bin $base/sink" "curl -s -T $work/files/$size.bin $base/sink")
    rows[tf_$size]="$te $tm"
    rows[cu_$size]="$ce $cm"
    read -r te _ _ tm ce _ _ cm < <(measure_pair \
        "$agent request -F note=hello -F capture=@$work/files/$size.bin $base/sink" \
        "curl -s -F note=hello -F capture=@$work/files/$size.bin $base/sink")
    rows[tf_mp_$size]="$te $tm"
    rows[cu_mp_$size]="$ce $cm"
    read -r te _ _ tm ce _ _ cm < <(measure_pair \
        "cat $work/files/$size.bin | $bin/tinyfire-bench stream-upload $base/sink" \
        "cat $work/files/$size.bin | curl -s -T - $base/sink")
    rows[tf_st_$size]="$te $tm"
    rows[cu_st_$size]="$ce $cm"
done
mkdir -p bench/results
python3 - "${rows[tf_1m]}" "${rows[tf_1g]}" "${rows[cu_1m]}" "${rows[cu_1g]}" \
    "${rows[tf_mp_1m]}" "${rows[tf_mp_1g]}" "${rows[cu_mp_1m]}" "${rows[cu_mp_1g]}" \
    "${rows[tf_st_1m]}" "${rows[tf_st_1g]}" "${rows[cu_st_1m]}" "${rows[cu_st_1g]}" \
    "$(curl --version | head -1)" "$runs" > bench/results/upload.md <<'PY'
import sys
*figures, version, runs = sys.argv[1:]
def parse(t): e, m = map(float, t.split()); return e, m
gib = 1073741824
print("| upload to a local sink | curl | TinyFire | ratio (TinyFire/curl) |")
print("|---|---:|---:|---:|")
rows = (
    ("file (`-T`)", figures[0:4]),
    ("multipart (`-F`, a file part and a field)", figures[4:8]),
    ("a pipe, chunked (`upload(_ stream:)` / `curl -T -`)", figures[8:12]),
)
for label, (tf1m, tf1g, cu1m, cu1g) in rows:
    (te1, tm1), (te, tm) = parse(tf1m), parse(tf1g)
    (ce1, cm1), (ce, cm) = parse(cu1m), parse(cu1g)
    print(f"| {label}: 1 GiB, MB/s | {gib/ce/1e6:.0f} | {gib/te/1e6:.0f} | {ce/te:.2f} |")
    print(f"| {label}: peak RSS, 1 MiB (MiB) | {cm1/1024:.1f} | {tm1/1024:.1f} | {tm1/cm1:.2f} |")
    print(f"| {label}: peak RSS, 1 GiB (MiB) | {cm/1024:.1f} | {tm/1024:.1f} | {tm/cm:.2f} |")
    print(f"| {label}: peak RSS 1 GiB minus 1 MiB (KiB) | {cm-cm1:.0f} | {tm-tm1:.0f} | |")
print()
print(f"{version}; runs per figure: {runs} (median).")
PY
cat bench/results/upload.md
