import FireAgent
import Foundation
import Testing

/// The link and the hour, end to end: `firmware.installWindow` with the board's time zone
/// moved (TZ, to the second), `firmware.inhibitFile` locked by a test process, and
/// `firmware.avoidInterfaces` with the agent in a network namespace whose route to the server
/// runs over an interface named as a modem (`wwan0`) or over another one (`eth1`).
extension FirmwareUpdateTests {
    /// A TZ that makes the local time now `second` seconds past a minute, and that local time.
    func zone(secondOfMinute second: Int) -> (tz: String, minute: Int) {
        let utc = Int(Date().timeIntervalSince1970) % 86400
        let shift = ((second - utc % 60) % 60 + 60) % 60
        // POSIX TZ: a name, then the offset west of UTC: negative is east (local = UTC + shift).
        return (String(format: "FAT-00:00:%02d", shift), ((utc + shift) % 86400) / 60)
    }

    func clock(_ minute: Int) -> String { String(format: "%02d:%02d", (minute / 60) % 24, minute % 60) }

    @Test("installWindow: verified outside the window, the install waits (status, report), and starts once the window opens")
    func installWindowWaits() async throws {
        let (server, board) = try setUp("window", running: "9.0.0")
        defer { server.remove() }
        try server.publish(version: "9.1.0", image: FirmwareServer.image(size: 256 << 10, seed: 91))
        // Local time is hh:mm:25 now: the window opens at the next minute, 35 s from now (under
        // an emulator, where the agent needs longer to get there, two minutes later).
        let (tz, minute) = zone(secondOfMinute: 25)
        let opens = minute + (SpoolBigFileTests.emulated ? 3 : 1)
        let window = "\(clock(opens))-\(clock(opens + 10))"
        let config = try board.writeConfig(
            server: server, extra: #"installWindow: ["\#(window)"], reboot: ["\#(board.directory)/reboot.sh"],"#)
        let agent = try startAgent(board, config: config, environment: ["TZ": tz])
        defer { agent.stop() }
        #expect(
            await eventually(within: .seconds(150)) {
                board.firmware?.waiting == "outside firmware.installWindow (\(window))"
            }, "\(String(describing: board.firmware)) \(log(board))")
        // The local time is in the log line, not in the note (which would change every minute,
        // each change a report and a state write).
        #expect(log(board).contains("localTime="), "\(log(board))")
        #expect(board.firmware?.phase == "verifying" && board.installs.isEmpty, "installed outside the window: \(board.calls)")
        #expect(
            await eventually(within: .seconds(30)) {
                server.statusEvents().contains { ($0["reason"] as? String)?.hasPrefix("waiting: outside firmware.installWindow") == true }
            }, "\(server.statusEvents())")
        #expect(await reach("installed", version: "9.1.0", board, agent, within: .seconds(240)), "\(log(board))")
        // The agent records `installed` first, then runs the reboot command.
        #expect(
            await eventually(within: .seconds(30)) {
                board.calls == ["install \(board.directory)/firmware/staging/image.bin 9.1.0", "reboot"]
            }, "\(board.calls)")
        #expect(board.firmware?.waiting == nil)
        #expect(stopAgent(agent) == 0)
    }

    @Test("inhibitFile: while the application holds its lock no install starts, nor the reboot a one-shot cycle asks for again")
    func inhibitLockHolds() async throws {
        let (server, board) = try setUp("inhibit", running: "9.0.0")
        defer { server.remove() }
        try server.publish(version: "9.2.0", image: FirmwareServer.image(size: 256 << 10, seed: 92))
        let lockPath = board.directory + "/app.lock"
        let config = try board.writeConfig(
            server: server, extra: #"inhibitFile: "\#(lockPath)", reboot: ["\#(board.directory)/reboot.sh"],"#)
        // The application's critical work: a shared lock held by this process.
        var held = open(lockPath, O_RDWR | O_CREAT, 0o644)
        #expect(held >= 0 && flock(held, LOCK_SH) == 0)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(
            await eventually(within: .seconds(60)) {
                board.firmware?.waiting == "\(lockPath) is locked by the application (firmware.inhibitFile)"
            }, "\(String(describing: board.firmware)) \(log(board))")
        try await Task.sleep(for: .seconds(6))
        #expect(board.installs.isEmpty && board.firmware?.phase == "verifying", "\(board.calls)")
        close(held)
        #expect(await reach("installed", version: "9.2.0", board, agent, within: .seconds(60)), "\(log(board))")
        #expect(board.calls == ["install \(board.directory)/firmware/staging/image.bin 9.2.0", "reboot"], "\(board.calls)")
        #expect(stopAgent(agent) == 0)

        // Not rebooted yet; the lock taken again: a cycle asks for the reboot, which waits.
        held = open(lockPath, O_RDWR, 0o644)
        #expect(flock(held, LOCK_EX) == 0)
        var (status, output) = try once(config)
        #expect(status == 10 && output.contains("the reboot waits: \(lockPath) is locked"), "\(status) \(output)")
        #expect(board.calls.filter { $0 == "reboot" }.count == 1, "\(board.calls)")
        close(held)
        (status, output) = try once(config)
        #expect(status == 10 && board.calls.filter { $0 == "reboot" }.count == 2, "\(status) \(output) \(board.calls)")
    }

    /// `setpriv` arguments that run a root process as the shipped unit does: no capabilities
    /// (without `CAP_DAC_OVERRIDE`, root opens only what its mode bits give it).
    func withoutCapabilities(_ arguments: [String]) -> [String] {
        [which("setpriv") ?? "/usr/bin/setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--"] + arguments
    }

    @Test(
        "inhibitFile the agent cannot open (the application's 0600 file, no CAP_DAC_OVERRIDE): the install waits, the reason in the status and logged once; config check names it"
    )
    func inhibitLockUnreadable() async throws {
        let (server, board) = try setUp("inhibit-eacces", running: "9.0.0")
        defer { server.remove() }
        try server.publish(version: "9.4.0", image: FirmwareServer.image(size: 256 << 10, seed: 94))
        // The application runs as a user of its own: its lock file is 0600, in a directory of its own.
        let (uid, gid) = try SpoolAttacker.ids()
        let appDirectory = "/tmp/tf-inhibit-\(getpid())"
        try? FileManager.default.removeItem(atPath: appDirectory)
        try FileManager.default.createDirectory(atPath: appDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: appDirectory) }
        #expect(chown(appDirectory, uid, gid) == 0 && chmod(appDirectory, 0o755) == 0)
        let lockPath = appDirectory + "/update.lock"
        try SpoolAttacker.run(["/bin/sh", "-c", "umask 077 && : > '\(lockPath)'"])
        // It holds the lock (its critical work) as its own user.
        let holding = try SpoolAttacker.command([which("flock") ?? "/usr/bin/flock", "--shared", lockPath, "sleep", "600"])
        let holder = try ChildProcess(holding[0], Array(holding.dropFirst()))
        defer { holder.stop() }
        #expect(
            await eventually(within: .seconds(30)) {
                let fd = open(lockPath, O_RDONLY)
                defer { close(fd) }
                return fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0
            }, "the application never took its lock")
        let config = try board.writeConfig(
            server: server, extra: #"inhibitFile: "\#(lockPath)", reboot: ["\#(board.directory)/reboot.sh"],"#)
        // The agent as the shipped unit runs it: uid 0 without capabilities.
        let command = withoutCapabilities([try fireAgentPath(), "run", "--config", config])
        let agent = try ChildProcess(
            command[0], Array(command.dropFirst()), environment: inherited(), stdout: .file(board.directory + "/log"),
            stderr: .file(board.directory + "/log"))
        defer { agent.stop() }
        let reason = "\(lockPath) cannot be opened: Permission denied: firmware.inhibitFile is taken as locked until the agent can tell"
        #expect(
            await eventually(within: .seconds(60)) { board.status?.pid == agent.pid && board.firmware?.waiting == reason },
            "\(String(describing: board.firmware)) \(log(board))")
        // Past the gate's next check (every 15 s): still waiting, nothing installed, said once.
        try await Task.sleep(for: .seconds(17))
        #expect(board.installs.isEmpty && board.firmware?.phase == "verifying", "installed past the application's lock: \(board.calls)")
        #expect(board.firmware?.reason == "waiting: " + reason, "\(String(describing: board.firmware))")
        let warnings = log(board).components(separatedBy: "\n").filter { $0.contains("firmware.inhibitFile cannot be judged") }
        #expect(warnings.count == 1 && warnings.first?.contains(lockPath) == true, "\(warnings)")
        #expect(warnings.first?.contains("Permission denied") == true, "\(warnings)")

        // `config check` says it, run as the agent runs; as root with its capabilities, not.
        let checkCommand = withoutCapabilities([try fireAgentPath(), "config", "check", config])
        let check = try runCapturingOutput(checkCommand[0], Array(checkCommand.dropFirst()))
        #expect(check.status == 0, "\(check.stderr)")
        #expect(
            check.stderr.contains("warning: firmware.inhibitFile: \(lockPath) cannot be opened: Permission denied (uid 0)"),
            "\(check.stderr)")
        let privileged = try fireAgent(["config", "check", config])
        #expect(privileged.status == 0 && !privileged.stderr.contains("inhibitFile"), "\(privileged.stderr)")

        // The application makes its file readable: the agent sees its lock; once released, it installs.
        #expect(chmod(lockPath, 0o644) == 0)
        #expect(
            await eventually(within: .seconds(40)) {
                board.firmware?.waiting == "\(lockPath) is locked by the application (firmware.inhibitFile)"
            }, "\(String(describing: board.firmware))")
        holder.stop()
        #expect(await reach("installed", version: "9.4.0", board, agent, within: .seconds(60)), "\(log(board))")
        #expect(board.installs.count == 1, "\(board.calls)")
        #expect(stopAgent(agent) == 0)
    }

    @Test(
        "avoidInterfaces: over wwan0 the image waits while polls and telemetry go on; over eth1 it downloads; back on wwan0 it pauses; then resumes with a Range"
    )
    func avoidCellular() async throws {
        let namespace = try NetworkNamespace()
        defer { namespace.close() }
        // The namespace's first link is the modem: renamed wwan0 (typed cellular by its name).
        try namespace.inside(["link", "set", namespace.innerInterface, "down"])
        try namespace.inside(["link", "set", namespace.innerInterface, "name", "wwan0"])
        try namespace.inside(["link", "set", "wwan0", "up"])
        // A second link, eth1, on another subnet.
        let pid = Int(getpid()) % 100_000
        let hostEth = "tfe\(pid)"
        let subnet = "10.250.\(pid % 250)"
        _ = try? runIP(["link", "del", hostEth])
        try runIP(["link", "add", hostEth, "type", "veth", "peer", "name", "eth1", "netns", namespace.name])
        defer { _ = try? runIP(["link", "del", hostEth]) }
        try runIP(["addr", "add", "\(subnet).1/24", "dev", hostEth])
        try runIP(["link", "set", hostEth, "up"])
        try namespace.inside(["addr", "add", "\(subnet).2/24", "dev", "eth1"])
        try namespace.inside(["link", "set", "eth1", "up"])

        let server = try FirmwareServer("avoid", address: namespace.hostAddress)
        defer { server.remove() }
        try server.vendor.makeEC("ec")
        let board = try FakeBoard(in: server.vendor.directory + "/board", version: "9.0.0")
        let image = FirmwareServer.image(size: 3 << 20, seed: 93)
        try server.publish(version: "9.3.0", image: image)
        let config = try board.writeConfig(
            server: server, extra: #"avoidInterfaces: ["cellular"], maxBytesPerSecond: "256KiB", lowSpeedBytesPerSecond: "1KiB","#)
        let agent = try ChildProcess(
            which("ip") ?? "/usr/sbin/ip", ["netns", "exec", namespace.name, try fireAgentPath(), "run", "--config", config],
            environment: inherited(),
            stdout: .file(board.directory + "/log"), stderr: .file(board.directory + "/log"))
        defer { agent.stop() }
        let host = namespace.hostAddress
        #expect(
            await eventually(within: .seconds(60)) {
                board.firmware?.waiting == "the route to \(host) runs over wwan0 (cellular), in firmware.avoidInterfaces"
            }, "\(String(describing: board.firmware)) \(log(board))")
        // Telemetry goes on: a spool file is delivered while the image waits.
        let ingestBefore = server.accessLines(containing: "/ingest/").count
        try "wait_probe v=1i 1700000000000000000\n".write(toFile: board.directory + "/spool/probe.lp", atomically: true, encoding: .utf8)
        #expect(await eventually(within: .seconds(30)) { server.accessLines(containing: "/ingest/").count > ingestBefore })
        #expect(server.accessLines(containing: "/image.bin").isEmpty, "fetched over the modem")
        #expect(server.accessLines(containing: "/manifest.json").count >= 2, "polls stopped")

        // The route moves to eth1: the download starts (at once: the route change is an event).
        try namespace.inside(["route", "add", "\(host)/32", "dev", "eth1"])
        #expect(await eventually(within: .seconds(30)) { partialBytes(board) > 256 << 10 }, "\(log(board))")
        // The status file follows within a write or two.
        #expect(await eventually(within: .seconds(30)) { board.firmware?.waiting == nil }, "\(String(describing: board.firmware))")
        // Back over the modem: it pauses (checked every 2 s), the bytes stay.
        try namespace.inside(["route", "del", "\(host)/32", "dev", "eth1"])
        #expect(await eventually(within: .seconds(30)) { board.firmware?.waiting != nil }, "\(String(describing: board.firmware))")
        let paused = partialBytes(board)
        try await Task.sleep(for: .seconds(3))
        #expect(partialBytes(board) == paused && paused < image.count, "still downloading over the modem: \(paused)")
        // eth1 again: it goes on from there and installs the exact image.
        try namespace.inside(["route", "add", "\(host)/32", "dev", "eth1"])
        #expect(await reach("installed", version: "9.3.0", board, agent, within: .seconds(120)), "\(log(board))")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        #expect(resumedRequest(server).contains { $0.contains("\"bytes=") }, "\(server.accessLines(containing: "/image.bin"))")
        let states = server.statusEvents().compactMap { $0["reason"] as? String }.filter { $0.hasPrefix("waiting: the route") }
        #expect(states.count >= 2, "each wait reported: \(server.statusEvents())")
    }
}
