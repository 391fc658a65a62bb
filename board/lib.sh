# shellcheck shell=bash
# Sourced by the board/ scripts: where the emulated boards' images live, and shared helpers.

# write_private_apt (an apt configuration of one's own for another architecture) comes from the
# cross toolchain's helpers.
. "$(dirname "${BASH_SOURCE[0]}")/../cross/lib.sh"

log() { echo "board: $*" >&2; }
die() { echo "board: error: $*" >&2; exit 1; }

# board_init ARCH [CACHE_DIR]: sets arch, debian_arch, kernel_package, qemu, qemu_user, cache, rootfs,
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
    case "$arch" in armv7) qemu_user=arm ;; aarch64) qemu_user=aarch64 ;; esac
    project="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    local found
    found="${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}"
    mirror="${found:-http://deb.debian.org/debian}"
}

# ensure_binfmt: the kernel runs the board's binaries through qemu-user (debootstrap's second
# stage and dpkg in a release's root run them in a chroot). qemu-user-static's entries are in
# /usr/lib/binfmt.d, which systemd-binfmt registers at boot; on a host without it (a container,
# a machine where the package was installed after boot) they are registered here.
ensure_binfmt() {
    local name="qemu-$1" conf
    [ -e "/proc/sys/fs/binfmt_misc/$name" ] && return 0
    conf="/usr/lib/binfmt.d/$name.conf"
    [ -f "$conf" ] || die "no $conf: install qemu-user-static"
    [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc \
        || die "cannot mount binfmt_misc"
    grep -v '^#' "$conf" > /proc/sys/fs/binfmt_misc/register || die "cannot register $conf with binfmt_misc"
    log "registered $name with binfmt_misc"
}

# slot_image VERSION OUT [EXTRA_DIR [DEB]]: the root file system as an ext4 image with the
# release's version in /etc/fire-version (the package DEB installed in it, and EXTRA_DIR's files
# laid over it), shrunk to its contents: what goes into a slot and into a bundle.
slot_image() {
    local version="$1" out="$2" extra="${3:-}" deb="${4:-}" tree used dpkg_log
    # A tree of this call's own: releases may be made side by side (two boards' tests).
    tree="$(mktemp -d "$cache/slot-tree.XXXXXX")"
    dpkg_log="$tree.dpkg.log"
    cp -a "$rootfs/." "$tree/"
    chmod --reference="$rootfs" "$tree"
    echo "$version" > "$tree/etc/fire-version"
    if [ -n "$deb" ]; then
        # The release brings the agent: its package installed as on a board (under qemu-user).
        cp "$deb" "$tree/tmp/fire-agent.deb"
        mount -t proc proc "$tree/proc"
        if ! env -u TMPDIR chroot "$tree" dpkg -i /tmp/fire-agent.deb > "$dpkg_log" 2>&1; then
            umount "$tree/proc"
            rm -rf "$tree"
            die "dpkg -i in the release's root failed; see $dpkg_log"
        fi
        umount "$tree/proc"
        rm -f "$dpkg_log"
        rm -f "$tree/tmp/fire-agent.deb"
    fi
    [ -z "$extra" ] || cp -a --remove-destination "$extra/." "$tree/"
    used="$(du -sm "$tree" | cut -f1)"
    rm -f "$out"
    mkfs.ext4 -q -F -L "rootfs" -d "$tree" "$out" "$((used + used / 4 + 64))M"
    rm -rf "$tree"
    # Shrunk to what it holds: RAUC writes every byte of the image into the slot, then grows
    # the file system to the slot's size (resize=true in system.conf).
    e2fsck -f -y "$out" > /dev/null 2>&1 || [ $? -le 1 ] || die "e2fsck of $out failed"
    resize2fs -M "$out" > /dev/null 2>&1 || die "resize2fs -M of $out failed"
}
