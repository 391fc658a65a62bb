#!/usr/bin/env bash
# One whole-process 1 KiB GET, as a script on a board runs it: `fire-agent request URL -o
# /dev/null` against `curl -s -o /dev/null URL`, start-up, connect, TLS handshake and exit
# included, over plain HTTP and HTTPS (TLS 1.2, ECDSA P-256) to one local nginx.
#   - x86_64, natively: the Embedded fire-agent, the full-Swift static one
#     (scripts/build-static.sh), curl built on the same mbedTLS (bench/build-curl-mbedtls.sh)
#     and Debian's curl (OpenSSL); wall time per process and peak RSS (GNU time);
#   - armv7 and aarch64 under qemu-user: the Embedded fire-agent beside curl+mbedTLS
#     cross-built for the same architecture (bench/build-curl-mbedtls-cross.sh), both emulated:
#     qemu's time, so only the ratio means anything.
# Rounds interleave the clients; medians. Usage: bench/get1k.sh [ROUNDS] [N]   (default 5 rounds
# of 100 processes per client). Results: bench/results/get1k.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
rounds="${1:-5}"
n="${2:-100}"
. bench/lib.sh
scripts/install-deps.sh
for arch in x86_64 armv7 aarch64; do
    [ -x ".build-embedded/$arch/fire-agent" ] || cross/embedded/build.sh "$arch" >/dev/null
done
full="$(scripts/build-static.sh fire-agent)/fire-agent"
curl_mbedtls="$(bench/build-curl-mbedtls.sh)"
declare -A cross_curl
for arch in armv7 aarch64; do
    cross_curl[$arch]="$(bench/build-curl-mbedtls-cross.sh "$arch")"
done
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-get1k.XXXXXX)"
trap '[ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null; rm -rf "$work"' EXIT
start_bench_nginx
strip -o "$work/full" "$full"

python3 - "$work" "$rounds" "$n" "$http_port" "$https_port" "$curl_mbedtls" "$full" "${cross_curl[armv7]}" "${cross_curl[aarch64]}" \
    "$("$curl_mbedtls" --version | head -1 | cut -d' ' -f1-2)" <<'PY' | tee bench/results/get1k.md
import statistics, subprocess, sys, time
work, rounds, n, http_port, https_port, curl_mbedtls, full, curl_armv7, curl_aarch64, curl_version = sys.argv[1:11]
rounds, n = int(rounds), int(n)
urls = {"HTTP": f"http://127.0.0.1:{http_port}/1k.bin", "HTTPS": f"https://localhost:{https_port}/1k.bin"}
ca = work + "/ca.pem"
expected = open(work + "/www/1k.bin", "rb").read()

def command(client, url):
    tls = ["--cacert", ca] if url.startswith("https") else []
    if client[0] == "fire-agent":
        return client[1] + ["request"] + tls + [url]
    return client[1] + ["-s"] + tls + [url]

def run(clients, label):
    print(f"### {label}\n")
    print(f"Whole processes, {n} per client a round, {rounds} interleaved rounds, medians per process.\n")
    print("| client | HTTP | HTTPS | peak RSS (HTTPS) |\n|---|---:|---:|---:|")
    results = {name: {"HTTP": [], "HTTPS": [], "rss": []} for name in clients}
    for name, client in clients.items():  # each client answers right before timing starts
        for url in urls.values():
            out = subprocess.run(command(client, url), capture_output=True)
            assert out.returncode == 0 and out.stdout == expected, (name, url, out.returncode, out.stderr[:300])
    for _ in range(rounds):
        for name, client in clients.items():
            for scheme, url in urls.items():
                argv = command(client, url)
                start = time.perf_counter()
                for _ in range(n):
                    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
                results[name][scheme].append((time.perf_counter() - start) / n * 1000)
            timed = subprocess.run(["/usr/bin/time", "-f", "%M"] + command(client, urls["HTTPS"]), capture_output=True, text=False)
            results[name]["rss"].append(int(timed.stderr.decode().strip().splitlines()[-1]))
    medians = {name: {k: statistics.median(v) for k, v in r.items()} for name, r in results.items()}
    for name, m in medians.items():
        print(f"| {name} | {m['HTTP']:.2f} ms | {m['HTTPS']:.2f} ms | {m['rss'] / 1024:.1f} MiB |")
    return medians

print("## One 1 KiB GET, a whole process each (bench/get1k.sh)\n")
x86 = run({
    "fire-agent, Embedded": ("fire-agent", [".build-embedded/x86_64/fire-agent"]),
    "fire-agent, full Swift (static)": ("fire-agent", [full]),
    f"{curl_version} + mbedTLS": ("curl", [curl_mbedtls]),
    "curl (Debian, OpenSSL)": ("curl", ["curl"]),
}, "x86_64, native")
base = x86[f"{curl_version} + mbedTLS"]
print("\nRatio to curl + mbedTLS (time per process; below 1: faster):\n")
print("| client | HTTP | HTTPS |\n|---|---:|---:|")
for name, m in x86.items():
    print(f"| {name} | {m['HTTP'] / base['HTTP']:.2f} | {m['HTTPS'] / base['HTTPS']:.2f} |")
for arch, emulator, curl in (("armv7", "qemu-arm-static", curl_armv7), ("aarch64", "qemu-aarch64-static", curl_aarch64)):
    print()
    emulated = run({
        "fire-agent, Embedded": ("fire-agent", [emulator, f".build-embedded/{arch}/fire-agent"]),
        f"{curl_version} + mbedTLS": ("curl", [emulator, curl]),
    }, f"{arch} under {emulator} (emulated: the ratio, not the times, says something)")
    f, c = emulated["fire-agent, Embedded"], emulated[f"{curl_version} + mbedTLS"]
    print(f"\nRatio fire-agent / curl + mbedTLS on {arch}: HTTP {f['HTTP'] / c['HTTP']:.2f}, HTTPS {f['HTTPS'] / c['HTTPS']:.2f}")
PY
