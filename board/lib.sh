# shellcheck shell=bash
# Sourced by the board/ scripts: where the emulated boards' images live, and shared helpers.

# write_private_apt (an apt configuration of one's own for another architecture) comes from the
# cross toolchain's helpers.
. "$(dirname "${BASH_SOURCE[0]}")/../cross/lib.sh"

log() { echo "board: $*" >&2; }
die() { echo "board: error: $*" >&2; exit 1; }

# board_init ARCH [CACHE_DIR]: sets arch, debian_arch, kernel_package, qemu, cache, rootfs,
# keys, compatible (RAUC's and the manifests'), mirror, project.
board_init() {
    arch="$1"
    case "$arch" in
        armv7) debian_arch=armhf kernel_package=linux-image-armmp-lpae qemu=qemu-system-arm ;;
        aarch64) debian_arch=arm64 kernel_package=linux-image-arm64 qemu=qemu-system-aarch64 ;;
        *) die "unknown board architecture '$arch' (armv7 or aarch64)" ;;
    esac
    cache="${2:-${TINYFIRE_BOARD_CACHE:-/var/cache/tinyfire-board}}/$arch"
    mkdir -p "$cache"
    cache="$(cd "$cache" && pwd)"
    rootfs="$cache/rootfs"
    keys="$cache/keys"
    compatible="tinyfire-qemu-virt-$debian_arch"
    project="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    local found
    found="${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}"
    mirror="${found:-http://deb.debian.org/debian}"
}

# slot_image VERSION OUT [EXTRA_DIR [DEB]]: the root file system as an ext4 image with the
# release's version in /etc/fire-version (the package DEB installed in it, and EXTRA_DIR's files
# laid over it), sized to its contents plus a margin: what goes into a slot and into a bundle.
slot_image() {
    local version="$1" out="$2" extra="${3:-}" deb="${4:-}" tree="$cache/slot-tree" used
    rm -rf "$tree"
    cp -a "$rootfs" "$tree"
    echo "$version" > "$tree/etc/fire-version"
    if [ -n "$deb" ]; then
        # The release brings the agent: its package installed as on a board (under qemu-user).
        cp "$deb" "$tree/tmp/fire-agent.deb"
        mount -t proc proc "$tree/proc"
        if ! env -u TMPDIR chroot "$tree" dpkg -i /tmp/fire-agent.deb > "$cache/release-dpkg.log" 2>&1; then
            umount "$tree/proc"
            die "dpkg -i in the release's root failed; see $cache/release-dpkg.log"
        fi
        umount "$tree/proc"
        rm -f "$tree/tmp/fire-agent.deb"
    fi
    [ -z "$extra" ] || cp -a --remove-destination "$extra/." "$tree/"
    used="$(du -sm "$tree" | cut -f1)"
    rm -f "$out"
    mkfs.ext4 -q -F -L "rootfs" -d "$tree" "$out" "$((used + used / 4 + 64))M"
    rm -rf "$tree"
}
