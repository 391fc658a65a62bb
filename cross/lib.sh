# shellcheck shell=bash
# Sourced by the cross/ scripts: where things live, and the chroot's mounts.

log() { echo "cross: $*" >&2; }
die() { echo "cross: error: $*" >&2; exit 1; }

# cross_init [CACHE_DIR]: sets cache, suite, mirror, chroot, bundle, sysroot, chroot_sysroot,
# sdk_name, project.
cross_init() {
    cache="${1:-${TINYFIRE_CROSS_CACHE:-/var/cache/tinyfire-cross}}"
    mkdir -p "$cache"
    cache="$(cd "$cache" && pwd)"
    # sid: swiftlang 6.2.3 (trixie's 6.0.3 cannot read swift-log's 6.2 manifest).
    suite="${TINYFIRE_CROSS_SUITE:-sid}"
    mirror="$(debian_mirror)"
    chroot="$cache/chroot-$suite-amd64"
    sdk_name="debian-$suite-aarch64"
    bundle="$cache/sdk/$sdk_name.artifactbundle"
    sysroot="$bundle/aarch64-unknown-linux-gnu/sysroot"
    # The same sysroot as the chroot sees it (the cache's sdk/ is mounted at /sdk).
    chroot_sysroot="/sdk/${sysroot#"$cache/sdk/"}"
    project="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
}

# The machine's own Debian mirror (offline machines reach only that one); DEBIAN_MIRROR overrides.
debian_mirror() {
    local found="${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}"
    [ -n "$found" ] || found="$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
    echo "${found:-http://deb.debian.org/debian}"
}

# write_private_apt DIR SUITE MIRROR ARCH...: an apt configuration of its own under DIR (sources,
# lists, status, cache) for SUITE on MIRROR with these architectures, used as
# APT_CONFIG=DIR/apt.conf; the host's /etc/apt is not touched. Check-Valid-Until is off: the
# offline mirror's suites are frozen snapshots past their Valid-Until.
write_private_apt() {
    local dir="$1" suite="$2" source="$3" arch architectures=""
    shift 3
    for arch in "$@"; do architectures+=" \"$arch\";"; done
    mkdir -p "$dir/sources.list.d" "$dir/lists/partial" "$dir/cache/archives/partial"
    : > "$dir/status"
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$source" "$suite" > "$dir/sources.list.d/$suite.sources"
    {
        echo 'Dir::Etc::sourcelist "/dev/null";'
        echo "Dir::Etc::sourceparts \"$dir/sources.list.d\";"
        echo "Dir::State::Lists \"$dir/lists\";"
        echo "Dir::State::status \"$dir/status\";"
        echo "Dir::Cache \"$dir/cache\";"
        echo "APT::Architectures {$architectures };"
        echo 'Acquire::Check-Valid-Until "false";'
        echo 'Acquire::Languages "none";'
        echo 'APT::Sandbox::User "root";'
    } > "$dir/apt.conf"
}

# The chroot's /proc and /dev (apt and swift need them).
mount_chroot_system() {
    mountpoint -q "$chroot/proc" || mount -t proc proc "$chroot/proc"
    mountpoint -q "$chroot/dev" || mount --rbind /dev "$chroot/dev"
}

# Plus the SDK at /sdk, the project at its own path (so paths compiled into the binaries, such
# as #filePath in tests, are the host's), and the offline Swift packages.
mount_chroot_build() {
    mount_chroot_system
    mkdir -p "$chroot/sdk" "$chroot$project"
    mountpoint -q "$chroot/sdk" || mount --bind "$cache/sdk" "$chroot/sdk"
    mountpoint -q "$chroot$project" || mount --bind "$project" "$chroot$project"
    if [ -d /opt/swift-packages ]; then
        mkdir -p "$chroot/opt/swift-packages"
        mountpoint -q "$chroot/opt/swift-packages" || { mount --bind /opt/swift-packages "$chroot/opt/swift-packages" &&
            mount -o remount,bind,ro "$chroot/opt/swift-packages"; }
    fi
}

# Undoes every mount under the chroot, innermost first.
unmount_chroot() {
    local point
    for point in $(awk -v root="$chroot/" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r); do
        umount -l "$point" 2>/dev/null || true
    done
}

# still_mounted_under DIR: true when some mount point lies inside DIR.
still_mounted_under() {
    awk -v root="$1/" 'index($2, root) == 1 {found = 1} END {exit !found}' /proc/mounts
}

# The SDK bundle's metadata (SE-0387): one artifact, one target triple.
write_sdk_json() {
    local variant="$bundle/aarch64-unknown-linux-gnu"
    cat > "$bundle/info.json" <<JSON
{
  "schemaVersion": "1.0",
  "artifacts": {
    "$sdk_name": {
      "type": "swiftSDK",
      "version": "1.0.0",
      "variants": [{ "path": "aarch64-unknown-linux-gnu" }]
    }
  }
}
JSON
    cat > "$variant/swift-sdk.json" <<JSON
{
  "schemaVersion": "4.0",
  "targetTriples": {
    "aarch64-unknown-linux-gnu": {
      "sdkRootPath": "sysroot",
      "swiftResourcesPath": "sysroot/usr/libexec/swift/lib/swift",
      "swiftStaticResourcesPath": "sysroot/usr/libexec/swift/lib/swift_static",
      "toolsetPaths": ["toolset.json"]
    }
  }
}
JSON
    # lld (Debian's swiftlang ships it); the runtime's RUNPATH is where Debian installs it on
    # the board, not the build machine's sysroot.
    cat > "$variant/toolset.json" <<JSON
{
  "schemaVersion": "1.0",
  "swiftCompiler": {
    "extraCLIOptions": ["-use-ld=lld", "-no-toolchain-stdlib-rpath", "-Xlinker", "-rpath=/usr/libexec/swift/lib/swift/linux"]
  }
}
JSON
    cat > "$sysroot/SDKSettings.json" <<JSON
{ "CanonicalName": "$sdk_name", "DisplayName": "Debian $suite aarch64", "Version": "1.0", "VersionMap": {}, "SupportedTargets": {} }
JSON
}

# chroot_run PROGRAM ARGS...: runs a program in the chroot with a clean environment. The
# caller's variables do not hold inside it: TMPDIR in particular names a directory of the host
# (CI runs with an empty TMPDIR of its own), and a maintainer script's mktemp there fails
# (ca-certificates' postinst did, on a fresh machine).
chroot_run() {
    chroot "$chroot" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}

# in_chroot COMMAND: runs a shell command in the project directory inside the chroot, with
# pkg-config describing the target's libraries (not the chroot's amd64 ones).
in_chroot() {
    local pkg_path="$chroot_sysroot/usr/lib/aarch64-linux-gnu/pkgconfig:$chroot_sysroot/usr/share/pkgconfig"
    chroot_run PKG_CONFIG_PATH="$pkg_path" PKG_CONFIG_LIBDIR="$pkg_path" PKG_CONFIG_SYSROOT_DIR="$chroot_sysroot" \
        sh -c "cd '$project' && $1"
}
