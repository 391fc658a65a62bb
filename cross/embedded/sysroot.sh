#!/usr/bin/env bash
# The C sysroots the Embedded-Swift board builds link against, made of Debian bookworm packages
# (the host's own suite; glibc 2.36, mbedTLS 2.28, zlib 1.2.13): libc6-dev, linux-libc-dev,
# libgcc-12-dev, zlib1g-dev, libmbedtls-dev and their runtime halves, for armhf (armv7
# hard-float) and arm64. No Swift runtime is needed: Embedded Swift carries what it uses.
# About 12 MB per architecture under CACHE/embedded/; a second run does nothing. Prints the
# sysroot's path. Usage:
#   cross/embedded/sysroot.sh armv7|aarch64 [CACHE_DIR]
# (CACHE_DIR: default $TINYFIRE_CROSS_CACHE or /var/cache/tinyfire-cross.) No root needed
# unless the cache directory asks for it.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
log() { echo "embedded: $*" >&2; }
die() { echo "embedded: error: $*" >&2; exit 1; }

arch="${1:-}"
case "$arch" in
armv7) deb_arch=armhf ;;
aarch64) deb_arch=arm64 ;;
*) die "usage: $0 armv7|aarch64 [CACHE_DIR]" ;;
esac
cache="${2:-${TINYFIRE_CROSS_CACHE:-/var/cache/tinyfire-cross}}/embedded"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
suite=bookworm
sysroot="$cache/sysroot-$suite-$deb_arch"
if [ -f "$sysroot/.complete" ]; then
    echo "$sysroot"
    exit 0
fi

# A private apt configuration (the host's /etc/apt is not touched), shared by both architectures.
apt_dir="$cache/apt-$suite"
if [ ! -f "$apt_dir/.updated" ]; then
    write_private_apt "$apt_dir" "$suite" "$(debian_mirror)" amd64 armhf arm64
    APT_CONFIG="$apt_dir/apt.conf" apt-get update -qq || die "apt-get update for $suite failed"
    touch "$apt_dir/.updated"
fi
apt_private() { APT_CONFIG="$apt_dir/apt.conf" "$@"; }

log "making the $deb_arch sysroot ($suite)"
debs="$cache/debs-$deb_arch"
rm -rf "$debs" "$sysroot"
mkdir -p "$debs"
mapfile -t mbed_libs < <(apt_private apt-cache depends "libmbedtls-dev:$deb_arch" | awk '/Depends: libmbed/ {print $2}' | sed "s/:$deb_arch\$//")
packages=(libc6 libc6-dev libgcc-s1 libgcc-12-dev zlib1g zlib1g-dev libmbedtls-dev "${mbed_libs[@]}" linux-libc-dev)
(cd "$debs" && apt_private apt-get download -qq "${packages[@]/%/:$deb_arch}" >/dev/null) \
    || die "downloading the $deb_arch packages failed"
mkdir -p "$sysroot/usr/lib" "$sysroot/usr/include"
ln -s usr/lib "$sysroot/lib"
for deb in "$debs"/*.deb; do
    # --keep-directory-symlink: lib -> usr/lib stays a link (qemu -L needs the merged layout).
    dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$sysroot"
done
(cd "$debs" && for deb in *.deb; do dpkg-deb -f "$deb" Package Version | awk '{print $2}' | paste -sd=; done) \
    > "$sysroot/packages.txt"
rm -rf "$debs"
touch "$sysroot/.complete"
log "sysroot ready: $sysroot ($(du -sh "$sysroot" | cut -f1))"
echo "$sysroot"
