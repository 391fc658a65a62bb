#!/usr/bin/env bash
# Deletes the toolchain cache and the cross build outputs. Unmounts first, and refuses to delete
# while anything is still mounted under the chroot (the project and /dev are bind-mounted there
# during builds: deleting through them would delete the real ones). Usage: cross/clean.sh [CACHE_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
cross_init "${1:-}"
for root in "$cache"/chroot-*; do
    [ -d "$root" ] || continue
    chroot="$root" # read by unmount_chroot
    export chroot
    unmount_chroot
    still_mounted_under "$root" && die "something is still mounted under $root; not deleting"
done
rm -rf "$cache" "$project/cross/out" "$project"/.build-aarch64-*
log "removed $cache, cross/out and .build-aarch64-*"
