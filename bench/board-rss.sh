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
# curl + mbedTLS cross-built on the same sysroot (bench/build-curl-mbedtls-cross.sh), from
# busybox httpd on loopback.
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
trap 'rm -rf "$work"' EXIT
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

# The initramfs: busybox, fire-agent, a config, a vendor key, and /init.
initramfs() {
    local arch="$1" binary="$2" curl="${3:-}" root="$work/$arch-root"
    rm -rf "$root"
    mkdir -p "$root"/{bin,proc,sys,dev,tmp,etc,agent/spool}
    cp "$cache/$arch/busybox" "$root/bin/busybox"
    cp "$binary" "$root/bin/fire-agent"
    [ -z "$curl" ] || cp "$curl" "$root/bin/curl"
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
# One 1 KiB GET per process, fire-agent and curl+mbedTLS in turn, 5 rounds of 50 each, from
# busybox httpd on loopback; /proc/uptime (10 ms) brackets each 50.
if [ -x /bin/curl ]; then
    /bin/busybox mkdir -p /www
    /bin/busybox head -c 1024 /dev/urandom > /www/1k.bin
    /bin/busybox httpd -p 127.0.0.1:8080 -h /www
    /bin/busybox sleep 1
    url=http://127.0.0.1:8080/1k.bin
    /bin/fire-agent request -o /tmp/fa.bin $url && /bin/curl -s -o /tmp/curl.bin $url &&
        /bin/busybox cmp /tmp/fa.bin /www/1k.bin && /bin/busybox cmp /tmp/curl.bin /www/1k.bin && echo "get1k: bodies ok"
    for round in 1 2 3 4 5; do
        for client in fire-agent curl; do
            start=$(/bin/busybox cut -d' ' -f1 /proc/uptime)
            i=0
            while [ $i -lt 50 ]; do
                if [ $client = curl ]; then /bin/curl -s -o /dev/null $url; else /bin/fire-agent request -o /dev/null $url; fi
                i=$((i + 1))
            done
            echo "get1k: $client $round $start $(/bin/busybox cut -d' ' -f1 /proc/uptime)"
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
        armv7) timeout 300 qemu-system-arm -M virt -cpu cortex-a15 -m 256 -nographic -no-reboot -kernel "$cache/$arch/vmlinuz" \
            -initrd "$work/$arch.cpio.gz" -append "console=ttyAMA0 quiet panic=-1" ;;
        aarch64) timeout 300 qemu-system-aarch64 -M virt -cpu cortex-a53 -m 256 -nographic -no-reboot -kernel "$cache/$arch/vmlinuz" \
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
    _, client, _, start, end = line.split()
    per.setdefault(client, []).append((float(end) - float(start)) * 1000 / 50)
fa, curl = statistics.median(per["fire-agent"]), statistics.median(per["curl"])
print(f"| {sys.argv[1]} | {sys.argv[2]} | {fa:.1f} ms | {curl:.1f} ms | {fa / curl:.2f} |")' "$arch" "$label" >> "$work/get1k.md"
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
    echo "After the daemon's figures: busybox httpd on loopback; \`fire-agent request -o /dev/null URL\` and"
    echo "\`curl -s -o /dev/null URL\` (curl + mbedTLS, static, bench/build-curl-mbedtls-cross.sh) in turn, 5 rounds of 50"
    echo "processes each, time per process, median of the rounds. Whole-system emulation: no thread costs qemu-user's"
    echo "re-translation, but every instruction is still emulated, so read the ratio."
    echo
    echo "| board | fire-agent build | fire-agent | curl + mbedTLS | ratio |"
    echo "|---|---|---:|---:|---:|"
    cat "$work/get1k.md"
} >> "$work/report.md"
tee bench/results/board-rss.md < "$work/report.md"
