#!/usr/bin/env bash
# Before and after, as whole processes in one run: `fire-agent request` built from an older
# revision, from the working tree, and curl, fetching the same 1 GiB from one local nginx,
# interleaved round by round so the three share the machine's background load (back-to-back
# runs of bench/run.sh moved by up to 20 % here; interleaving leaves the ratios).
#   bench/ab.sh OLD [ROUNDS]      OLD: a revision (built in a scratch worktree) or a fire-agent
#                                 binary; ROUNDS default 7; medians.
# Cases: plain HTTP to /dev/null and to a file (vs Debian's curl), HTTPS to /dev/null (vs curl
# on the same mbedTLS). Results: bench/results/ab.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
old="${1:?usage: bench/ab.sh OLD-REVISION-OR-BINARY [ROUNDS]}"
rounds="${2:-7}"
scripts/install-deps.sh >&2
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-ab.XXXXXX)"
runs="$rounds"
. bench/lib.sh
trap '{ [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true; }; { git worktree remove --force "$work/old-tree" 2>/dev/null || true; }; rm -rf "$work"' EXIT

new_bin="$(scripts/build-static.sh fire-agent)/fire-agent"
cp "$new_bin" "$work/fire-agent-new"
if [ -f "$old" ]; then
    cp "$old" "$work/fire-agent-old"
    old_label="$old"
else
    old_label="$(git rev-parse --short "$old")"
    git worktree add --detach "$work/old-tree" "$old" >&2
    old_dir="$(cd "$work/old-tree" && scripts/build-static.sh fire-agent)"
    cp "$old_dir/fire-agent" "$work/fire-agent-old"
fi
curl_mbedtls="$(bench/build-curl-mbedtls.sh)"

mkdir -p "$work/www"
head -c $((1024 * 1024 * 1024)) /dev/urandom > "$work/www/1g.bin"
make_test_ca "$work"
https_port="$(free_port)"
. scripts/local-nginx.sh
start_local_nginx "$work" \
    "listen 127.0.0.1:$https_port ssl; ssl_certificate $work/server.pem; ssl_certificate_key $work/server.key;" \
    "ssl_protocols TLSv1.2; ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256;"
http_url="$base/1g.bin"
https_url="https://localhost:$https_port/1g.bin"
cat "$work/www/1g.bin" > /dev/null

# One row per run: case client elapsed user sys maxrss_kb.
: > "$work/rows.txt"
row() {
    local case="$1" client="$2"
    shift 2
    echo "$case $client $(timed "$@")" >> "$work/rows.txt"
}
for round in $(seq "$rounds"); do
    # The order of the three rotates, so none always runs after the same one.
    clients=(old new curl)
    clients=("${clients[@]:$((round % 3))}" "${clients[@]:0:$((round % 3))}")
    for client in "${clients[@]}"; do
        case "$client" in
            curl)
                row discard curl curl -s -o /dev/null "$http_url"
                row file curl curl -s -o "$work/out.bin" "$http_url"
                row https curl "$curl_mbedtls" -s --cacert "$work/ca.pem" -o /dev/null "$https_url"
                ;;
            *)
                agent="$work/fire-agent-$client"
                row discard "$client" "$agent" request -o /dev/null "$http_url"
                row file "$client" "$agent" request -o "$work/out.bin" "$http_url"
                row https "$client" "$agent" request --cacert "$work/ca.pem" -o /dev/null "$https_url"
                ;;
        esac
    done
done

mkdir -p bench/results
python3 - "$work/rows.txt" "$old_label" "$(git rev-parse --short HEAD)" "$rounds" > bench/results/ab.md <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    case, client, elapsed, user, system, rss = line.split()
    rows[case, client].append((float(elapsed), float(user) + float(system), int(rss)))
med = lambda case, client, i: statistics.median(r[i] for r in rows[case, client])
names = {"discard": "1 GiB HTTP to /dev/null (vs curl)", "file": "1 GiB HTTP to a file (vs curl)",
         "https": "1 GiB HTTPS to /dev/null (vs curl + mbedTLS)"}
print(f"| case | old {sys.argv[2]}: s, CPU s | new {sys.argv[3]}+: s, CPU s | curl: s, CPU s "
      "| ratio to curl old → new | new / old (time) |")
print("|---|---:|---:|---:|---:|---:|")
for case in ("discard", "file", "https"):
    o, n, c = (med(case, k, 0) for k in ("old", "new", "curl"))
    oc, nc, cc = (med(case, k, 1) for k in ("old", "new", "curl"))
    print(f"| {names[case]} | {o:.2f}, {oc:.2f} | {n:.2f}, {nc:.2f} | {c:.2f}, {cc:.2f} "
          f"| {c / o:.2f} → {c / n:.2f} | {n / o:.3f} |")
print()
print(f"Medians of {sys.argv[4]} interleaved rounds (whole processes, GNU time); ratio to curl = curl's time over "
      "fire-agent's (above 1: fire-agent faster).")
PY
cat bench/results/ab.md
