#!/usr/bin/env bash
# Installs what TinyFire's build, tests and demo need on Debian 12, only where missing:
# zlib headers, nginx, curl, GNU time (benchmarks) and iproute2 (namespaces) from apt; httpbin and
# gunicorn from PyPI; influxd (InfluxDB 1.x), systemd-analyze and libfaketime for the agent; squid
# and tinyproxy for the proxy tests; RAUC for the firmware tests.
set -euo pipefail
need_apt=()
[ -f /usr/include/zlib.h ] || need_apt+=(zlib1g-dev)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_apt+=(nginx-light)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
[ -x /usr/bin/time ] || need_apt+=(time)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
[ -f /usr/include/mbedtls/ssl.h ] || need_apt+=(libmbedtls-dev)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# influxd: the fleet backend of the agent's tests and of the demo (Debian's InfluxDB 1.x).
command -v influxd >/dev/null 2>&1 || need_apt+=(influxdb)
# systemd-analyze checks the agent's unit file (etc/fire-agent.service).
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
# libfaketime moves the wall clock of a dynamically linked agent in the clock tests.
[ -f /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || [ -f /usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1 ] \
    || need_apt+=(faketime)
# Real proxies for the proxy tests: squid built with OpenSSL (https_port, ssl-bump as the MITM),
# tinyproxy.
command -v squid >/dev/null 2>&1 || [ -x /usr/sbin/squid ] || need_apt+=(squid-openssl)
command -v tinyproxy >/dev/null 2>&1 || [ -x /usr/bin/tinyproxy ] || need_apt+=(tinyproxy)
# A real A/B installer for the firmware tests: RAUC (its service on a private D-Bus bus;
# bundles are squashfs images).
command -v rauc >/dev/null 2>&1 || need_apt+=(rauc)
command -v mksquashfs >/dev/null 2>&1 || need_apt+=(squashfs-tools)
command -v dbus-daemon >/dev/null 2>&1 || need_apt+=(dbus-daemon)
# iptables (-m statistic) makes the lossy link of bench/slowlink.sh.
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || need_apt+=(iptables)
# ip(8) builds the network namespaces of the reachability and offline-queue tests.
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need_apt+=(iproute2)
# The emulated board (board/README.md), unless TINYFIRE_BOARD=0: debootstrap and qemu-user make
# its image, qemu-system-arm and Debian's U-Boot run it, the rest lays out its disk. (Installed
# here, before anything runs beside the image's build.)
if [ "${TINYFIRE_BOARD:-1}" != 0 ]; then
    command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need_apt+=(debootstrap)
    command -v qemu-system-arm >/dev/null 2>&1 || need_apt+=(qemu-system-arm)
    [ -e /usr/bin/qemu-arm-static ] || need_apt+=(qemu-user-static)
    [ -d /usr/lib/u-boot/qemu_arm ] || need_apt+=(u-boot-qemu)
    command -v mkimage >/dev/null 2>&1 || need_apt+=(u-boot-tools)
    command -v mkfs.vfat >/dev/null 2>&1 || [ -x /usr/sbin/mkfs.vfat ] || need_apt+=(dosfstools)
    command -v sfdisk >/dev/null 2>&1 || [ -x /usr/sbin/sfdisk ] || need_apt+=(fdisk)
    command -v depmod >/dev/null 2>&1 || [ -x /usr/sbin/depmod ] || need_apt+=(kmod)
    command -v cpio >/dev/null 2>&1 || need_apt+=(cpio)
    command -v qemu-img >/dev/null 2>&1 || need_apt+=(qemu-utils)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "install-deps: apt-get install ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# nginx-light's package enables a default site on port 80; the tests run their own instance.
if ! python3 -c "import httpbin, gunicorn" >/dev/null 2>&1; then
    echo "install-deps: pip install httpbin gunicorn"
    python3 -m pip install -q "httpbin==0.10.4" "gunicorn==27.0.1"
    command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi
export PATH="/opt/swift/usr/bin:$PATH"
command -v swift >/dev/null 2>&1 || { echo "install-deps: Swift not found (expected /opt/swift)" >&2; exit 1; }
