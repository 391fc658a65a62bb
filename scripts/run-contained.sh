#!/usr/bin/env bash
# Runs a command in a session of its own and, when it ends (passed, failed or crashed), stops
# every process still left in that session: servers a test started and could not stop, a
# child that outlived a crashed test runner. Prints what it had to stop. Exit: the command's.
#   scripts/run-contained.sh swift test --skip-build
set -uo pipefail
sid_file="$(mktemp)"
trap 'rm -f "$sid_file"' EXIT
# setsid runs the shell as a session leader, so its pid is the session id.
setsid --wait bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$sid_file" "$@"
status=$?
sid="$(cat "$sid_file")"
if [ -n "$sid" ] && pgrep -s "$sid" >/dev/null 2>&1; then
    echo "run-contained: stopping what the run left behind:" >&2
    ps -o pid=,args= -s "$sid" | cut -c1-160 >&2 || true
    pkill -TERM -s "$sid" || true
    for _ in $(seq 1 30); do pgrep -s "$sid" >/dev/null 2>&1 || break; sleep 0.1; done
    pkill -KILL -s "$sid" 2>/dev/null || true
fi
exit "$status"
