#!/usr/bin/env bash
# One-time setup of the aarch64 cross toolchain, from the Debian archive only (no internet):
#   1. host tools: qemu-user-static (runs the result), debootstrap;
#   2. a Debian sid amd64 chroot holding Debian's own Swift compiler (swiftlang 6.2.3);
#   3. a Swift SDK bundle whose sysroot is made of Debian sid arm64 packages: glibc, libgcc,
#      libstdc++, the Swift runtime and Foundation for aarch64, mbedTLS, zlib.
# Everything lives under the cache directory (about 4 GB); each step leaves a stamp, so a second
# run does nothing. Needs root (debootstrap, chroot). Usage:
#   cross/prepare.sh [CACHE_DIR]        (default: $TINYFIRE_CROSS_CACHE or /var/cache/tinyfire-cross)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
cross_init "${1:-}"

step() { # NAME: true when the step still has to run
    [ -f "$cache/stamps/$1" ] && return 1
    log "step $1"
    return 0
}
done_step() { touch "$cache/stamps/$1"; }
mkdir -p "$cache/stamps"

[ "$(id -u)" = 0 ] || die "run as root (debootstrap and chroot need it)"

# 1. Host tools.
if step host-tools; then
    need=()
    command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
    command -v debootstrap >/dev/null || need+=(debootstrap)
    if [ ${#need[@]} -gt 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
    done_step host-tools
fi

# 2. A private apt configuration for sid (amd64 + arm64); the host's /etc/apt is not touched.
apt_dir="$cache/apt-$suite"
if step apt; then
    write_private_apt "$apt_dir" "$suite" "$mirror" amd64 arm64
    mkdir -p "$apt_dir/debs"
    APT_CONFIG="$apt_dir/apt.conf" apt-get update -qq
    done_step apt
fi
apt_private() { APT_CONFIG="$apt_dir/apt.conf" "$@"; }

# 3. The build chroot with Debian's Swift compiler.
if step chroot; then
    unmount_chroot
    still_mounted_under "$chroot" && die "something is still mounted under $chroot; not deleting it"
    rm -rf "$chroot"
    env -u TMPDIR debootstrap --variant=minbase "$suite" "$chroot" "$mirror" > "$cache/debootstrap.log" 2>&1 \
        || die "debootstrap failed; see $cache/debootstrap.log"
    done_step chroot
fi
if step compiler; then
    mount_chroot_system
    trap unmount_chroot EXIT
    echo 'Acquire::Check-Valid-Until "false";' > "$chroot/etc/apt/apt.conf.d/99tinyfire-snapshot"
    chroot_run apt-get update -qq
    chroot_run DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        swiftlang libswiftlang libmbedtls-dev zlib1g-dev pkgconf git ca-certificates > "$cache/compiler.log" 2>&1 \
        || die "installing swiftlang in the chroot failed; see $cache/compiler.log"
    # Resolve github.com package URLs from the machine's offline copies, as the host does.
    if [ -d /opt/swift-packages ]; then
        chroot_run git config --system url./opt/swift-packages/.insteadof https://github.com/
    fi
    unmount_chroot
    trap - EXIT
    done_step compiler
fi

# 4. The arm64 sysroot and the SDK bundle.
if step sdk; then
    gcc_major="$(apt_private apt-cache depends gcc | grep -o 'gcc-[0-9]\+' | head -1 | cut -d- -f2)"
    [ -n "$gcc_major" ] || die "cannot tell the gcc version of $suite"
    # mbedTLS's runtime libraries change names with their sonames: take them from the -dev package.
    mapfile -t mbed_libs < <(apt_private apt-cache depends libmbedtls-dev:arm64 | awk '/Depends: libmbed/ {print $2}' | sed 's/:arm64$//')
    packages=(libc6 libc6-dev libcrypt1 libcrypt-dev libgcc-s1 "libgcc-$gcc_major-dev" libstdc++6 "libstdc++-$gcc_major-dev"
        libatomic1 zlib1g zlib1g-dev libmbedtls-dev "${mbed_libs[@]}" libswiftlang swiftlang)
    debs="$apt_dir/debs"
    rm -f "$debs"/*.deb
    (cd "$debs" && apt_private apt-get download -qq "${packages[@]/%/:arm64}" >/dev/null) \
        || die "downloading the arm64 packages failed"
    # linux-libc-dev is arch-independent in some suites, per-arch in others.
    (cd "$debs" && { apt_private apt-get download -qq linux-libc-dev:arm64 2>/dev/null || apt_private apt-get download -qq linux-libc-dev; }) >/dev/null \
        || die "downloading linux-libc-dev failed"

    rm -rf "$bundle"
    mkdir -p "$sysroot/usr/lib" "$sysroot/usr/bin" "$sysroot/usr/sbin" "$sysroot/usr/include"
    ln -s usr/lib "$sysroot/lib"
    ln -s usr/bin "$sysroot/bin"
    ln -s usr/sbin "$sysroot/sbin"
    for deb in "$debs"/*.deb; do
        case "$(basename "$deb")" in
        swiftlang_*)
            # Only the target half of the compiler package: the aarch64 runtime, Foundation's
            # modules, the static libraries and clang's resource headers.
            dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$sysroot" --wildcards \
                './usr/libexec/swift/lib/swift/linux' './usr/libexec/swift/lib/swift/shims' './usr/libexec/swift/lib/swift/clang' \
                './usr/libexec/swift/lib/swift/Block' './usr/libexec/swift/lib/swift/CoreFoundation' \
                './usr/libexec/swift/lib/swift/_FoundationCShims' './usr/libexec/swift/lib/swift/_foundation_unicode' \
                './usr/libexec/swift/lib/swift/dispatch' './usr/libexec/swift/lib/swift/os' \
                './usr/libexec/swift/lib/swift_static' './usr/libexec/swift/lib/clang/*/include' 2> "$cache/extract.log" \
                || die "extracting $(basename "$deb") failed; see $cache/extract.log"
            ;;
        libswiftlang_*)
            dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$sysroot" --exclude='./usr/libexec/swift/host*'
            ;;
        *)
            dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$sysroot"
            ;;
        esac
    done
    ln -sfn ../libexec/swift/lib/swift "$sysroot/usr/lib/swift"
    ln -sfn ../libexec/swift/lib/swift_static "$sysroot/usr/lib/swift_static"
    # Static links: only archives in the search path (so -static-swift-stdlib does not pick the
    # .so files), and empty ICU archives the static-executable link line still names.
    static_deps="$sysroot/usr/lib/aarch64-linux-gnu/static-deps"
    mkdir -p "$static_deps"
    for lib in mbedtls mbedx509 mbedcrypto z; do
        ln -sfn "../lib$lib.a" "$static_deps/lib$lib.a"
    done
    ln -sfn "../../gcc/aarch64-linux-gnu/$gcc_major/libstdc++.a" "$static_deps/libstdc++.a"
    for lib in icui18nswift icuucswift icudataswift; do
        ar rc "$static_deps/lib$lib.a"
    done
    # Debian's arm64 swiftlang ships the _Testing_Foundation module but not its library; the
    # test bundle's link names it. An empty archive stands in (nothing in it is called).
    mkdir -p "$sysroot/usr/lib/aarch64-linux-gnu/test-deps"
    ar rc "$sysroot/usr/lib/aarch64-linux-gnu/test-deps/lib_Testing_Foundation.a"
    write_sdk_json
    (cd "$debs" && for deb in *.deb; do dpkg-deb -f "$deb" Package Version | awk '{print $2}' | paste -sd= ; done) \
        > "$cache/sysroot-packages.txt"
    done_step sdk
fi

# The compiler finds its own libraries through $ORIGIN, which needs /proc in the chroot.
mount_chroot_system
version="$(chroot_run swift --version 2>/dev/null | grep -o 'Swift version [0-9.]*' | head -1)"
unmount_chroot
log "ready: chroot $chroot ($version), SDK $bundle"
