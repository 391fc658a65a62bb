import FireAgent
import Foundation
import Testing

/// The health gate end to end: fire-agent run on the fake board, whose health check passes,
/// fails or hangs, whose rollback marks the slot bad, and whose reboot command asks the test to
/// "reboot" it (stop the agent, boot the slot the bootloader would pick, start it again).
extension FirmwareUpdateTests {
    /// Starts the agent again and again — with `crashAt` until it exited there once, through
    /// every reboot it asks for — until its update is done or failed.
    /// - Returns: whether it exited at `crashAt`.
    @discardableResult
    func drive(_ board: FakeBoard, config: String, fallback: String, crashAt: String? = nil, starts limit: Int = 8) async throws -> Bool {
        var exited = crashAt == nil
        for start in 1...limit {
            let agent = try startAgent(board, config: config, environment: exited ? [:] : ["FIRE_AGENT_FIRMWARE_EXIT_AT": crashAt ?? ""])
            defer { agent.stop() }
            var phase = ""
            let settled = await eventually(within: .seconds(120)) {
                if !agent.isRunning || board.rebootRequested { return true }
                guard let status = board.status, status.pid == agent.pid, let firmware = status.firmware else { return false }
                phase = firmware.phase
                return phase == "done" || phase == "failed"
            }
            #expect(settled, "start \(start) settled nowhere: \(log(board))")
            if !agent.isRunning {
                #expect(agent.wait() == 86 && !exited, "start \(start) ended unexpectedly: \(log(board))")
                exited = true
                continue
            }
            #expect(stopAgent(agent) == 0)
            if board.rebootRequested {
                try board.handleReboot(fallback: fallback)
                continue
            }
            return exited
        }
        Issue.record("not done after \(limit) starts: \(log(board))")
        return exited
    }

    @Test("a health check that fails once and then passes: the commit waits for it, then runs once; reported as passed")
    func healthCheckPasses() async throws {
        let (server, board) = try setUp("health-pass", running: "6.0.0")
        defer { server.remove() }
        try server.publish(version: "6.1.0", image: FirmwareServer.image(size: 256 << 10, seed: 61))
        try board.setHealth("fail 1")
        let config = try board.writeConfig(server: server, extra: board.confirmationSection(attempts: 3))
        try await drive(board, config: config, fallback: "6.0.0")
        #expect(board.firmware?.phase == "done" && board.firmware?.version == "6.1.0", "\(String(describing: board.firmware))")
        #expect(
            board.calls == [
                "install \(board.directory)/firmware/staging/image.bin 6.1.0", "reboot", "health 6.1.0", "health 6.1.0", "commit",
            ],
            "\(board.calls)")
        #expect(board.firmware?.highestAccepted == "6.1.0")
        #expect(
            await eventually(within: .seconds(60)) {
                server.statusEvents().contains { ($0["reason"] as? String) == "health check passed: exit 0: app is up" }
                    && server.statusEvents().last?["state"] as? String == "done"
            }, "\(server.statusEvents())")
        let failedAttempt = server.statusEvents().first {
            ($0["reason"] as? String)?.hasPrefix("health check attempt 1 of 3 failed") == true
        }
        #expect(failedAttempt?["state"] as? String == "confirming", "\(server.statusEvents())")
    }

    @Test(
        "a health check that fails (or hangs past its timeout) every attempt: rolled back once, reported with its output, never offered again",
        arguments: ["fail", "hang"])
    func healthCheckFailsAndRollsBack(mode: String) async throws {
        let (server, board) = try setUp("health-\(mode)", running: "6.0.0")
        defer { server.remove() }
        try server.publish(version: "6.1.0", image: FirmwareServer.image(size: 256 << 10, seed: 62))
        try board.setHealth(mode)
        let config = try board.writeConfig(server: server, extra: board.confirmationSection(attempts: 2, timeout: "1s"))
        try await drive(board, config: config, fallback: "6.0.0")
        let firmware = try #require(board.firmware)
        let last = mode == "fail" ? "exit 1: app is down (call 2)" : "timed out (killed)"
        #expect(firmware.phase == "failed" && firmware.version == "6.1.0")
        #expect(firmware.reason == "rolled back: 6.0.0 runs again after 6.1.0 failed (the health check failed 2 times, last: \(last))")
        #expect(firmware.highestAccepted == "6.0.0", "a rolled-back version is not the floor")
        #expect(
            board.calls == [
                "install \(board.directory)/firmware/staging/image.bin 6.1.0", "reboot", "health 6.1.0", "health 6.1.0", "rollback",
                "reboot",
            ], "\(board.calls)")
        if mode == "hang",
            let pid = Int32(
                (try? String(contentsOfFile: board.directory + "/health.pid", encoding: .utf8))?.trimmingCharacters(
                    in: .whitespacesAndNewlines) ?? "")
        {
            #expect(kill(pid, 0) != 0, "the hanging check was left running")
        }
        // Reported: rollingBack with the check's output, then the rollback, once.
        #expect(
            await eventually(within: .seconds(60)) { server.statusEvents().last?["reason"] as? String == firmware.reason },
            "\(server.statusEvents())")
        let states = server.statusEvents().compactMap { $0["state"] as? String }
        #expect(states.filter { $0 == "rollingBack" }.count == 1 && states.filter { $0 == "failed" }.count == 1, "\(states)")
        let rolling = server.statusEvents().first { $0["state"] as? String == "rollingBack" }
        #expect(rolling?["reason"] as? String == "the health check failed 2 times, last: \(last)")

        // The release is still served (a server that never learned): never downloaded or installed again.
        let before = server.accessLines(containing: "/image.bin").count
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(
            await eventually(within: .seconds(60)) {
                guard let status = board.status, status.pid == agent.pid else { return false }
                return (status.firmware?.lastCheckResult ?? "").hasPrefix("unchanged")
            }, "\(log(board))")
        #expect(server.accessLines(containing: "/image.bin").count == before)
        #expect(board.installs.count == 1 && board.calls.filter { $0 == "rollback" }.count == 1)
        #expect(stopAgent(agent) == 0)
    }

    @Test("a new version that passes its check but never reaches the server within firmware.confirmTimeout is rolled back")
    func confirmDeadline() async throws {
        let (server, board) = try setUp("deadline", running: "6.0.0")
        defer { server.remove() }
        try server.publish(version: "6.1.0", image: FirmwareServer.image(size: 256 << 10, seed: 63))
        let config = try board.writeConfig(
            server: server, extra: board.confirmationSection(attempts: 1, timeout: "1s", confirmTimeout: "3s"))
        var agent = try startAgent(board, config: config)
        #expect(await eventually(within: .seconds(120)) { board.rebootRequested }, "\(log(board))")
        #expect(stopAgent(agent) == 0)
        try board.handleReboot(fallback: "6.0.0")
        // The new version boots where the server cannot be reached.
        server.stop()
        agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await eventually(within: .seconds(120)) { board.rebootRequested }, "\(log(board))")
        #expect(board.calls.suffix(3) == ["health 6.1.0", "rollback", "reboot"], "\(board.calls)")
        #expect(
            await eventually(within: .seconds(30)) {
                board.firmware?.phase == "rollingBack"
                    && board.firmware?.reason == "not confirmed within 3s: no sync with the server succeeded"
            }, "\(String(describing: board.firmware))")
        #expect(stopAgent(agent) == 0)
        try board.handleReboot(fallback: "6.0.0")
        try server.start()
        try await drive(board, config: config, fallback: "6.0.0")
        #expect(
            board.firmware?.phase == "failed"
                && board.firmware?.reason
                    == "rolled back: 6.0.0 runs again after 6.1.0 failed (not confirmed within 3s: no sync with the server succeeded)",
            "\(String(describing: board.firmware))")
        #expect(!board.calls.contains("commit"))
    }

    @Test(
        "the agent killed at every new step of the confirmation: the installer ran once, the rollback at most once, the flow ends where it must",
        arguments: [
            ("confirming", "pass"), ("health-check", "pass"), ("healthy", "pass"), ("rollingBack", "fail"), ("rollback-started", "fail"),
            ("rollback-running", "fail"), ("rollback-exited", "fail"),
        ])
    func exitAtEveryConfirmationStep(step: String, health: String) async throws {
        let (server, board) = try setUp("exit-\(step)", running: "7.0.0")
        defer { server.remove() }
        try server.publish(version: "7.1.0", image: FirmwareServer.image(size: 256 << 10, seed: 71))
        try board.setHealth(health)
        let config = try board.writeConfig(server: server, extra: board.confirmationSection(attempts: 1, timeout: "2s"))
        let exited = try await drive(board, config: config, fallback: "7.0.0", crashAt: step)
        #expect(exited, "the agent never stopped at \(step)")
        let firmware = try #require(board.firmware)
        #expect(board.installs.count == 1, "\(board.calls)")
        let rollbacks = board.calls.filter { $0 == "rollback" }.count
        switch (step, health) {
        case (_, "pass"):
            #expect(firmware.phase == "done" && board.calls.last == "commit" && rollbacks == 0, "\(board.calls) \(log(board))")
        case ("rollback-started", _):
            // Marked started, stopped before the command ran: it never runs; the reboot brings
            // back the new version, uncommitted, and says so.
            #expect(rollbacks == 0, "\(board.calls)")
            #expect(firmware.phase == "failed" && firmware.reason?.hasPrefix("the rollback did not take: 7.1.0 still runs") == true)
        default:
            #expect(rollbacks == 1, "\(board.calls)")
            #expect(firmware.phase == "failed" && firmware.reason?.hasPrefix("rolled back: 7.0.0 runs again after 7.1.0 failed") == true)
        }
        #expect(!board.calls.contains("commit") || health == "pass")
    }
}
