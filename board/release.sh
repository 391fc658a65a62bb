#!/usr/bin/env bash
# Publishes a release for the emulated board, as a vendor would: the root file system of the
# given version with fire-agent's package installed in it, as a RAUC bundle (verity format,
# signed with the board's RAUC signer), and a fire-agent manifest for it signed with the
# vendor's key (board/build-image.sh makes both keys).
#   board/release.sh ARCH VERSION KIND WWW_DIR DEB [CACHE_DIR]
# KIND: good       the release as built
#       unhealthy  its application fails the health check (/etc/board-app-broken exists)
#       panic      its kernel panics at boot (init exits): U-Boot's attempts run out
# Writes WWW_DIR/VERSION.raucb, WWW_DIR/manifest.json and manifest.json.sig; prints the bundle's
# path. The vendor's public key is $CACHE/ARCH/keys/vendor.pub (the board's firmware.keys).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
board_init "${1:?usage: board/release.sh ARCH VERSION KIND WWW_DIR DEB [CACHE_DIR]}" "${6:-}"
version="${2:?version}"
kind="${3:?kind: good, unhealthy or panic}"
www="${4:?www directory}"
deb="${5:?the fire-agent package}"
[ -f "$cache/stamps/disk" ] || die "no board image: run board/build-image.sh $arch first"
mkdir -p "$www"
ensure_binfmt "$qemu_user"

work="$(mktemp -d "${TMPDIR:-/tmp}/board-release.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/extra/etc" "$work/bundle"
case "$kind" in
    good) ;;
    unhealthy) echo "this release's application does not start" > "$work/extra/etc/board-app-broken" ;;
    # (/sbin is a link to usr/sbin in bookworm's merged /usr: the init is replaced there.)
    panic) mkdir -p "$work/extra/usr/sbin" && ln -s /bin/false "$work/extra/usr/sbin/init" ;;
    *) die "unknown release kind '$kind' (good, unhealthy, panic)" ;;
esac
slot_image "$version" "$work/bundle/rootfs.ext4" "$work/extra" "$deb"
cat > "$work/bundle/manifest.raucm" <<MANIFEST
[update]
compatible=$compatible
version=$version

[bundle]
format=verity

[image.rootfs]
filename=rootfs.ext4
MANIFEST
bundle="$www/$version.raucb"
rm -f "$bundle"
rauc bundle --cert="$keys/signer.cert.pem" --key="$keys/signer.key.pem" --keyring="$keys/ca.cert.pem" \
    "$work/bundle" "$bundle" > "$work/rauc.log" 2>&1 || die "rauc bundle failed: $(tail -5 "$work/rauc.log")"

# The manifest: published after the image and its signature, by rename.
size="$(stat -c %s "$bundle")"
sha="$(sha256sum "$bundle" | cut -d' ' -f1)"
printf '{"version": "%s", "compatible": ["%s"], "image": "%s", "size": %s, "sha256": "%s"}\n' \
    "$version" "$compatible" "$(basename "$bundle")" "$size" "$sha" > "$work/manifest.json"
openssl dgst -sha256 -sign "$keys/vendor.key" -out "$www/manifest.json.sig" "$work/manifest.json"
mv "$work/manifest.json" "$www/manifest.json.new" && mv "$www/manifest.json.new" "$www/manifest.json"
echo "$bundle"
