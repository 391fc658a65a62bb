#!/usr/bin/env bash
# Runs an aarch64 fire-agent under qemu-aarch64 against a local nginx (HTTP and HTTPS with a
# test CA) and checks what it prints and how it exits. Usage:
#   cross/smoke.sh [BINARY]    (default cross/out/fire-agent-aarch64-static)
# A dynamic binary runs with the SDK's sysroot as its root for libraries (-L). Exit 0 when every
# check passed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
cross_init "${TINYFIRE_CROSS_CACHE:-}"
binary="$(realpath "${1:-$here/out/fire-agent-aarch64-static}")"
[ -x "$binary" ] || die "no binary at $binary (run cross/build.sh first)"
command -v qemu-aarch64-static >/dev/null || die "qemu-aarch64-static is missing (cross/prepare.sh installs it)"
"$project/scripts/install-deps.sh" >/dev/null

qemu=(qemu-aarch64-static)
if file "$binary" | grep -q "dynamically linked"; then
    [ -d "$sysroot" ] || die "a dynamic binary needs the SDK sysroot ($sysroot)"
    qemu+=(-L "$sysroot")
fi
agent() { "${qemu[@]}" "$binary" "$@"; }

work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-cross-smoke.XXXXXX)"
. "$project/scripts/local-nginx.sh"
trap 'stop_local_nginx "$work"; rm -rf "$work"' EXIT

# A CA and a server certificate for localhost and 127.0.0.1; the pin is the server key's SPKI.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/ca.key" -out "$work/ca.pem" \
    -days 2 -subj "/CN=TinyFire cross smoke CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/server.key" -out "$work/server.csr" \
    -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$work/san.ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
    -extfile "$work/san.ext" -out "$work/server.pem" 2>/dev/null
pin="sha256//$(openssl pkey -in "$work/server.key" -pubout -outform DER | openssl dgst -sha256 -binary | base64)"
# A key on no certificate of the path. (The CA's key is on the verified path — leaf to trust
# anchor — so pinning it passes: see docs/SECURITY.md.)
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/other.key" 2>/dev/null
other_pin="sha256//$(openssl pkey -in "$work/other.key" -pubout -outform DER | openssl dgst -sha256 -binary | base64)"
ca_pin="sha256//$(openssl pkey -in "$work/ca.key" -pubout -outform DER | openssl dgst -sha256 -binary | base64)"
tls_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"

mkdir -p "$work/www"
printf 'hello from nginx\n' > "$work/www/hello.txt"
head -c $((1024 * 1024)) /dev/urandom > "$work/www/1m.bin"
start_local_nginx "$work" "listen 127.0.0.1:$tls_port ssl; ssl_certificate $work/server.pem; ssl_certificate_key $work/server.key;
  location /ingest/ { return 204; }
  location = /write { return 204; }"
https="https://127.0.0.1:$tls_port"

failures=0
check() { # NAME EXPECTED_STATUS COMMAND...: runs, compares the exit status, keeps stdout in $out
    local name="$1" expected="$2" status=0
    shift 2
    out="$("$@" 2> "$work/stderr")" || status=$?
    if [ "$status" = "$expected" ]; then
        echo "PASS $name"
    else
        echo "FAIL $name: exit $status, expected $expected; stderr: $(head -c 400 "$work/stderr")"
        failures=$((failures + 1))
    fi
}
expect() { # NAME CONDITION-RESULT
    if [ "$2" = 0 ]; then echo "PASS $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

echo "binary: $(file -b "$binary" | cut -d, -f1-2), $(stat -c %s "$binary") bytes; qemu: $(qemu-aarch64-static --version | head -1)"
check "--version" 0 agent --version
[[ "$out" =~ ^fire-agent\ [0-9]+\.[0-9]+\.[0-9]+\ \(TinyFire ]]; expect "--version prints 'fire-agent X.Y.Z (TinyFire …)': $out" $?
# Release binaries carry no test hooks (FireAgent's CrashPoints exist in debug builds only).
! grep -q FIRE_AGENT_FIRMWARE_EXIT_AT "$binary"; expect "the release binary has no test crash points" $?
# Installed as OPERATIONS.md says (mode 0600: the full sample holds a password).
for sample in fire-agent.minimal.json5 fire-agent.json5; do
    install -m 0600 "$project/etc/$sample" "$work/$sample"
    check "config check etc/$sample" 0 agent config check "$work/$sample"
done
chmod 0644 "$work/fire-agent.json5"
check "config check refuses a password in a file others can read (exit 78)" 78 agent config check "$work/fire-agent.json5"
printf '{ sever: {}, server: { url: "ftp://x" } }' > "$work/bad.json5"
check "config check refuses a bad file (exit 78)" 78 agent config check "$work/bad.json5"
grep -q 'sever: unknown key; did you mean "server"?' "$work/stderr"; expect "the refusal names the key path" $?
# One telemetry cycle over HTTPS with the CA and a pin, nginx standing in for InfluxDB's /write.
mkdir -p "$work/spool"
printf 'probe,board=qemu n=1i\n' > "$work/spool/.p.lp" && mv "$work/spool/.p.lp" "$work/spool/p.lp"
cat > "$work/agent.json5" <<EOF
{ device: { id: "qemu-aarch64" },
  server: { url: "$https", caFile: "$work/ca.pem", pins: ["$pin"] },
  telemetry: { influx: { database: "fleet" }, spoolDirectory: "$work/spool" },
  queue: { directory: "$work/agent-queue" } }
EOF
check "sync --once (collect, spool, gzip, queue, deliver over HTTPS)" 0 agent sync --once --config "$work/agent.json5"
[[ "$out" == *"spooled 1 lines"*"remaining 0"* ]]; expect "sync --once delivered everything: $out" $?
[ ! -e "$work/spool/p.lp" ]; expect "the spool file is removed once queued" $?
check "HTTP GET" 0 agent request "$base/hello.txt"
[ "$out" = "hello from nginx" ]; expect "HTTP GET body" $?
check "HTTPS GET with --cacert and --pin" 0 agent request --cacert "$work/ca.pem" --pin "$pin" "$https/hello.txt"
[ "$out" = "hello from nginx" ]; expect "HTTPS GET body" $?
check "HTTPS 1 MiB download to a file" 0 agent request --cacert "$work/ca.pem" --pin "$pin" -o "$work/1m.out" "$https/1m.bin"
cmp -s "$work/1m.out" "$work/www/1m.bin"; expect "HTTPS 1 MiB identical" $?
check "HTTPS with a pin that does not match: exit 60" 60 agent request --cacert "$work/ca.pem" --pin "$other_pin" "$https/hello.txt"
check "HTTPS with the trust anchor's key pinned" 0 agent request --cacert "$work/ca.pem" --pin "$ca_pin" "$https/hello.txt"
check "HTTPS without the test CA: exit 60" 60 agent request "$https/hello.txt"
grep -qE '^127\.0\.0\.1[[:space:]].*\blocalhost\b' /etc/hosts; expect "/etc/hosts names localhost" $?
check "a name from /etc/hosts (localhost) through the binary's own resolver" 0 agent request "http://localhost:$port/hello.txt"
[ "$out" = "hello from nginx" ]; expect "localhost body" $?
check "reachability over rtnetlink" 0 agent reachability
[[ "$out" == reachable* ]]; expect "reachability prints 'reachable …': $out" $?
check "queue add (durable enqueue)" 0 agent queue add --dir "$work/queue" -d 'temp=21.5' "$base/ingest/smoke"
check "queue flush to nginx" 0 agent queue flush --dir "$work/queue"
[ "$out" = "delivered 1 discarded 0 remaining 0" ]; expect "queue flush delivered the record: $out" $?

if [ "$failures" -gt 0 ]; then
    echo "cross smoke test: $failures check(s) failed"
    exit 1
fi
echo "cross smoke test: all checks passed"
