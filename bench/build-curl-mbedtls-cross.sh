#!/usr/bin/env bash
# Cross-builds curl, from Debian's own source package (the one bench/build-curl-mbedtls.sh builds
# natively), for armv7 (armhf) or aarch64 against the Embedded build's bookworm sysroot (its
# mbedTLS 2.28 and zlib), static, with the same clang and lld: the peer of the Embedded
# fire-agent on a board. Once; later runs reuse the build. Prints the binary's path.
#   bench/build-curl-mbedtls-cross.sh armv7|aarch64 [CACHE_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
arch="$1"
cache="${2:-${TINYFIRE_CACHE:-$HOME/.cache/tinyfire}}"
out="$cache/curl-mbedtls-$arch"
if [ -x "$out/bin/curl" ]; then echo "$out/bin/curl"; exit 0; fi
bench/build-curl-mbedtls.sh "$cache" >/dev/null   # fetches and unpacks the source
sysroot="$(cross/embedded/sysroot.sh "$arch")"
case "$arch" in
    armv7) target=armv7-unknown-linux-gnueabihf; host=arm-linux-gnueabihf; flags="-mfloat-abi=hard -mfpu=vfpv3-d16" ;;
    aarch64) target=aarch64-unknown-linux-gnu; host=aarch64-linux-gnu; flags="" ;;
    *) echo "usage: $0 armv7|aarch64" >&2; exit 64 ;;
esac
rm -rf "$out.build"
cp -a "$cache/curl-mbedtls.src/curl-src" "$out.build"
cd "$out.build"
[ -f Makefile ] && make -s distclean >/dev/null 2>&1 || true
clang="/opt/swift/usr/bin/clang"
./configure --quiet --host="$host" --prefix="$out" CC="$clang --target=$target $flags --sysroot=$sysroot -fuse-ld=lld" \
    LDFLAGS="-static" --disable-shared --enable-static --with-mbedtls="$sysroot/usr" --without-openssl --without-gnutls \
    --without-libpsl --without-libidn2 --without-brotli --without-zstd --without-nghttp2 --without-librtmp --without-libssh2 \
    --disable-ldap --disable-ldaps --disable-manual --with-ca-bundle=/etc/ssl/certs/ca-certificates.crt >&2
make -j"$(nproc)" -s >&2
# libtool leaves -static out of the program's link with this compiler: link it again with it.
cd src
rm -f curl
link="$(make V=1 2>&1 | sed -n 's/^libtool: link: \(.* -o curl .*\)/\1/p' | tail -1)"
rm -f curl
eval "$link -static" >&2
mkdir -p "$out/bin"
/opt/swift/usr/bin/llvm-objcopy --strip-all curl "$out/bin/curl"
echo "$out/bin/curl"
