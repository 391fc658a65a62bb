# The emulated board's boot script (U-Boot hush), RAUC's U-Boot integration: BOOT_ORDER names the
# slots to try, BOOT_x_LEFT the attempts each has left; an attempt is counted (and written back)
# before the kernel starts, RAUC's mark-good sets it back to 3, and a slot whose attempts ran
# out is passed over for the next. The counters live in a raw 16 KiB area, partition 4, in
# U-Boot's "CRC + variables" layout, which fw_printenv/fw_setenv read and write from Linux
# (/etc/fw_env.config: /dev/vda4 0x0 0x4000). Built with mkimage by board/build-image.sh.
setenv envaddr 0x40300000
setenv envsize 0x4000
setenv envblks 0x20
setenv BOOT_ORDER
setenv BOOT_A_LEFT
setenv BOOT_B_LEFT
setenv rauc_slot
setenv rauc_saveenv 'env export -c -s ${envsize} ${envaddr} BOOT_ORDER BOOT_A_LEFT BOOT_B_LEFT && virtio write ${envaddr} ${envblk} ${envblks}'
if part start virtio ${devnum} 4 envblk; then
  if virtio read ${envaddr} ${envblk} ${envblks}; then
    env import -c ${envaddr} ${envsize} BOOT_ORDER BOOT_A_LEFT BOOT_B_LEFT || echo "RAUC: boot counters unreadable, defaults"
  fi
fi
test -n "${BOOT_ORDER}" || setenv BOOT_ORDER "A B"
test -n "${BOOT_A_LEFT}" || setenv BOOT_A_LEFT 3
test -n "${BOOT_B_LEFT}" || setenv BOOT_B_LEFT 3
for BOOT_SLOT in ${BOOT_ORDER}; do
  if test -z "${rauc_slot}" && test "${BOOT_SLOT}" = "A" && test 0x${BOOT_A_LEFT} -gt 0; then
    setexpr BOOT_A_LEFT ${BOOT_A_LEFT} - 1
    setenv rauc_slot A
    setenv rauc_part 2
  elif test -z "${rauc_slot}" && test "${BOOT_SLOT}" = "B" && test 0x${BOOT_B_LEFT} -gt 0; then
    setexpr BOOT_B_LEFT ${BOOT_B_LEFT} - 1
    setenv rauc_slot B
    setenv rauc_part 3
  fi
done
if test -z "${rauc_slot}"; then
  echo "RAUC: no slot has attempts left: counters reset"
  setenv BOOT_A_LEFT 3
  setenv BOOT_B_LEFT 3
  setenv BOOT_ORDER "A B"
  run rauc_saveenv
  reset
fi
echo "RAUC: booting slot ${rauc_slot} (A_LEFT=${BOOT_A_LEFT} B_LEFT=${BOOT_B_LEFT} ORDER=${BOOT_ORDER})"
run rauc_saveenv || echo "RAUC: the boot counters could not be written"
setenv bootargs "console=ttyAMA0 root=/dev/vda${rauc_part} rootfstype=ext4 rw panic=10 rauc.slot=${rauc_slot}"
load virtio ${devnum}:${rauc_part} ${kernel_addr_r} /vmlinuz || reset
setenv kernel_size ${filesize}
load virtio ${devnum}:${rauc_part} ${ramdisk_addr_r} /initrd.img || reset
if test "${cpu}" = "armv8"; then
  booti ${kernel_addr_r} ${ramdisk_addr_r}:${filesize} ${fdtcontroladdr}
else
  bootz ${kernel_addr_r} ${ramdisk_addr_r}:${filesize} ${fdtcontroladdr}
fi
reset
