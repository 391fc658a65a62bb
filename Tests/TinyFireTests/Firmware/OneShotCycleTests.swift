import FireAgent
import Foundation
import Testing

/// `fire-agent firmware update --once`: the daemon's flow, one cycle at a time, with an exit
/// status that says what it came to.
extension FirmwareUpdateTests {
    /// One cycle: (exit status, stdout and stderr together).
    func once(_ config: String) throws -> (Int32, String) {
        let result = try fireAgent(["firmware", "update", "--once", "--config", config], environment: inherited())
        return (result.status, String(decoding: result.stdout, as: UTF8.self) + result.stderr)
    }

    /// The adversarial releases a one-shot cycle must refuse (12) or fail (13), each with the
    /// reason its output must name: (name, publish it, exit status, reason).
    func adversarialReleases(_ server: FirmwareServer, image: Data) -> [(String, () throws -> Void, Int32, String)] {
        [
            ("another key", { try server.publish(version: "3.0.1", image: image, key: "stranger") }, 12, "badSignature: "),
            ("no signature", { try server.publish(version: "3.0.2", image: image, signature: false) }, 12, "badSignature: "),
            ("expired", { try server.publish(version: "3.0.3", image: image, expires: "2020-01-01T00:00:00Z") }, 12, "expired: "),
            ("incompatible", { try server.publish(version: "3.0.4", image: image, compatible: ["other-board"]) }, 12, "incompatible: "),
            ("older", { try server.publish(version: "1.9.0", image: image) }, 12, "notNewer: 1.9.0 is not newer than 2.0.0"),
            ("size", { try server.publish(version: "3.0.5", image: image, size: image.count + 1) }, 13, "sizeMismatch: "),
            (
                "oversize", { try server.publish(version: "3.0.6", image: image, size: image.count - 1) }, 13,
                "sizeMismatch: the server sends more"
            ),
            (
                "hash", { try server.publish(version: "3.0.7", image: image, sha256: String(repeating: "0", count: 64)) }, 13,
                "hashMismatch: "
            ),
            ("gone", { try server.publish(version: "3.0.8", image: image, name: "gone.bin", writeImage: false) }, 13, "the image http"),
        ]
    }

    @Test(
        "one-shot cycles: installed (10) and asked to reboot again until it happens, committed after the health check (11), then up to date (0)"
    )
    func oneShotUpdate() async throws {
        let (server, board) = try setUp("once", running: "8.0.0")
        defer { server.remove() }
        try server.publish(version: "8.1.0", image: FirmwareServer.image(size: 512 << 10, seed: 81))
        let config = try board.writeConfig(server: server, extra: board.confirmationSection(attempts: 2))

        var (status, output) = try once(config)
        #expect(status == 10 && output.contains("8.1.0 installed: the reboot command ran"), "\(status) \(output)")
        #expect(board.calls == ["install \(board.directory)/firmware/staging/image.bin 8.1.0", "reboot"], "\(board.calls)")
        // Not rebooted yet: installed still, the reboot asked for again, the installer not run again.
        (status, output) = try once(config)
        #expect(status == 10 && board.installs.count == 1 && board.calls.last == "reboot", "\(status) \(output) \(board.calls)")

        try board.handleReboot(fallback: "8.0.0")
        (status, output) = try once(config)
        #expect(status == 11 && output.contains("8.1.0 committed"), "\(status) \(output)")
        #expect(board.calls.suffix(2) == ["health 8.1.0", "commit"], "\(board.calls)")
        (status, output) = try once(config)
        #expect(status == 0 && output.contains("up to date"), "\(status) \(output)")
        #expect(board.calls.filter { $0 == "commit" }.count == 1)
        // Every step reported, in order, by the cycles that made them.
        #expect(
            server.statusEvents().compactMap { $0["state"] as? String }.filter { $0 != "confirming" }
                == ["downloading", "verifying", "installing", "installed", "done"], "\(server.statusEvents())")
    }

    @Test(
        "firmware.commitEveryStart: the running version is committed at each start while no update awaits confirmation, never while one does"
    )
    func commitEveryStart() throws {
        let (server, board) = try setUp("bless", running: "8.0.0")
        defer { server.remove() }
        try server.publish(version: "8.0.0", image: FirmwareServer.image(size: 64 << 10, seed: 80))
        let config = try board.writeConfig(
            server: server, extra: board.confirmationSection(attempts: 2) + "commitEveryStart: true,")
        // Nothing to do: the running 8.0.0 is marked good (RAUC would give its slot its attempts back).
        var (status, output) = try once(config)
        #expect(status == 0 && board.calls == ["commit"], "\(status) \(output) \(board.calls)")
        try server.publish(version: "8.1.0", image: FirmwareServer.image(size: 512 << 10, seed: 81))
        (status, output) = try once(config)
        let install = "install \(board.directory)/firmware/staging/image.bin 8.1.0"
        #expect(status == 10 && board.calls.suffix(3) == ["commit", install, "reboot"], "\(status) \(output) \(board.calls)")
        // Installed, not yet rebooted; then booted and not yet confirmed: no commit at start.
        (status, output) = try once(config)
        #expect(status == 10 && board.calls.last == "reboot", "\(status) \(output) \(board.calls)")
        try board.handleReboot(fallback: "8.0.0")
        try board.setHealth("fail")
        (status, output) = try once(config)
        #expect(
            board.calls.filter { $0 == "commit" }.count == 2 && board.calls.suffix(2) == ["rollback", "reboot"],
            "\(status) \(output) \(board.calls)")
        // Rolled back into 8.0.0: that one is the good one again.
        try board.handleReboot(fallback: "8.0.0")
        (status, output) = try once(config)
        #expect(status == 14 && board.calls.last == "commit", "\(status) \(output) \(board.calls)")
        #expect(board.calls.filter { $0 == "commit" }.count == 3, "\(board.calls)")
        // Without a commit command the key is a config problem.
        let uncommitted = try board.writeConfig(
            server: server, extra: "commitEveryStart: true,", commands: "install: [\"\(board.directory)/install.sh\", \"{file}\"],")
        let refused = try fireAgent(["config", "check", "--config", uncommitted])
        #expect(refused.status != 0 && refused.stderr.contains("commitEveryStart: needs a commit command"), "\(refused.stderr)")
    }

    @Test("one-shot cycles against the adversarial releases: each refused (12) or failed (13) with its reason, the installer never runs")
    func oneShotAdversarial() throws {
        let (server, board) = try setUp("once-bad", running: "2.0.0")
        defer { server.remove() }
        try server.vendor.makeEC("stranger")
        let image = FirmwareServer.image(size: 256 << 10, seed: 3)
        let config = try board.writeConfig(server: server)
        let cases = adversarialReleases(server, image: image)
        for (name, publish, expected, reason) in cases {
            try publish()
            let (status, output) = try once(config)
            #expect(status == expected && output.contains(reason), "\(name): \(status) \(output)")
        }
        #expect(board.installs.isEmpty, "\(board.calls)")
        // The same version as the one running: nothing to do.
        try server.publish(version: "2.0.0", image: image)
        let (status, output) = try once(config)
        #expect(status == 0 && output.contains("up to date (2.0.0 runs)"), "\(status) \(output)")
        // The server down: not finished, try later.
        server.stop()
        let (down, text) = try once(config)
        #expect(down == 75 && text.contains("the update server was not reached"), "\(down) \(text)")
    }

    @Test("one-shot rollback: a failing health check rolls back (14); after the reboot the rollback is reported (14), then nothing (0)")
    func oneShotRollback() throws {
        let (server, board) = try setUp("once-rollback", running: "8.0.0")
        defer { server.remove() }
        try server.publish(version: "8.2.0", image: FirmwareServer.image(size: 256 << 10, seed: 82))
        try board.setHealth("fail")
        let config = try board.writeConfig(server: server, extra: board.confirmationSection(attempts: 2))
        #expect(try once(config).0 == 10)
        try board.handleReboot(fallback: "8.0.0")
        var (status, output) = try once(config)
        #expect(status == 14 && output.contains("the health check failed 2 times"), "\(status) \(output)")
        #expect(board.calls.suffix(4) == ["health 8.2.0", "health 8.2.0", "rollback", "reboot"], "\(board.calls)")
        try board.handleReboot(fallback: "8.0.0")
        (status, output) = try once(config)
        #expect(status == 14 && output.contains("rolled back: 8.0.0 runs again after 8.2.0 failed"), "\(status) \(output)")
        (status, output) = try once(config)
        #expect(status == 0, "\(status) \(output)")
        #expect(board.installs.count == 1 && board.calls.filter { $0 == "rollback" }.count == 1)
    }

    @Test("the daemon and a one-shot cycle never run the flow at once: each refuses while the other holds it, naming its PID")
    func oneShotExclusion() async throws {
        let (server, board) = try setUp("once-lock", running: "8.0.0")
        defer { server.remove() }
        let config = try board.writeConfig(server: server)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await eventually(within: .seconds(120)) { board.firmware?.lastCheck != nil }, "\(log(board))")
        let (status, output) = try once(config)
        #expect(status == 16 && output.contains("another fire-agent (PID \(agent.pid)) runs the firmware flow"), "\(status) \(output)")
        #expect(stopAgent(agent) == 0)

        // A one-shot cycle whose health check hangs holds the flow; the daemon started
        // meanwhile runs telemetry, and firmware only once the cycle ended.
        try server.publish(version: "8.3.0", image: FirmwareServer.image(size: 256 << 10, seed: 83))
        let hanging = try board.writeConfig(server: server, extra: board.confirmationSection(attempts: 1, timeout: "6s"))
        #expect(try once(hanging).0 == 10)
        try board.handleReboot(fallback: "8.0.0")
        try board.setHealth("hang")
        let cycle = try ChildProcess(
            try fireAgentPath(), ["firmware", "update", "--once", "--config", hanging], environment: inherited(),
            stdout: .file(board.directory + "/once.log"), stderr: .file(board.directory + "/once.log"))
        #expect(await eventually(within: .seconds(60)) { board.calls.last == "health 8.3.0" }, "\(board.calls)")
        let daemon = try startAgent(board, config: hanging)
        defer { daemon.stop() }
        #expect(
            await eventually(within: .seconds(60)) {
                guard let status = board.status, status.pid == daemon.pid, let firmware = status.firmware else { return false }
                return firmware.phase == "unavailable" && firmware.reason?.contains("another fire-agent (PID \(cycle.pid))") == true
            }, "\(String(describing: board.firmware)) \(log(board))")
        #expect(cycle.wait() == 14, "\((try? String(contentsOfFile: board.directory + "/once.log", encoding: .utf8)) ?? "")")
        #expect(board.calls.filter { $0 == "rollback" }.count == 1)
        #expect(stopAgent(daemon) == 0)
    }
}
