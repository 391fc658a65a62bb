"""fire-agent on the emulated board, end to end: installed from its package, run by systemd as its
own user, delivering an application's points to influxd, updating A -> B through RAUC with a
real reboot, and surviving power cuts.

    python3 board/test.py ARCH [--cache DIR] [--work DIR] [--power-cuts N] [--deb FILE]

The servers (influxd, nginx for manifests and bundles, a status recorder) run in the test's
network namespace, the board's only link. Each check prints "ok: ..." or raises; the last line
is "N passed, 0 failed" (or the failure). Needs the board image (board/build-image.sh ARCH) and
the Embedded fire-agent for ARCH (cross/embedded/build.sh ARCH)."""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from board import (  # noqa: E402
    BOARD_ADDRESS, HOST_ADDRESS, LOG_DISCARD, LOG_FLUSH, Board, BoardError, Network, read_write_log, replay_writes)

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
DEBIAN_ARCH = {"armv7": "armhf", "aarch64": "arm64"}
INFLUX_PORT, WWW_PORT, STATUS_PORT = 8086, 8080, 8081


class Servers:
    """influxd, nginx and the status recorder, inside the namespace, on 10.204.0.1."""

    def __init__(self, network, work):
        self.network = network
        self.work = work
        self.www = os.path.join(work, "www")
        self.status_file = os.path.join(work, "status.jsonl")
        self.processes = []

    def __enter__(self):
        os.makedirs(self.www, exist_ok=True)
        influx = os.path.join(self.work, "influx")
        os.makedirs(influx, exist_ok=True)
        with open(os.path.join(self.work, "influxdb.conf"), "w") as conf:
            conf.write(f"""reporting-disabled = true
bind-address = "{HOST_ADDRESS}:8088"
[meta]
  dir = "{influx}/meta"
[data]
  dir = "{influx}/data"
  wal-dir = "{influx}/wal"
  query-log-enabled = false
[http]
  bind-address = "{HOST_ADDRESS}:{INFLUX_PORT}"
  log-enabled = false
[monitor]
  store-enabled = false
""")
        log = open(os.path.join(self.work, "servers.log"), "ab")
        self.processes.append(self.network.popen(
            ["influxd", "-config", os.path.join(self.work, "influxdb.conf")], stdout=log, stderr=log))
        nginx_dir = os.path.join(self.work, "nginx")
        os.makedirs(nginx_dir, exist_ok=True)
        os.chmod(self.work, 0o755)
        with open(os.path.join(nginx_dir, "nginx.conf"), "w") as conf:
            conf.write(f"""worker_processes 1;
pid {nginx_dir}/nginx.pid;
error_log {nginx_dir}/error.log;
daemon off;
events {{ worker_connections 64; }}
http {{
  access_log {nginx_dir}/access.log;
  default_type application/octet-stream;
  client_body_temp_path {nginx_dir}/body; proxy_temp_path {nginx_dir}/proxy;
  fastcgi_temp_path {nginx_dir}/fastcgi; uwsgi_temp_path {nginx_dir}/uwsgi; scgi_temp_path {nginx_dir}/scgi;
  server {{ listen {HOST_ADDRESS}:{WWW_PORT}; root {self.www}; }}
}}
""")
        self.processes.append(self.network.popen(
            ["nginx", "-c", os.path.join(nginx_dir, "nginx.conf"), "-e", os.path.join(nginx_dir, "error.log")],
            stdout=log, stderr=log))
        self.processes.append(self.network.popen(
            [sys.executable, os.path.join(HERE, "status-server.py"), HOST_ADDRESS, str(STATUS_PORT), self.status_file],
            stdout=log, stderr=log))
        deadline = time.monotonic() + 60
        while self.query_raw("SHOW DATABASES") is None:
            if time.monotonic() > deadline:
                raise BoardError("influxd did not start in the namespace")
            time.sleep(0.2)
        self.query_raw("CREATE DATABASE board")
        return self

    def __exit__(self, *_):
        for process in self.processes:
            process.kill()
            process.wait()

    def query_raw(self, statement):
        url = f"http://{HOST_ADDRESS}:{INFLUX_PORT}/query?" + urllib.parse.urlencode({"q": statement, "db": "board"})
        result = subprocess.run(self.network.command(["curl", "-s", "-XPOST", url]), capture_output=True, text=True)
        if result.returncode != 0 or not result.stdout:
            return None
        return json.loads(result.stdout)

    def values(self, statement):
        answer = self.query_raw(statement) or {}
        series = (answer.get("results") or [{}])[0].get("series") or []
        return [row for s in series for row in s.get("values", [])]

    def statuses(self):
        if not os.path.exists(self.status_file):
            return []
        with open(self.status_file) as lines:
            return [json.loads(line) for line in lines if line.strip()]


def wait_for(what, check, timeout, interval=2.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BoardError(f"{what}: not within {timeout} s")
        time.sleep(interval)


def board_config(compatible, download_rate=None):
    # The full run slows downloads (firmware.maxBytesPerSecond) so that its power cuts land
    # during them: over the test's tap link a whole bundle otherwise arrives in seconds.
    rate = f"maxBytesPerSecond: {download_rate}," if download_rate else ""
    return f"""{{
  device: {{ id: "board-1" }},
  server: {{ url: "http://{HOST_ADDRESS}:{INFLUX_PORT}" }},
  telemetry: {{
    interval: "10s", syncInterval: "5s", jitter: 0,
    collectors: {{ cpu: true, memory: true, agent: true }},
    spoolDirectory: "/var/spool/fire-agent",
    influx: {{ version: 1, database: "board", precision: "ns" }},
  }},
  queue: {{ directory: "/var/lib/fire-agent/queue", retry: {{ initial: "1s", maximum: "5s" }} }},
  clock: {{ requireSync: false }},
  firmware: {{
    manifestURL: "http://{HOST_ADDRESS}:{WWW_PORT}/manifest.json",
    keys: ["/etc/fire-agent/vendor.pub"],
    deviceType: "{compatible}",
    versionFile: "/etc/fire-version",
    pollInterval: "10s", jitter: 0,
    retry: {{ initial: "2s", maximum: "10s" }},
    install: ["rauc", "install", "{{file}}"],
    reboot: ["systemctl", "reboot"],
    healthCheck: {{ command: ["/bin/sh", "-c", "! test -e /etc/board-app-broken"], attempts: 2, interval: "5s" }},
    commit: ["rauc", "status", "mark-good"],
    commitEveryStart: true,
    rollback: ["rauc", "status", "mark-bad", "booted"],
    statusURL: "http://{HOST_ADDRESS}:{STATUS_PORT}/status",
    {rate}
  }},
}}
"""


# The application on the board: hands a file of points over as OPERATIONS.md says (a hidden name,
# fsync, rename, fsync of the directory), then notes the file's number in a log it fsyncs too.
WRITER = r"""#!/bin/sh
# writer FIRST COUNT: files FIRST..FIRST+COUNT-1, 20 points each; /data/app/handed lists those handed over.
set -e
i=$1; end=$(($1 + $2))
while [ $i -lt $end ]; do
  tmp=/var/spool/fire-agent/.app-$i.lp
  : > $tmp
  j=0
  while [ $j -lt 20 ]; do echo "app,file=$i seq=$((i * 20 + j))i $((1700000000000000000 + i * 20 + j))" >> $tmp; j=$((j + 1)); done
  sync $tmp
  mv $tmp /var/spool/fire-agent/app-$i.lp
  sync /var/spool/fire-agent
  echo $i >> /data/app/handed
  sync /data/app/handed
  i=$((i + 1))
done
"""


class Run:
    def __init__(self, args):
        self.args = args
        self.arch = args.arch
        self.cache = args.cache
        self.work = args.work
        self.passed = 0
        self.handed_so_far = []
        self.cuts = []
        self.figures = {}
        with open(os.path.join(self.cache, self.arch, "rootfs/etc/rauc/system.conf")) as conf:
            self.compatible = next(line.split("=", 1)[1].strip() for line in conf if line.startswith("compatible="))

    def ok(self, what):
        self.passed += 1
        print(f"ok: {what}", flush=True)

    def share(self):
        """The files the board needs from the host, on a 9p share the board mounts at /mnt/host."""
        share = os.path.join(self.work, "share")
        os.makedirs(share, exist_ok=True)
        shutil.copy(self.args.deb, os.path.join(share, "fire-agent.deb"))
        shutil.copy(os.path.join(self.cache, self.arch, "keys/vendor.pub"), os.path.join(share, "vendor.pub"))
        with open(os.path.join(share, "fire-agent.json5"), "w") as config:
            config.write(board_config(self.compatible, download_rate=4_000_000 if self.args.full else None))
        with open(os.path.join(share, "writer"), "w") as writer:
            writer.write(WRITER)
        return share

    def release(self, servers, version, kind):
        result = subprocess.run(
            [os.path.join(HERE, "release.sh"), self.arch, version, kind, servers.www, self.args.deb, self.cache],
            capture_output=True, text=True)
        if result.returncode != 0:
            raise BoardError(f"release {version} ({kind}): {result.stderr[-1500:]}")

    def add_app(self, board):
        """The application's user, in the spool writers' group (each slot's /etc has its own)."""
        board.run("id app >/dev/null 2>&1 || useradd --system --groups fire-spool app; install -d -o app -g app /data/app")

    def handed(self, board):
        out = board.run("cat /data/app/handed 2>/dev/null || true")
        return sorted({int(x) for x in out.split()})

    def check_points(self, servers, board, what):
        handed = self.handed(board)
        expected = {f * 20 + j for f in handed for j in range(20)}
        def delivered():
            rows = servers.values("SELECT seq FROM app")
            seqs = [row[1] for row in rows]
            return seqs if expected <= set(seqs) else None
        seqs = wait_for(f"{what}: every handed-over point in influxd", delivered, 180)
        if len(seqs) != len(set(seqs)):
            raise BoardError(f"{what}: a point is stored twice")
        self.handed_so_far = handed
        self.ok(f"{what}: the {len(expected)} points of {len(handed)} handed-over files are in influxd once each")
        return handed

    def statuses_for(self, servers, version):
        return [s for s in servers.statuses() if s.get("version") == version]

    def wait_state(self, servers, version, state, timeout):
        return wait_for(f"release {version} reported {state}", lambda: next(
            (s for s in self.statuses_for(servers, version) if s.get("state") == state), None), timeout)

    def booted(self, board):
        version = board.run("cat /etc/fire-version").strip()
        # (RAUC warns on stderr first when it finds no primary slot: the JSON is the line that
        # starts with a brace.)
        output = board.run("rauc status --output-format=json")
        document = next((line for line in output.splitlines() if line.startswith("{")), None)
        if document is None:
            raise BoardError(f"rauc status gave no JSON: {output[-1000:]}")
        return version, json.loads(document)

    def first_boot(self, board, servers):
        """Test 1: slot A holds release 1.0.0, without the agent: the package goes on as an
        integrator puts it on a board, with dpkg -i; every release after it carries the agent."""
        slot = board.boot()
        if slot != "A":
            raise BoardError(f"the first boot chose slot {slot}")
        self.ok("U-Boot booted slot A, systemd gave root a shell on the console")
        board.run("mkdir -p /mnt/host && mount -t 9p -o trans=virtio,version=9p2000.L host /mnt/host")
        board.run("dpkg -i /mnt/host/fire-agent.deb", timeout=300)
        board.run("install -m 0600 -o fire-agent -g fire-agent /mnt/host/fire-agent.json5 /etc/fire-agent/fire-agent.json5 "
                  "&& install -m 0644 /mnt/host/vendor.pub /etc/fire-agent/vendor.pub "
                  "&& install -D -m 0755 /mnt/host/writer /data/bin/writer")
        board.run("systemctl restart fire-agent && systemctl is-active fire-agent", timeout=120)
        user = board.run("ps -o user= -C fire-agent").split()
        if not user or any(u != "fire-agent" for u in user):
            raise BoardError(f"fire-agent runs as {user}")
        self.ok("the package installed; systemd runs fire-agent as the fire-agent user")
        self.add_app(board)
        board.run("setpriv --reuid=app --regid=app --init-groups /data/bin/writer 0 5", timeout=120)
        self.check_points(servers, board, "telemetry")
        print(board.run("fire-agent status --config /etc/fire-agent/fire-agent.json5"), flush=True)
        self.ok("fire-agent status answers on the board")

    def good_update(self, board, servers, version, slot_expected):
        """Test 2: the agent downloads, RAUC installs, the board reboots into the other slot,
        the check passes, RAUC marks it good, reported done."""
        self.release(servers, version, "good")
        slot = board.reboot_seen(timeout=900)
        if slot != slot_expected:
            raise BoardError(f"after the update to {version} the board booted slot {slot}")
        self.wait_state(servers, version, "done", 300)
        running, status = self.booted(board)
        if running != version or status.get("booted") != slot_expected:
            raise BoardError(f"running {running} on {status.get('booted')}")
        self.ok(f"update to {version} in slot {slot}: RAUC installed, a real reboot, the check, the commit, reported")
        self.add_app(board)  # each slot's /etc has its own users

    def unhealthy_update(self, board, servers, version, running_slot):
        """Test 3: the new release's application fails its health check: the agent rolls back
        (RAUC marks the slot bad), reboots, U-Boot boots the old slot, the failure is reported."""
        old_version, _ = self.booted(board)
        other = "A" if running_slot == "B" else "B"
        self.release(servers, version, "unhealthy")
        # Booted, checked, rolled back, rebooted: the shell of the first boot may not even come.
        slot = board.reboot_seen(timeout=1500, boots=2)
        if board.attempts != [other, running_slot]:
            raise BoardError(f"U-Boot booted {board.attempts}, expected {other} (the release) then {running_slot}")
        failed = self.wait_state(servers, version, "failed", 300)
        running, status = self.booted(board)
        if running != old_version or status.get("booted") != running_slot:
            raise BoardError(f"after the rollback: running {running} on {status.get('booted')}")
        if "health check" not in failed.get("reason", ""):
            raise BoardError(f"the failure's reason: {failed.get('reason')}")
        self.ok(f"unhealthy {version}: health check failed, rolled back, a real reboot into {slot}, reported: "
                f"{failed.get('reason')}")

    def panicking_update(self, board, servers, version, running_slot):
        """Test 4: the new release's kernel does not boot (its init exits: a panic, and panic=10
        resets the board): U-Boot tries it until its attempts run out, then boots the old slot,
        and the agent there reports the update failed."""
        old_version, _ = self.booted(board)
        other = "A" if running_slot == "B" else "B"
        self.release(servers, version, "panic")
        slot = board.reboot_seen(timeout=1500)
        if slot != running_slot or board.attempts != [other] * 3 + [running_slot]:
            raise BoardError(f"U-Boot tried {board.attempts}, expected {other} three times then {running_slot}")
        failed = self.wait_state(servers, version, "failed", 300)
        running, status = self.booted(board)
        if running != old_version or status.get("booted") != running_slot:
            raise BoardError(f"after the fallback: running {running} on {status.get('booted')}")
        self.ok(f"panicking {version}: U-Boot tried {''.join(board.attempts)}, fell back to {slot}, reported: "
                f"{failed.get('reason')}")
        # The agent marks the running slot good at its start (firmware.commitEveryStart): its
        # attempts are back, and the next boot does not try the failed slot again.
        wait_for(f"slot {running_slot} marked good", lambda: board.run(
            f"fw_printenv BOOT_{running_slot}_LEFT").strip() == f"BOOT_{running_slot}_LEFT=3", 120)
        board.power_cut()
        board.boot()
        if board.attempts != [running_slot]:
            raise BoardError(f"after the fallback a power cut led U-Boot to try {board.attempts}")
        self.ok(f"the running slot {running_slot} is marked good at each start: a power cut boots it at once")

    def power_cut_telemetry(self, board, servers, first):
        """A power cut while the application hands files over and the agent delivers them; every
        handed-over point is in influxd once after the board is back. Also measures power-on to
        the first point of the new boot in influxd."""
        board.console.sendall(f"setpriv --reuid=app --regid=app --init-groups /data/bin/writer {first} 200 &\n".encode())
        before = len(self.handed_so_far)
        time.sleep(random.uniform(5, 20))
        board.power_cut()
        powered = time.time()
        seen = []

        def first_point():
            # The agent's own measurements of the new boot, stamped after power-on.
            statement = f"SELECT count(used) FROM mem WHERE time > {int(powered * 1e9)}"
            while not seen and time.time() - powered < 600:
                if any(row[1] for row in servers.values(statement)):
                    seen.append(time.time() - powered)
                time.sleep(0.5)
        watcher = threading.Thread(target=first_point, daemon=True)
        watcher.start()
        slot = board.boot()
        self.ok(f"after a power cut the board booted slot {slot}")
        watcher.join(600)
        shell = time.time() - powered
        self.figures["power on to the first point in influxd"] = f"{seen[0]:.0f} s" if seen else "not within 600 s"
        self.figures["power on to root's shell (and the checks before it)"] = f"{shell:.0f} s"
        board.run("systemctl is-active fire-agent", timeout=120)
        handed = self.check_points(servers, board, "after the power cut")
        if len(handed) <= before:
            raise BoardError("the application handed no file over before the power cut: the cut tried nothing")

    # -- the full run's power cuts (test 5) ---------------------------------------------------

    STATE = "/var/lib/fire-agent/firmware/state.json"
    PART = "/var/lib/fire-agent/firmware/staging/image.part"

    def phase(self, board):
        out = board.run(f"grep -o '\"phase\" *: *\"[a-zA-Z]*\"' {self.STATE} 2>/dev/null || true", timeout=60)
        return out.split('"')[-2] if '"' in out else None

    def nothing_set_aside(self, board, what):
        """No state file or queue the agent keeps was found damaged and set aside."""
        found = board.run(
            "ls /var/lib/fire-agent/firmware/state.json.damaged 2>/dev/null; "
            "find /var/lib/fire-agent/queue/quarantine /var/lib/fire-agent/firmware/reports/quarantine -type f 2>/dev/null; "
            "journalctl -b -u fire-agent --no-pager -o cat | grep -E 'damaged|quarantined|no intact slot' || true", timeout=120)
        if found.strip():
            raise BoardError(f"{what}: the agent set something aside: {found.strip()[-1500:]}")

    def cut(self, board, what):
        board.power_cut()
        self.cuts.append(what)
        slot = board.boot()
        board.run("systemctl is-active fire-agent", timeout=120)
        self.nothing_set_aside(board, f"cut {len(self.cuts)} ({what})")
        return slot

    def cuts_during_telemetry(self, board, servers, count):
        for _ in range(count):
            first = max(self.handed_so_far, default=0) + 1000
            board.console.sendall(f"setpriv --reuid=app --regid=app --init-groups /data/bin/writer {first} 200 &\n".encode())
            time.sleep(random.uniform(2, 25))
            slot = self.cut(board, "telemetry")
            self.check_points(servers, board, f"cut {len(self.cuts)} (telemetry, slot {slot})")

    def cuts_during_update(self, board, servers, version, download_cuts, install_cut, commit_cuts):
        """One release, cut during its download (each time the download goes on from where it
        was), then optionally during its install (which then either finished or did not: the
        board boots a whole slot and the agent reports what runs), then after its reboot while
        it is confirmed and committed. Returns the slot it ends in."""
        running_version, status = self.booted(board)
        running_slot = status.get("booted")
        other = "A" if running_slot == "B" else "B"
        self.release(servers, version, "good")
        # The agent goes on by itself between the cuts: the download may end, the install run
        # and the board reboot while a command is asked on the console. A command the reboot
        # cut short means the board went down by itself: it is waited for, and the cuts
        # planned before that moment are passed over.
        rebooted = False

        def ask(command):
            nonlocal rebooted
            if rebooted:
                return None
            try:
                return board.run(command, timeout=60)
            except BoardError:
                board.boot(1500)
                rebooted = True
                return None

        def phase():
            out = ask(f"grep -o '\"phase\" *: *\"[a-zA-Z]*\"' {self.STATE} 2>/dev/null || true")
            return out.split('"')[-2] if out and '"' in out else None

        def part_size():
            out = ask(f"stat -c %s {self.PART} 2>/dev/null || echo 0")
            return int(out) if out is not None else 0

        past_download = ("verifying", "installing", "installed", "confirming")
        cut_at = 0
        for n in range(download_cuts):
            wait_for("the download under way",
                     lambda: rebooted or phase() in past_download or part_size() > cut_at, 600, interval=1)
            time.sleep(random.uniform(0.5, 6))
            if rebooted or phase() != "downloading":
                print(f"   the download of {version} ended before cut {n + 1} of {download_cuts}", flush=True)
                break
            cut_at = part_size()
            self.cut(board, "download")
            print(f"   cut {len(self.cuts)} during the download of {version} at {cut_at} bytes", flush=True)
        if install_cut:
            wait_for("the install under way",
                     lambda: rebooted or phase() in ("installing", "installed", "confirming"), 900, interval=1)
        if install_cut and not rebooted and phase() == "installing":
            # RAUC writes a slot in 30 to 45 s here: every other install cut lands early in the
            # write (the old slot must boot, the update reported failed), the others anywhere in
            # it or just after (either slot, whole).
            early = self.cuts.count("install") % 2 == 0
            time.sleep(random.uniform(1, 10) if early else random.uniform(10, 40))
            slot = self.cut(board, "install")
            running, status = self.booted(board)
            print(f"   cut {len(self.cuts)} during the install of {version}: booted {slot} ({running})", flush=True)
            if slot == running_slot and running == running_version:
                report = self.wait_state(servers, version, "failed", 300)
                self.ok(f"cut during the install of {version}: the old slot {slot} runs {running}, reported: {report.get('reason')}")
                return slot
            if slot != other or running != version:
                raise BoardError(f"after a cut during the install: slot {slot} runs {running}")
        else:
            if install_cut:
                print(f"   the install of {version} ended before it could be cut", flush=True)
            if not rebooted:
                board.reboot_seen(timeout=1500)
        for n in range(commit_cuts):
            time.sleep(random.uniform(0, 15))
            slot = self.cut(board, "commit")
            running, _ = self.booted(board)
            print(f"   cut {len(self.cuts)} while {version} was confirmed: booted {slot} ({running})", flush=True)
        final = wait_for(f"release {version} ends", lambda: next(
            (s for s in self.statuses_for(servers, version) if s.get("state") in ("done", "failed")), None), 600)
        running, status = self.booted(board)
        if final["state"] == "done":
            if running != version or status.get("booted") != other:
                raise BoardError(f"{version} reported done but slot {status.get('booted')} runs {running}")
        elif running != running_version or status.get("booted") != running_slot:
            raise BoardError(f"{version} reported failed but slot {status.get('booted')} runs {running}")
        self.ok(f"release {version} through {len(self.cuts)} cuts so far: {final['state']} "
                f"({final.get('reason', '')}), slot {status.get('booted')} runs {running}")
        self.add_app(board)
        return status.get("booted")

    # -- the strict form (test 5): only what the guest had flushed survives -----------------

    SETTLED = (None, "idle", "done", "failed", "superseded")

    def settle(self, board, timeout=1200):
        """Waits until no update is under way (the board may reboot meanwhile: the update asks
        for it); returns the phase."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                phase = self.phase(board)
                if phase in self.SETTLED:
                    return phase
                time.sleep(5)
            except BoardError:
                board.boot(900)  # it went down by itself: an update's reboot
        raise BoardError(f"the update did not settle within {timeout} s")

    def strict(self, network, servers, share):
        """A telemetry burst and a whole update with every write and flush the guest makes
        logged (qemu's blklogwrites); then the disk is rebuilt at flush points spread over the
        log (everything written before the flush, nothing after: what a power cut at that
        moment leaves on a disk that honours flushes) and booted: a whole slot boots, the update
        settles consistently, nothing handed over is lost or doubled, nothing is set aside."""
        work = self.work
        with Board(self.arch, self.cache, work, network, share=share, name="strict-setup.qcow2") as board:
            self.first_boot(board, servers)
            board.run("sync")
        base = os.path.join(work, "strict-base.raw")
        subprocess.run(["qemu-img", "convert", "-O", "raw", os.path.join(work, "strict-setup.qcow2"), base], check=True)
        log = os.path.join(work, "writes.log")
        open(log, "wb").close()
        with Board(self.arch, self.cache, work, network, share=share, base=base, log_writes=log,
                   name="strict-logged.qcow2") as board:
            board.boot()
            board.console.sendall(b"setpriv --reuid=app --regid=app --init-groups /data/bin/writer 100 100 &\n")
            self.release(servers, "2.0.0", "good")
            slot = board.reboot_seen(timeout=900)
            self.wait_state(servers, "2.0.0", "done", 300)
            self.check_points(servers, board, f"logged run (update to 2.0.0 in slot {slot})")
            board.run("sync")
        sector_size, entries = read_write_log(log)
        flushes = [index for index, _, _, flags, _ in entries if flags & LOG_FLUSH]
        written = sum(n for _, _, n, flags, _ in entries if not flags & (LOG_FLUSH | LOG_DISCARD)) * sector_size
        print(f"   log: {len(entries)} entries, {len(flushes)} flushes, {written >> 20} MiB written", flush=True)
        # Spread over the log: one flush at random in each of N equal stretches.
        count = min(self.args.strict_points, len(flushes))
        picks = [random.choice(flushes[len(flushes) * i // count:len(flushes) * (i + 1) // count]) for i in range(count)]
        for number, flush in enumerate(picks, 1):
            image = os.path.join(work, "replay.raw")
            overlay = os.path.join(work, "replay.qcow2")
            for path in (image, overlay):
                if os.path.exists(path):
                    os.unlink(path)
            replay_writes(log, base, image, flush)
            with Board(self.arch, self.cache, work, network, share=share, base=image, name="replay.qcow2") as board:
                slot = board.boot()
                board.run("systemctl is-active fire-agent", timeout=120)
                phase = self.settle(board)
                running, status = self.booted(board)
                state = board.run(f"cat {self.STATE} 2>/dev/null || true")
                if phase == "done" and '"2.0.0"' in state and running != "2.0.0":
                    raise BoardError(f"flush {flush}: 2.0.0 done but {running} runs")
                if phase == "failed" and running == "2.0.0":
                    raise BoardError(f"flush {flush}: 2.0.0 failed but runs")
                self.nothing_set_aside(board, f"flush {flush}")
                self.check_points(servers, board, f"disk at flush {flush} of {len(entries)} ({number}/{count}): "
                                  f"booted {slot}, settled with slot {status.get('booted')} running {running}, "
                                  f"update {phase}")
        self.ok(f"strict form: the disk rebuilt at {count} flushes of {len(flushes)} and booted, each consistent")

    def measure(self, board):
        """The agent under systemd on the board: its memory, the package's size."""
        pid = board.run("systemctl show -p MainPID --value fire-agent").strip()
        status = board.run(f"grep -E '^(VmRSS|RssAnon|RssFile|VmHWM):' /proc/{pid}/status")
        for line in status.splitlines():
            name, _, value = line.partition(":")
            self.figures[f"agent {name} under systemd"] = value.strip()
        self.figures["cgroup memory (systemctl MemoryCurrent)"] = board.run(
            "systemctl show -p MemoryCurrent --value fire-agent").strip() + " bytes"
        self.figures["package installed size"] = board.run(
            "dpkg-query -W -f='${Installed-Size}' fire-agent").strip() + " KiB"
        self.figures["package (.deb)"] = f"{os.path.getsize(self.args.deb)} bytes"

    def main(self):
        if self.args.strict:
            with Network() as network, Servers(network, self.work) as servers:
                self.strict(network, servers, self.share())
            print(f"{self.passed} passed, 0 failed", flush=True)
            return
        with Network() as network, Servers(network, self.work) as servers:
            share = self.share()
            with Board(self.arch, self.cache, self.work, network, share=share) as board:
                self.first_boot(board, servers)
                self.good_update(board, servers, "2.0.0", "B")
                time.sleep(30)  # a daemon that has run its first minute, as bench/board-rss.sh waits
                self.measure(board)
                self.power_cut_telemetry(board, servers, 100)
                if self.args.full:
                    self.unhealthy_update(board, servers, "3.0.0", "B")
                    self.panicking_update(board, servers, "4.0.0", "B")
                    self.cuts = []
                    self.cuts_during_telemetry(board, servers, self.args.telemetry_cuts)
                    version = 5
                    for plan in [(3, False, 2), (2, True, 0), (0, True, 0), (1, False, 2), (0, True, 0), (2, False, 2),
                                 (0, True, 0)]:
                        self.cuts_during_update(board, servers, f"{version}.0.0", *plan)
                        version += 1
                    # At least 20 in all (a download that ended before its planned cut is made up for).
                    self.cuts_during_telemetry(board, servers, max(self.args.telemetry_cuts, 20 - len(self.cuts)))
                    kinds = {k: self.cuts.count(k) for k in sorted(set(self.cuts))}
                    missing = {"telemetry", "download", "install", "commit"} - set(kinds)
                    if missing:
                        raise BoardError(f"no power cut during {', '.join(sorted(missing))} ({kinds})")
                    self.ok(f"{len(self.cuts)} power cuts ({kinds}): nothing lost, nothing stored twice, "
                            "no update half-installed, nothing set aside")
        for name, value in self.figures.items():
            print(f"figure: {name}: {value}", flush=True)
        print(f"{self.passed} passed, 0 failed", flush=True)


def main():
    # A SIGTERM (CI's timeout) unwinds like an error: the board is powered off, the servers and
    # the network namespace go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser()
    parser.add_argument("arch", choices=["armv7", "aarch64"])
    parser.add_argument("--cache", default=os.environ.get("TINYFIRE_BOARD_CACHE", "/var/cache/tinyfire-board"))
    parser.add_argument("--work")
    parser.add_argument("--deb")
    parser.add_argument("--full", action="store_true",
                        help="also a release that fails its health check and one whose kernel panics")
    parser.add_argument("--strict", action="store_true",
                        help="the strict form alone: writes logged through a telemetry burst and an update, "
                             "the disk rebuilt at flush points and booted")
    parser.add_argument("--strict-points", type=int, default=12, help="flush points the strict form boots")
    parser.add_argument("--telemetry-cuts", type=int, default=3, help="power cuts in each telemetry round of --full")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (console log, disk) after a pass")
    args = parser.parse_args()
    args.work = args.work or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tinyfire-board-{args.arch}-{os.getpid()}")
    os.makedirs(args.work, exist_ok=True)
    if not args.deb:
        binary = os.path.join(PROJECT, ".build-embedded", args.arch, "fire-agent")
        args.deb = subprocess.run(
            [os.path.join(PROJECT, "packaging/build-deb.sh"), DEBIAN_ARCH[args.arch], binary, args.work],
            check=True, capture_output=True, text=True).stdout.strip()
    try:
        Run(args).main()
    except BoardError as error:
        print(f"board test failed: {error} (console and servers' logs in {args.work})", flush=True)
        print("0 passed, 1 failed", flush=True)
        sys.exit(1)
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
