#!/usr/bin/env bash
# Runs a command in a session of its own and, when it ends (passed, failed or crashed), stops
# every process still left in that session: servers a test started and could not stop, a
# child that outlived a crashed test runner. Prints what it had to stop. Exit: the command's.
# The command gets a TMPDIR of its own, created empty for the run and removed after it, so no test
# can pass or fail on what an earlier run left in /tmp (TINYFIRE_KEEP_TMPDIR=1 keeps it to look at).
#   scripts/run-contained.sh swift test --skip-build
set -uo pipefail
run_tmp="$(mktemp -d "${TMPDIR:-/tmp}/tinyfire-run.XXXXXX")" || exit 1
# Open like /tmp itself: servers the tests start drop privileges (nginx's workers run as nobody)
# and must reach the files a test puts there.
chmod 1777 "$run_tmp"
# And the directories above it that this user owns get search permission (o+x) when they lack
# it (a TMPDIR made by `mktemp -d` is 0700): else nginx's first answer depends on whether a test
# that opens them (the proxy fixture) happened to run before it.
parent="$(dirname "$run_tmp")"
while [ "$parent" != / ] && [ -n "$parent" ]; do
    if [ -O "$parent" ] && [ -z "$(find "$parent" -maxdepth 0 -perm -o+x)" ]; then
        chmod o+x "$parent"
    fi
    parent="$(dirname "$parent")"
done
sid_file="$(mktemp)" || exit 1
cleanup() {
    rm -f "$sid_file"
    # A test that mounted something (a tmpfs to fill) and died before unmounting it.
    findmnt -rn -o TARGET 2>/dev/null | grep -F "$run_tmp/" | sort -r | while read -r target; do
        umount -l "$target" 2>/dev/null || true
    done
    if [ "${TINYFIRE_KEEP_TMPDIR:-0}" = 1 ]; then
        echo "run-contained: kept the run's TMPDIR $run_tmp" >&2
    else
        rm -rf "$run_tmp"
    fi
}
trap cleanup EXIT
export TMPDIR="$run_tmp"
echo "run-contained: TMPDIR=$TMPDIR (empty, removed after the run)" >&2
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
