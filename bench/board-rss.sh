#!/usr/bin/env bash
# The idle daemon's memory on an emulated board, where qemu-user cannot measure it (its RSS is
# qemu's): qemu-system boots Debian bookworm's own kernel (armv7: armmp-lpae on `virt`, a
# Cortex-A15; aarch64: arm64 on `virt`, a Cortex-A53) with an initramfs holding only busybox and
# one fire-agent: the Embedded one, and on aarch64 also the full-Swift static one when
# cross/build.sh static made it (cross/out). `/init` brings up loopback, starts `fire-agent run` (every collector
# on, collect every 10 s, sync every 60 s to a server that refuses, a firmware section polling
# every 5 s), waits 15 s, prints VmRSS, RssAnon, RssFile, RssShmem and Threads from /proc/PID/status
# (kB, the kernel's own figures), and powers off.
# Then, with the Embedded build, the board times a whole-process 1 KiB GET: fire-agent against
# curl + mbedTLS cross-built on the same sysroot (bench/build-curl-mbedtls-cross.sh), over HTTP
# from busybox httpd and over HTTPS from bench/tls-server.c (mbedTLS, TLS 1.2, the suite
# bench/get1k.sh pins), both on the board's loopback.
#   bench/board-rss.sh [armv7|aarch64 ...]   (default both). Results: bench/results/board-rss.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(armv7 aarch64)
command -v qemu-system-arm >/dev/null || apt-get install -y -qq qemu-system-arm >&2
command -v cpio >/dev/null || apt-get install -y -qq cpio >&2
cache="${TINYFIRE_CACHE:-$HOME/.cache/tinyfire}/board-rss"
mkdir -p "$cache"
work="$(mktemp -d "${TMPDIR:-/tmp}"/tinyfire-board-rss.XXXXXX)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
apt_conf="$(dirname "$(cross/embedded/sysroot.sh armv7)")/apt-bookworm/apt.conf"
apt_private() { APT_CONFIG="$apt_conf" "$@"; }

# Debian's kernel and busybox for ARCH, unpacked once into $cache/ARCH.
fetch() {
    local arch="$1" deb_arch meta
    case "$arch" in
        armv7) deb_arch=armhf; meta=linux-image-armmp-lpae ;;
        aarch64) deb_arch=arm64; meta=linux-image-arm64 ;;
    esac
    local dir="$cache/$arch"
    [ -f "$dir/vmlinuz" ] && [ -x "$dir/busybox" ] && return 0
    mkdir -p "$dir/debs" "$dir/root"
    local image
    image="$(apt_private apt-cache depends "$meta:$deb_arch" | sed -n 's/.*Depends: \(linux-image-[0-9][^:]*\).*/\1/p' | head -1)"
    (cd "$dir/debs" && apt_private apt-get download -qq "$image:$deb_arch" "busybox-static:$deb_arch" >&2)
    for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
    cp "$dir"/root/boot/vmlinuz-* "$dir/vmlinuz"
    cp "$dir/root/bin/busybox" "$dir/busybox"
}

# bench/tls-server.c for ARCH, static, against the sysroot's mbedTLS (the clients' own). Prints its path.
tls_server() {
    local arch="$1" target sysroot out="$cache/$1/tls-server"
    case "$arch" in
        armv7) target=(--target=armv7-unknown-linux-gnueabihf -mfloat-abi=hard -mfpu=vfpv3-d16) ;;
        aarch64) target=(--target=aarch64-unknown-linux-gnu) ;;
    esac
    if [ ! -x "$out" ] || [ bench/tls-server.c -nt "$out" ]; then
        sysroot="$(cross/embedded/sysroot.sh "$arch")"
        clang "${target[@]}" --sysroot="$sysroot" -fuse-ld=lld -static -O2 bench/tls-server.c -o "$out" \
            -lmbedtls -lmbedx509 -lmbedcrypto >&2
    fi
    echo "$out"
}

# The initramfs: busybox, fire-agent, a config, a vendor key, and /init; with CURL, the GET
# bench's pieces too (curl, the TLS server, a CA and a certificate for localhost).
initramfs() {
    local arch="$1" binary="$2" curl="${3:-}" root="$work/$arch-root"
    rm -rf "$root"
    mkdir -p "$root"/{bin,proc,sys,dev,tmp,etc,agent/spool,tls}
    cp "$cache/$arch/busybox" "$root/bin/busybox"
    cp "$binary" "$root/bin/fire-agent"
    if [ -n "$curl" ]; then
        cp "$curl" "$root/bin/curl"
        cp "$(tls_server "$arch")" "$root/bin/tls-server"
        # bench/lib.sh's CA and certificate for localhost (in a subshell: its helpers stay there).
        (. bench/lib.sh && make_test_ca "$root/tls" && cd "$root/tls" && rm -f ca.key ca.srl server.csr server.ext)
        # A name, not an address: mbedTLS 2.28 (curl's) matches no IP address in a certificate.
        echo "127.0.0.1 localhost" > "$root/etc/hosts"
        echo "hosts: files" > "$root/etc/nsswitch.conf"
    fi
    openssl ecparam -genkey -name prime256v1 2>/dev/null | openssl ec -pubout -out "$root/agent/vendor.pub" 2>/dev/null
    echo 1.0.0 > "$root/agent/version"
    cat > "$root/agent/agent.json5" <<'CONF'
{ device: { id: "board" }, server: { url: "http://127.0.0.1:9" },
  telemetry: { interval: "10s", syncInterval: "60s", influx: { database: "bench" }, spoolDirectory: "spool" },
  queue: { directory: "queue" }, daemon: { statusFile: "status.json" },
  firmware: { manifestURL: "http://127.0.0.1:9/manifest.json", keys: ["/agent/vendor.pub"], deviceType: "bench",
              versionFile: "/agent/version", directory: "firmware", pollInterval: "5s", install: ["/bin/busybox", "true", "{file}"],
              statusURL: "http://127.0.0.1:9/status" } }
CONF
    chmod 600 "$root/agent/agent.json5"
    cat > "$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox ip link set lo up
echo "board: $(/bin/busybox uname -m), $(/bin/busybox grep MemTotal /proc/meminfo | /bin/busybox tr -s ' ')"
cd /agent
/bin/fire-agent run --config /agent/agent.json5 > /agent/out.log 2>&1 &
pid=$!
/bin/busybox sleep 15
echo "fire-agent: $(/bin/busybox grep -E '^(VmRSS|RssAnon|RssFile|RssShmem|Threads):' /proc/$pid/status | /bin/busybox tr -s ' \t\n' ' ')"
/bin/busybox head -c 600 /agent/out.log
echo
kill $pid
wait $pid
# One 1 KiB GET per process, fire-agent and curl+mbedTLS in turn, 5 rounds of 50 each over
# HTTP (busybox httpd) and of 20 each over HTTPS (tls-server), both on loopback; /proc/uptime
# (10 ms) brackets each round.
if [ -x /bin/curl ]; then
    /bin/busybox mkdir -p /www
    /bin/busybox head -c 1024 /dev/urandom > /www/1k.bin
    /bin/busybox httpd -p 127.0.0.1:8080 -h /www
    /bin/tls-server 8443 /tls/server.pem /tls/server.key /www/1k.bin &
    /bin/busybox sleep 1
    ca=/tls/ca.pem
    ok=yes
    for url in http://127.0.0.1:8080/1k.bin https://localhost:8443/1k.bin; do
        /bin/busybox rm -f /tmp/fa.bin /tmp/curl.bin
        /bin/fire-agent request --cacert $ca -o /tmp/fa.bin $url || { echo "get1k: fire-agent failed: $url"; ok=no; }
        /bin/curl -sS --cacert $ca -o /tmp/curl.bin $url || { echo "get1k: curl failed: $url"; ok=no; }
        /bin/busybox cmp /tmp/fa.bin /www/1k.bin && /bin/busybox cmp /tmp/curl.bin /www/1k.bin || ok=no
    done
    [ $ok = yes ] && echo "get1k: bodies ok"
    for round in 1 2 3 4 5; do
        for scheme in http https; do
            if [ $scheme = http ]; then url=http://127.0.0.1:8080/1k.bin; count=50; else url=https://localhost:8443/1k.bin; count=20; fi
            for client in fire-agent curl; do
                start=$(/bin/busybox cut -d' ' -f1 /proc/uptime)
                i=0
                while [ $i -lt $count ]; do
                    if [ $client = curl ]; then /bin/curl -s --cacert $ca -o /dev/null $url; else /bin/fire-agent request --cacert $ca -o /dev/null $url; fi
                    i=$((i + 1))
                done
                echo "get1k: $client $scheme $count $round $start $(/bin/busybox cut -d' ' -f1 /proc/uptime)"
            done
        done
    done
fi
/bin/busybox poweroff -f
INIT
    chmod 755 "$root/init"
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/$arch.cpio.gz"
}

boot() {
    local arch="$1"
    case "$arch" in
        armv7) timeout 900 qemu-system-arm -M virt -cpu cortex-a15 -m 256 -nographic -no-reboot -kernel "$cache/$arch/vmlinuz" \
            -initrd "$work/$arch.cpio.gz" -append "console=ttyAMA0 quiet panic=-1" ;;
        aarch64) timeout 900 qemu-system-aarch64 -M virt -cpu cortex-a53 -m 256 -nographic -no-reboot -kernel "$cache/$arch/vmlinuz" \
            -initrd "$work/$arch.cpio.gz" -append "console=ttyAMA0 quiet panic=-1" ;;
    esac
}

{
    echo "## The idle daemon on an emulated board (bench/board-rss.sh)"
    echo
    echo "qemu-system, Debian bookworm's kernel, an initramfs with busybox and one fire-agent alone;"
    echo "\`fire-agent run\` 15 s in (every collector on, a firmware section polling every 5 s), kB from /proc/PID/status."
    echo "The initramfs is a RAM file system, so the binary's mapped pages count as RssShmem there; on a board's"
    echo "flash they are RssFile (clean, dropped under pressure). RssAnon is the daemon's own memory."
    echo
    echo "| board | fire-agent | static, stripped, bytes | VmRSS | RssAnon | RssFile + RssShmem (the binary's pages) | threads |"
    echo "|---|---|---:|---:|---:|---:|---:|"
} > "$work/report.md"
# measure ARCH BINARY LABEL: boots ARCH with BINARY as /bin/fire-agent, adds a row.
measure() {
    local arch="$1" binary="$2" label="$3" curl="${4:-}"
    initramfs "$arch" "$binary" "$curl"
    boot "$arch" < /dev/null > "$work/$arch.console" 2>&1 || true
    line="$(grep -a '^fire-agent: VmRSS' "$work/$arch.console" | tr -d '\r' || true)"
    board="$(grep -a '^board: ' "$work/$arch.console" | tr -d '\r' || true)"
    if [ -z "$line" ]; then
        echo "$arch ($label): no figures; the console said:" >&2
        tail -30 "$work/$arch.console" >&2
        exit 1
    fi
    read -r _ _ rss _ _ anon _ _ file _ _ shmem _ _ threads _ <<< "$line"
    echo "| $arch (${board#board: }) | $label | $(stat -c %s "$binary") | $rss | $anon | $file + $shmem | $threads |" >> "$work/report.md"
    if [ -n "$curl" ]; then
        grep -aq '^get1k: bodies ok' "$work/$arch.console" || { echo "$arch: the GET bench did not run:" >&2; tail -20 "$work/$arch.console" >&2; exit 1; }
        grep -a '^get1k: ' "$work/$arch.console" | tr -d '\r' | grep -v 'bodies ok' | python3 -c '
import sys, statistics
per = {}
for line in sys.stdin:
    _, client, scheme, count, _, start, end = line.split()
    per.setdefault((scheme, client), []).append((float(end) - float(start)) * 1000 / int(count))
for scheme in ("http", "https"):
    fa, curl = statistics.median(per[(scheme, "fire-agent")]), statistics.median(per[(scheme, "curl")])
    print(f"| {sys.argv[1]} | {sys.argv[2]} | {scheme.upper()} | {fa:.1f} ms | {curl:.1f} ms | {fa / curl:.2f} |")' "$arch" "$label" >> "$work/get1k.md"
    fi
    echo "$arch ($label): the agent's first output:" >&2
    sed -n '/^fire-agent: VmRSS/,/reboot: Power down/p' "$work/$arch.console" | sed '1d;$d' | head -12 >&2
}

for arch in "${arches[@]}"; do
    [ -x ".build-embedded/$arch/fire-agent" ] || cross/embedded/build.sh "$arch" >/dev/null
    fetch "$arch"
    measure "$arch" ".build-embedded/$arch/fire-agent" "Embedded" "$(bench/build-curl-mbedtls-cross.sh "$arch")"
    # The full-Swift static aarch64 build (cross/build.sh static), when it was made.
    full="cross/out/fire-agent-aarch64-static.stripped"
    if [ "$arch" = aarch64 ] && [ -f "$full" ]; then
        measure aarch64 "$full" "full Swift (cross/build.sh static)" "$(bench/build-curl-mbedtls-cross.sh aarch64)"
    fi
done
{
    echo
    echo "## One 1 KiB GET, a whole process each, on the same emulated board (bench/board-rss.sh)"
    echo
    echo "After the daemon's figures, on the board's loopback: HTTP from busybox httpd, HTTPS from bench/tls-server.c"
    echo "(mbedTLS 2.28, TLS 1.2, ECDHE-ECDSA-AES128-GCM-SHA256, a P-256 certificate; a full handshake per process)."
    echo "\`fire-agent request --cacert CA -o /dev/null URL\` and \`curl -s --cacert CA -o /dev/null URL\` (curl + mbedTLS,"
    echo "static, bench/build-curl-mbedtls-cross.sh) in turn, 5 rounds of 50 processes each (HTTPS: of 20), time per"
    echo "process, median of the rounds. Whole-system emulation: no thread costs qemu-user's re-translation, but every"
    echo "instruction is still emulated, so read the ratio."
    echo
    echo "| board | fire-agent build | scheme | fire-agent | curl + mbedTLS | ratio |"
    echo "|---|---|---|---:|---:|---:|"
    cat "$work/get1k.md"
} >> "$work/report.md"
tee bench/results/board-rss.md < "$work/report.md"
