#!/usr/bin/env bash
# Builds curl from Debian's own source package against Debian's mbedTLS (the fair peer for
# TinyFire's HTTPS figures), once; later runs reuse the build. Prints the curl binary's path.
#   bench/build-curl-mbedtls.sh [CACHE_DIR]   (default ${TINYFIRE_CACHE:-$HOME/.cache/tinyfire})
set -euo pipefail
cache="${1:-${TINYFIRE_CACHE:-$HOME/.cache/tinyfire}}/curl-mbedtls"
if [ -x "$cache/bin/curl" ]; then echo "$cache/bin/curl"; exit 0; fi
mkdir -p "$cache.src"
if ! ls /etc/apt/sources.list.d/*.sources 2>/dev/null | xargs grep -l "deb-src" >/dev/null 2>&1; then
    # A private deb-src entry for Debian's main archive (the same mirror as the binary packages).
    cat > /etc/apt/sources.list.d/tinyfire-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -qq >&2
fi
command -v dpkg-source >/dev/null || apt-get install -y -qq dpkg-dev >&2
command -v make >/dev/null || apt-get install -y -qq make gcc >&2
cd "$cache.src"
[ -d curl-src ] || { apt-get source -qq --download-only curl >&2 && dpkg-source -x --no-check curl_*.dsc curl-src >/dev/null; }
cd curl-src
./configure --quiet --prefix="$cache" --with-mbedtls --without-openssl --without-gnutls --without-libpsl \
    --without-libidn2 --without-brotli --without-zstd --without-nghttp2 --without-librtmp --without-libssh2 \
    --disable-ldap --disable-ldaps --disable-manual --with-ca-bundle=/etc/ssl/certs/ca-certificates.crt >&2
make -j"$(nproc)" -s >&2
make -s install >&2
echo "$cache/bin/curl"
