#!/usr/bin/env bash
# Builds the emulated board's disk from Debian bookworm's own packages, offline:
#   - a root file system (debootstrap, armhf or arm64): systemd, udev, D-Bus, RAUC, libubootenv's
#     fw_printenv/fw_setenv, Debian's kernel, iproute2;
#   - a disk with U-Boot's boot script (p1), root file systems A (p2) and B (p3), and a data
#     partition for the agent's state, queue and spool (p4);
#   - U-Boot's flash (Debian's u-boot-qemu) and the environment it starts with.
# Everything lives under the cache directory, each step leaves a stamp: a second run does
# nothing. Needs root (debootstrap, chroot). Usage:
#   board/build-image.sh ARCH [CACHE_DIR]     ARCH: armv7 or aarch64
#                                              (default CACHE_DIR: $TINYFIRE_BOARD_CACHE or
#                                              /var/cache/tinyfire-board)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"
board_init "${1:?usage: board/build-image.sh armv7|aarch64 [CACHE_DIR]}" "${2:-}"
[ "$(id -u)" = 0 ] || die "run as root (debootstrap and chroot need it)"

step() { # NAME: true when the step still has to run
    [ -f "$cache/stamps/$1" ] && return 1
    log "$arch: step $1"
    return 0
}
done_step() { touch "$cache/stamps/$1"; }
mkdir -p "$cache/stamps"

if step host-tools; then
    need=()
    command -v debootstrap >/dev/null || need+=(debootstrap)
    command -v "$qemu" >/dev/null || need+=(qemu-system-arm)
    [ -e /usr/bin/qemu-arm-static ] || need+=(qemu-user-static)
    [ -d /usr/lib/u-boot/qemu_arm ] || need+=(u-boot-qemu)
    command -v mkimage >/dev/null || need+=(u-boot-tools)
    command -v mkfs.vfat >/dev/null || need+=(dosfstools)
    command -v sfdisk >/dev/null || need+=(fdisk)
    command -v rauc >/dev/null || need+=(rauc)
    command -v mksquashfs >/dev/null || need+=(squashfs-tools)
    command -v depmod >/dev/null || need+=(kmod)
    command -v cpio >/dev/null || need+=(cpio)
    command -v qemu-img >/dev/null || need+=(qemu-utils)
    if [ ${#need[@]} -gt 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
    done_step host-tools
fi

# The root file system, without a kernel: debootstrap's second stage runs the packages' scripts
# under qemu-user, and a kernel's would build an initramfs there (twenty minutes of emulated
# mkinitramfs). Recommends are left out: the board carries what it runs. (libpam-systemd is
# logind for polkitd, which depends on "default-logind | logind": debootstrap does not pick
# between alternatives itself.)
packages=systemd,systemd-sysv,libpam-systemd,udev,dbus,rauc,rauc-service,polkitd,libubootenv-tool,iproute2,kmod,e2fsprogs,procps,busybox-static
if step rootfs; then
    ensure_binfmt "$qemu_user"
    rm -rf "$rootfs"
    env -u TMPDIR debootstrap --arch="$debian_arch" --variant=minbase --foreign --include="$packages" \
        bookworm "$rootfs" "$mirror" > "$cache/debootstrap.log" 2>&1 || die "debootstrap failed; see $cache/debootstrap.log"
    env -u TMPDIR chroot "$rootfs" /debootstrap/debootstrap --second-stage >> "$cache/debootstrap.log" 2>&1 \
        || die "debootstrap's second stage failed; see $cache/debootstrap.log"
    # What a board does not carry: documentation, manual pages, translations, apt's lists and
    # the packages debootstrap fetched (45 MB).
    rm -rf "$rootfs/usr/share/doc/"* "$rootfs/usr/share/man/"* "$rootfs/usr/share/info/"* "$rootfs/usr/share/locale/"* \
        "$rootfs/var/cache/apt/"*.bin "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"*_* \
        "$rootfs/var/cache/debconf/"*-old
    done_step rootfs
fi

# Debian's kernel, unpacked on the host (its modules indexed by the host's depmod), and an
# initramfs made here too: busybox (static, from the board's own packages) loads virtio_mmio,
# virtio_blk and ext4, mounts root= and hands over to its /sbin/init.
if step kernel; then
    apt_dir="$cache/apt"
    write_private_apt "$apt_dir" bookworm "$mirror" "$debian_arch"
    APT_CONFIG="$apt_dir/apt.conf" apt-get update -qq
    rm -f "$apt_dir/cache/archives/"*.deb
    APT_CONFIG="$apt_dir/apt.conf" apt-get install -qq -y --download-only --no-install-recommends \
        -o Debug::NoLocking=1 "$kernel_package:$debian_arch" > "$cache/kernel.log" 2>&1 || die "cannot fetch $kernel_package; see $cache/kernel.log"
    image_deb="$(ls "$apt_dir/cache/archives/"linux-image-[0-9]*_"$debian_arch".deb | head -1)"
    [ -n "$image_deb" ] || die "no kernel package among $(ls "$apt_dir/cache/archives")"
    # Unpacked beside the root, then copied in: tar would replace the merged /lib symlink.
    rm -rf "$cache/kernel-unpacked" && dpkg-deb -x "$image_deb" "$cache/kernel-unpacked"
    rm -rf "$rootfs/usr/lib/modules" && mkdir -p "$rootfs/usr/lib/modules"
    cp -a "$cache/kernel-unpacked/boot/." "$rootfs/boot/"
    # arm64 kernels have no decompressor of their own and Debian ships them gzip'd; U-Boot's
    # booti takes the plain Image.
    for kernel in "$rootfs/boot/"vmlinuz-*; do
        if gzip -t "$kernel" 2>/dev/null; then
            zcat "$kernel" > "$kernel.plain" && mv "$kernel.plain" "$kernel"
        fi
    done
    # Only the modules a virt board can load: its buses and devices are virtio's, its file
    # systems ext4, 9p and squashfs, RAUC's verity bundles dm-verity on a loop device. The
    # drivers for real hardware (two thirds of the 160 MB) would be copied into every release,
    # downloaded and written to a slot at each update.
    unpacked_modules="$(echo "$cache/kernel-unpacked/lib/modules/"*)"
    version_dir="$rootfs/usr/lib/modules/$(basename "$unpacked_modules")"
    mkdir -p "$version_dir/kernel/drivers/net"
    cp -a "$unpacked_modules/"modules.order "$unpacked_modules/"modules.builtin* "$version_dir/"
    for part in arch block crypto fs lib mm net; do
        [ ! -d "$unpacked_modules/kernel/$part" ] || cp -a "$unpacked_modules/kernel/$part" "$version_dir/kernel/"
    done
    for part in virtio block md char rtc; do
        [ ! -d "$unpacked_modules/kernel/drivers/$part" ] || cp -a "$unpacked_modules/kernel/drivers/$part" "$version_dir/kernel/drivers/"
    done
    for driver in virtio_net net_failover tun veth dummy; do
        cp -a "$unpacked_modules/kernel/drivers/net/$driver.ko" "$version_dir/kernel/drivers/net/" 2>/dev/null || true
    done
    # And whatever those need from elsewhere (arm64's dm-mod needs drivers/dax): a module kept
    # without its dependencies does not load, silently.
    while true; do
        missing=()
        while read -r module; do
            for dep in $(modinfo -F depends "$module" | tr ',' ' '); do
                [ -n "$(find "$version_dir/kernel" -name "$dep.ko" -o -name "${dep//_/-}.ko" | head -1)" ] || missing+=("$dep")
            done
        done < <(find "$version_dir/kernel" -name '*.ko')
        [ ${#missing[@]} -gt 0 ] || break
        for dep in $(printf '%s\n' "${missing[@]}" | sort -u); do
            source_path="$(find "$unpacked_modules/kernel" \( -name "$dep.ko" -o -name "${dep//_/-}.ko" \) | head -1)"
            [ -n "$source_path" ] || die "kernel module $dep (a dependency) is not in $image_deb"
            relative="${source_path#"$unpacked_modules/"}"
            mkdir -p "$version_dir/$(dirname "$relative")"
            cp -a "$source_path" "$version_dir/$relative"
        done
    done
    rm -rf "$cache/kernel-unpacked"
    kernel_version="$(ls "$rootfs/usr/lib/modules" | head -1)"
    depmod -b "$rootfs" "$kernel_version"
    ln -sf "boot/vmlinuz-$kernel_version" "$rootfs/vmlinuz"
    ln -sf "boot/initrd.img-$kernel_version" "$rootfs/initrd.img"
    echo "$kernel_version" > "$cache/kernel-version"
    done_step kernel
fi
if step initramfs; then
    kernel_version="$(cat "$cache/kernel-version")"
    modules="$rootfs/lib/modules/$kernel_version"
    work="$cache/initramfs-work"
    rm -rf "$work" && mkdir -p "$work/bin" "$work/dev" "$work/proc" "$work/sys" "$work/newroot" "$work/modules"
    cp "$rootfs/bin/busybox" "$work/bin/busybox"
    # The modules and what they need, in the order to load them (modules.dep lists a module's
    # dependencies after it, the deepest last).
    : > "$work/modules/order"
    add_module() {
        local name="$1" line path dep
        line="$(grep -E "(^|/)$name\.ko:" "$modules/modules.dep" || true)"
        [ -n "$line" ] || return 0 # built in
        path="${line%%:*}"
        grep -qx "$(basename "$path")" "$work/modules/order" && return 0
        for dep in $(echo "${line#*:}" | tr ' ' '\n' | tac); do add_module "$(basename "$dep" .ko)"; done
        cp "$modules/$path" "$work/modules/"
        basename "$path" >> "$work/modules/order"
    }
    for module in crc32c_generic virtio_mmio virtio_blk ext4; do add_module "$module"; done
    cp "$here/initramfs-init" "$work/init"
    chmod 0755 "$work/init"
    (cd "$work" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -9) > "$rootfs/boot/initrd.img-$kernel_version"
    rm -rf "$work"
    done_step initramfs
fi

# RAUC's keys: a CA (its certificate is the board's keyring) and a signer without extended key
# usage (OpenSSL's CMS check then accepts it with digitalSignature alone). Bundles are signed on
# the host with these (board/bundle.sh).
if step keys; then
    rm -rf "$keys" && mkdir -p "$keys"
    (
        cd "$keys"
        openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/O=TinyFire/CN=fire-agent board CA" \
            -keyout ca.key.pem -out ca.cert.pem -addext basicConstraints=critical,CA:TRUE \
            -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -sha256 -subj "/O=TinyFire/CN=fire-agent board signer" \
            -keyout signer.key.pem -out signer.csr 2>/dev/null
        printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n' > signer.ext
        openssl x509 -req -in signer.csr -CA ca.cert.pem -CAkey ca.key.pem -CAcreateserial -days 3650 -sha256 \
            -extfile signer.ext -out signer.cert.pem 2>/dev/null
        # The vendor's manifest key (ECDSA P-256): vendor.pub is the board's firmware.keys.
        openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out vendor.key 2>/dev/null
        openssl pkey -in vendor.key -pubout -out vendor.pub
    )
    done_step keys
fi

# The board's own configuration: console, network, mounts, RAUC, the boot loader's environment.
if step configure; then
    echo board > "$rootfs/etc/hostname"
    printf '127.0.0.1 localhost\n127.0.1.1 board\n10.204.0.1 servers\n' > "$rootfs/etc/hosts"
    : > "$rootfs/etc/machine-id"
    # The data partition holds what must survive an update: the board's own agent config, the
    # agent's state and queue, and the spool. A release's root file system brings the agent;
    # these stay.
    cat > "$rootfs/etc/fstab" <<FSTAB
/dev/vda5 /data ext4 defaults,noatime 0 2
/data/etc/fire-agent /etc/fire-agent none bind,x-systemd.requires-mounts-for=/data 0 0
/data/lib/fire-agent /var/lib/fire-agent none bind,x-systemd.requires-mounts-for=/data 0 0
/data/spool/fire-agent /var/spool/fire-agent none bind,x-systemd.requires-mounts-for=/data 0 0
FSTAB
    mkdir -p "$rootfs/data" "$rootfs/etc/fire-agent" "$rootfs/var/lib/fire-agent" "$rootfs/var/spool/fire-agent"
    # The test drives the board through its serial console: root logs in there by itself.
    mkdir -p "$rootfs/etc/systemd/system/serial-getty@ttyAMA0.service.d"
    cat > "$rootfs/etc/systemd/system/serial-getty@ttyAMA0.service.d/autologin.conf" <<UNIT
[Service]
ExecStart=
ExecStart=-/sbin/agetty --autologin root --noclear --keep-baud 115200,57600,38400,9600 %I \$TERM
UNIT
    # The servers are on the other end of the board's one link (a tap device in the test's
    # network namespace), 10.204.0.1; the board is 10.204.0.2.
    cat > "$rootfs/etc/systemd/network/10-board.network" <<NET
[Match]
Type=ether
[Network]
Address=10.204.0.2/24
Gateway=10.204.0.1
NET
    ln -sf /lib/systemd/system/systemd-networkd.service "$rootfs/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
    mkdir -p "$rootfs/etc/rauc"
    cp "$keys/ca.cert.pem" "$rootfs/etc/rauc/ca.cert.pem"
    cat > "$rootfs/etc/rauc/system.conf" <<RAUC
[system]
compatible=$compatible
bootloader=uboot
bundle-formats=-plain

[keyring]
path=/etc/rauc/ca.cert.pem

[slot.rootfs.0]
device=/dev/vda2
type=ext4
bootname=A
resize=true

[slot.rootfs.1]
device=/dev/vda3
type=ext4
bootname=B
resize=true
RAUC
    # RAUC mounts verity bundles through device-mapper on a loop device: loaded at boot, since
    # nothing loads dm_mod when /dev/mapper/control is missing (arm64's kernel has it as a
    # module: "Failed to open /dev/mapper/control" without this; armhf's has it built in).
    printf 'dm_mod\ndm_verity\nloop\nsquashfs\n' > "$rootfs/etc/modules-load.d/rauc.conf"
    # U-Boot's boot counters live in a raw 16 KiB area (partition 4) that the boot script reads
    # and writes, and fw_printenv/fw_setenv (libubootenv) reach from Linux.
    echo '/dev/vda4 0x0 0x4000' > "$rootfs/etc/fw_env.config"
    printf 'BOOT_ORDER=A B\nBOOT_A_LEFT=3\nBOOT_B_LEFT=3\n' > "$rootfs/etc/u-boot-initial-env"
    done_step configure
fi

# The disk: GPT, 1 boot script (ext4), 2 rootfs A, 3 rootfs B, 4 the boot counters (raw, 1 MiB),
# 5 data. Slot A holds release 1.0.0; slot B is empty until the first update.
slot_mib=768
disk="$cache/disk.img"
if step disk; then
    work="$cache/disk-work"
    rm -rf "$work" && mkdir -p "$work/boot" "$work/data/etc/fire-agent" "$work/data/lib/fire-agent" "$work/data/spool/fire-agent"
    mkimage -A arm -T script -C none -n "RAUC A/B" -d "$here/boot.cmd" "$work/boot/boot.scr" > /dev/null
    mkfs.ext4 -q -F -L boot -d "$work/boot" "$work/boot.ext4" 15M
    mkfs.ext4 -q -F -L data -d "$work/data" "$work/data.ext4" 256M
    slot_image 1.0.0 "$work/slotA.ext4"
    resize2fs "$work/slotA.ext4" "${slot_mib}M" > /dev/null 2>&1 || die "resize2fs of slot A failed"
    printf 'BOOT_ORDER=A B\nBOOT_A_LEFT=3\nBOOT_B_LEFT=3\n' > "$work/env.txt"
    mkenvimage -s 0x4000 -o "$work/env.bin" "$work/env.txt"
    rm -f "$disk"
    truncate -s "$((1 + 16 + 2 * slot_mib + 1 + 256 + 1))M" "$disk"
    sfdisk -q "$disk" <<LAYOUT
label: gpt
unit: sectors
start=2048, size=$((16 * 2048)), name=boot
size=$((slot_mib * 2048)), name=rootfs-a
size=$((slot_mib * 2048)), name=rootfs-b
size=2048, name=uboot-env
size=$((256 * 2048)), name=data
LAYOUT
    start_of() { sfdisk -J "$disk" | python3 -c "import json,sys; print(json.load(sys.stdin)['partitiontable']['partitions'][$1 - 1]['start'])"; }
    dd if="$work/boot.ext4" of="$disk" bs=512 seek="$(start_of 1)" conv=notrunc,sparse status=none
    dd if="$work/slotA.ext4" of="$disk" bs=512 seek="$(start_of 2)" conv=notrunc,sparse status=none
    dd if="$work/env.bin" of="$disk" bs=512 seek="$(start_of 4)" conv=notrunc status=none
    dd if="$work/data.ext4" of="$disk" bs=512 seek="$(start_of 5)" conv=notrunc,sparse status=none
    rm -rf "$work"
    done_step disk
fi
log "$arch: $disk ($(du -h "$disk" | cut -f1) used of $(du -h --apparent-size "$disk" | cut -f1)); keys in $keys"
