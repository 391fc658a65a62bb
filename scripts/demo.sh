#!/usr/bin/env bash
# Run fire-agent's main job end to end against a real local server. Until the agent's sync
# exists, that job is a real transfer through `fire-agent request`: this installs what is
# missing, builds fire-agent (release), starts nginx on a free loopback port serving a
# generated 64 MiB "firmware" image, downloads it with -o (atomic rename), checks its SHA-256,
# shows a verbose request, shows what a failure looks like, and stops nginx.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/install-deps.sh

echo "== building fire-agent (release, fully static)"
agent="$(scripts/build-static.sh fire-agent)/fire-agent"
[ -x "$agent" ] || { echo "build failed" >&2; exit 1; }

work="$(mktemp -d /tmp/fire-agent-demo.XXXXXX)"
. scripts/local-nginx.sh
trap 'stop_local_nginx "$work"; rm -rf "$work"' EXIT
mkdir -p "$work/www"
head -c $((64 * 1024 * 1024)) /dev/urandom > "$work/www/firmware.bin"
echo '{"device":"demo","status":"ok"}' > "$work/www/status.json"
start_local_nginx "$work" "location = /latest { return 302 /firmware.bin; }"

echo "== fire-agent request -v http://127.0.0.1:$port/status.json"
"$agent" request -v "http://127.0.0.1:$port/status.json"

echo "== fire-agent request -o firmware.bin http://127.0.0.1:$port/latest   (redirect, 64 MiB, atomic rename)"
start=$(date +%s.%N)
"$agent" request -o "$work/firmware.bin" "http://127.0.0.1:$port/latest"
end=$(date +%s.%N)
want=$(sha256sum < "$work/www/firmware.bin" | cut -d' ' -f1)
got=$(sha256sum < "$work/firmware.bin" | cut -d' ' -f1)
python3 -c "print('   64 MiB in %.3f s' % ($end - $start))"
if [ "$want" = "$got" ]; then echo "   sha256 $got: matches the server's file"; else echo "   sha256 MISMATCH" >&2; exit 1; fi

echo "== a failure: fire-agent request http://127.0.0.1:$port/missing"
set +e
"$agent" request -o "$work/missing.bin" "http://127.0.0.1:$port/missing"
status=$?
set -e
echo "   exit status $status (22 = HTTP error); $( [ -e "$work/missing.bin" ] && echo 'file written!' || echo 'no file written')"
[ "$status" = 22 ] && [ ! -e "$work/missing.bin" ]
echo "== demo passed"
