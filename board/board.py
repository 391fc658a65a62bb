"""The emulated board, driven as a person at its serial console would: qemu-system with Debian's
U-Boot, the disk board/build-image.sh made (through a copy-on-write overlay, so the cached
image stays as built), one network link (a tap device) into a network namespace of the test's
own where its servers run, and root's shell on the serial console.

    with Network() as net, Board("armv7", cache, work, net) as board:
        board.boot()                     # U-Boot, the kernel, systemd, root's prompt
        print(board.run("rauc status"))  # a command's output; raises when it exits non-zero
        board.power_cut()                # SIGKILL to qemu: the guest's page cache is lost
        board.boot()

Nothing here reaches the host's network: the board's only link ends in the namespace.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import time

ARCHES = {
    "armv7": ("qemu-system-arm", "cortex-a15", "/usr/lib/u-boot/qemu_arm/u-boot.bin"),
    "aarch64": ("qemu-system-aarch64", "cortex-a53", "/usr/lib/u-boot/qemu_arm64/u-boot.bin"),
}
HOST_ADDRESS = "10.204.0.1"
BOARD_ADDRESS = "10.204.0.2"
PROMPT = re.compile(rb"root@board:[^\n#]*# ")


KERNEL_LINE = re.compile(r"\[\s*\d+\.\d+\] [^\n]*\n?")
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def clean(text):
    """A command's output without the console's noise: terminal escapes, carriage returns, and
    kernel messages that reached the console before `dmesg -n 1`."""
    return KERNEL_LINE.sub("", ESCAPE.sub("", text.replace("\r", "")))


class BoardError(Exception):
    """The board did not do what was asked; the message says what, with the console's tail."""


class Network:
    """A network namespace with a tap device, 10.204.0.1/24, for one board's link."""

    def __init__(self):
        self.name = f"tfboard{os.getpid()}"
        self.tap = "tap0"

    def __enter__(self):
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        self.exec(["ip", "link", "set", "lo", "up"])
        self.exec(["ip", "tuntap", "add", "dev", self.tap, "mode", "tap"])
        self.exec(["ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", self.tap])
        self.exec(["ip", "link", "set", self.tap, "up"])
        return self

    def __exit__(self, *_):
        subprocess.run(["ip", "netns", "pids", self.name], capture_output=True)
        for pid in subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True)

    def command(self, argv):
        return ["ip", "netns", "exec", self.name] + list(argv)

    def exec(self, argv, **kwargs):
        return subprocess.run(self.command(argv), check=True, **kwargs)

    def popen(self, argv, **kwargs):
        return subprocess.Popen(self.command(argv), **kwargs)


class Board:
    """One emulated board: its disk overlay, its console, its qemu process."""

    def __init__(self, arch, cache, work, network, share=None, memory_mib=512, base=None, log_writes=None, name=None):
        """`base`: a raw disk to start from instead of the built image (through an overlay of
        this board's own, so it stays as it is); `log_writes`: a file where qemu's blklogwrites
        driver records every write and flush the guest makes, in dm-log-writes' format
        (`replay_writes` rebuilds the disk at any flush); `name`: the overlay's name."""
        self.arch = arch
        self.share = share
        self.cache = os.path.join(cache, arch)
        self.work = work
        self.network = network
        self.memory_mib = memory_mib
        self.process = None
        self.console = None
        self.buffer = b""
        self.marker = 0
        self.attempts = []
        self.log_path = os.path.join(work, f"console-{arch}.log")
        self.disk = os.path.join(work, name or f"disk-{arch}.qcow2")
        self.log_writes = log_writes
        os.makedirs(work, exist_ok=True)
        if not os.path.exists(self.disk):
            base = base or os.path.join(self.cache, "disk.img")
            if not os.path.exists(base):
                raise BoardError(f"no board image at {base}: run board/build-image.sh {arch}")
            subprocess.run(
                ["qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", self.disk], check=True)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.power_cut()

    # -- power --------------------------------------------------------------------------

    def start(self):
        """Powers the board on: qemu starts, U-Boot runs from its flash."""
        if self.process is not None:
            raise BoardError("the board is already on")
        binary, cpu, bios = ARCHES[self.arch]
        socket_path = os.path.join(self.work, f"console-{self.arch}.sock")
        if os.path.exists(socket_path):
            os.unlink(socket_path)
        argv = [
            binary, "-M", "virt", "-cpu", cpu, "-m", str(self.memory_mib), "-smp", "2",
            "-display", "none", "-monitor", "none",
            "-chardev", f"socket,id=console,path={socket_path},server=on,wait=on",
            "-serial", "chardev:console",
            "-bios", bios,
        ]
        if self.log_writes:
            # Every write and flush also goes to the log (qemu's blklogwrites filter).
            argv += [
                "-blockdev", f"driver=file,node-name=disk-file,filename={self.disk}",
                "-blockdev", "driver=qcow2,node-name=disk-qcow2,file=disk-file",
                "-blockdev", f"driver=file,node-name=log-file,filename={self.log_writes}",
                "-blockdev", "driver=blklogwrites,node-name=disk,file=disk-qcow2,log=log-file,log-sector-size=512",
            ]
        else:
            argv += ["-drive", f"if=none,id=disk,file={self.disk},format=qcow2"]
        argv += [
            "-device", "virtio-blk-device,drive=disk",
            "-netdev", f"tap,id=link,ifname={self.network.tap},script=no,downscript=no",
            "-device", "virtio-net-device,netdev=link",
        ]
        if self.share:
            # A host directory the board mounts with 9p (mount_tag "host"): the package, the config.
            argv += ["-fsdev", f"local,id=host,path={self.share},security_model=none",
                     "-device", "virtio-9p-device,fsdev=host,mount_tag=host"]
        self.log = open(self.log_path, "ab", buffering=0)
        self.log.write(f"\n==== power on {time.strftime('%H:%M:%S')} ====\n".encode())
        self.process = self.network.popen(argv, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while not os.path.exists(socket_path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise BoardError(f"qemu did not start: {self.tail()}")
            time.sleep(0.05)
        self.console = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.console.connect(socket_path)
        self.buffer = b""

    def power_cut(self):
        """SIGKILL to qemu: what the guest had not written back to its disk is gone."""
        if self.process is None:
            return
        self.process.kill()
        self.process.wait()
        self.process = None
        if self.console:
            self.console.close()
            self.console = None
        self.log.write(f"\n==== power cut {time.strftime('%H:%M:%S')} ====\n".encode())
        self.log.close()

    # -- console -------------------------------------------------------------------------

    def read_until(self, pattern, timeout):
        """Reads the console until `pattern` (bytes regex) matches; returns the match."""
        regex = re.compile(pattern) if isinstance(pattern, bytes) else pattern
        deadline = time.monotonic() + timeout
        while True:
            found = regex.search(self.buffer)
            if found:
                self.buffer = self.buffer[found.end():]
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise BoardError(f"no {regex.pattern!r} on the console within {timeout} s: {self.tail()}")
            self.console.settimeout(min(left, 1.0))
            try:
                chunk = self.console.recv(65536)
            except socket.timeout:
                if self.process.poll() is not None:
                    raise BoardError(f"qemu exited ({self.process.returncode}): {self.tail()}")
                continue
            if not chunk:
                raise BoardError(f"the console closed: {self.tail()}")
            self.log.write(chunk)
            self.buffer += chunk
            if len(self.buffer) > 1 << 20:
                self.buffer = self.buffer[-(1 << 19):]

    def boot(self, timeout=600, boots=1):
        """Powers on if needed and waits for root's shell on the console after at least `boots`
        boots (a shell before that, of a system that reboots by itself, is passed over); returns
        the slot U-Boot booted last (A or B). Every slot U-Boot tried on the way (a kernel that
        panics is tried again until its attempts run out) is in `self.attempts`, in order."""
        if self.process is None:
            self.start()
        self.attempts = []
        deadline = time.monotonic() + timeout
        while True:
            found = self.read_until(rb"RAUC: booting slot ([AB])|" + PROMPT.pattern, max(1, deadline - time.monotonic()))
            if found.group(1) is None:
                if len(self.attempts) < boots:
                    continue  # a shell of an earlier boot
                break
            self.attempts.append(found.group(1).decode())
        slot = self.attempts[-1]
        # No echo, no prompt, no pagers, no colours, and the kernel's messages off the console:
        # what a command prints is all that comes back. (The marker is quoted apart so that the
        # line's own echo, before stty takes effect, does not match it.)
        self.console.sendall(
            b"stty -echo cols 250; bind 'set enable-bracketed-paste off'; export PS1= PS2= PAGER=cat SYSTEMD_PAGER= "
            b"SYSTEMD_COLORS=0 TERM=dumb; dmesg -n 1; echo __rea''dy__\n")
        self.read_until(rb"__ready__\r?\n", 30)
        return slot

    def run(self, command, timeout=120, check=True):
        """Runs `command` in root's shell on the console; returns its output (text). Raises
        BoardError when it exits non-zero (unless check is false: then (status, output))."""
        self.marker += 1
        tag = f"__done_{self.marker}_"
        self.console.sendall(f"{command}\necho {tag}$?\n".encode())
        found = self.read_until(re.compile(rb"(?s)(.*?)" + tag.encode() + rb"(\d+)\r?\n"), timeout)
        output = clean(found.group(1).decode(errors="replace"))
        status = int(found.group(2))
        if not check:
            return status, output
        if status != 0:
            raise BoardError(f"`{command}` exited {status}: {output[-2000:]}")
        return output

    def reboot_seen(self, timeout=600, boots=1):
        """Waits for the board to go down and come back by itself (a reboot it started), `boots`
        times; returns the slot U-Boot chose last."""
        return self.boot(timeout, boots)

    def tail(self, size=3000):
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(0, os.path.getsize(self.log_path) - size))
                return log.read().decode(errors="replace")
        except OSError:
            return ""


# -- the strict form of a power cut: only what the guest had flushed -----------------------

LOG_FLUSH, LOG_DISCARD = 1, 4
WRITE_LOG_MAGIC = 0x6A736677736872


def read_write_log(path):
    """The entries of a blklogwrites log (dm-log-writes' format: a superblock in sector 0, then
    per entry a header sector `sector, nr_sectors, flags, data_len` followed by the data
    written, except for flushes and discards). Returns (sector size, [(index, sector,
    nr_sectors, flags, data offset in the log)])."""
    import struct
    with open(path, "rb") as log:
        magic, version, count, sector_size = struct.unpack("<QQQI", log.read(28))
        if magic != WRITE_LOG_MAGIC or version != 1:
            raise BoardError(f"{path}: not a blklogwrites log (magic {magic:#x}, version {version})")
        size = os.path.getsize(path)
        entries = []
        offset = sector_size
        while len(entries) < count and offset + sector_size <= size:
            log.seek(offset)
            sector, nr_sectors, flags, _ = struct.unpack("<QQQQ", log.read(32))
            data = offset + sector_size
            entries.append((len(entries), sector, nr_sectors, flags, data))
            offset = data + (0 if flags & (LOG_FLUSH | LOG_DISCARD) else nr_sectors * sector_size)
        if len(entries) < count:
            raise BoardError(f"{path}: {count} entries announced, {len(entries)} found")
        return sector_size, entries


def replay_writes(log_path, base, out, upto):
    """`out`: the raw disk `base` with the log's entries before index `upto` applied (a flush's
    index: everything the guest had written when it asked for that flush). Discarded ranges read
    as zeros."""
    sector_size, entries = read_write_log(log_path)
    subprocess.run(["cp", "--sparse=always", base, out], check=True)
    with open(log_path, "rb") as log, open(out, "r+b") as disk:
        for index, sector, nr_sectors, flags, data in entries[:upto]:
            if flags & LOG_FLUSH:
                continue
            disk.seek(sector * sector_size)
            length = nr_sectors * sector_size
            if flags & LOG_DISCARD:
                disk.write(bytes(length))
                continue
            log.seek(data)
            while length:
                chunk = log.read(min(length, 1 << 20))
                if not chunk:
                    raise BoardError(f"{log_path}: entry {index} is cut short")
                disk.write(chunk)
                length -= len(chunk)
