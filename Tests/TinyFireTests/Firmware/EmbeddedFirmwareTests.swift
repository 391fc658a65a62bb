import FireAgent
import Foundation
import Testing

/// Firmware updates by the Embedded fire-agent (x86_64 natively, armv7 and aarch64 under
/// qemu-user) against nginx serving openssl-signed manifests, on the fake board: what
/// FirmwareUpdateTests and OneShotCycleTests ask of the full-Swift binary, with the same fixtures
/// and expected texts, and `firmware verify` compared byte for byte with the host's.
@Suite(
    "the Embedded fire-agent's firmware updates (armv7 and aarch64 under qemu) against nginx: cycle, daemon, refusals, verify", .serialized)
struct EmbeddedFirmwareTests {
    /// FirmwareUpdateTests' fixtures, waits and environment.
    let host = FirmwareUpdateTests()

    func once(_ agent: EmbeddedAgent, _ config: String) throws -> (Int32, String) {
        let result = try agent.run(["firmware", "update", "--once", "--config", config], environment: host.inherited())
        return (result.status, String(decoding: result.stdout, as: UTF8.self) + result.stderr)
    }

    @Test(
        "firmware update --once: installed (10) and the reboot asked again until it happens, committed after the health check (11), then up to date (0); every step reported",
        arguments: EmbeddedAgent.all)
    func oneShot(_ agent: EmbeddedAgent) throws {
        let (server, board) = try host.setUp("emb-once-\(agent.arch)", running: "8.0.0")
        defer { server.remove() }
        let image = FirmwareServer.image(size: 512 << 10, seed: 81)
        try server.publish(version: "8.1.0", image: image)
        let config = try board.writeConfig(server: server, extra: board.confirmationSection(attempts: 2))

        var (status, output) = try once(agent, config)
        #expect(status == 10 && output.contains("8.1.0 installed: the reboot command ran"), "\(status) \(output)")
        #expect(board.calls == ["install \(board.directory)/firmware/staging/image.bin 8.1.0", "reboot"], "\(board.calls)")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        (status, output) = try once(agent, config)
        #expect(status == 10 && board.installs.count == 1 && board.calls.last == "reboot", "\(status) \(output) \(board.calls)")

        try board.handleReboot(fallback: "8.0.0")
        (status, output) = try once(agent, config)
        #expect(status == 11 && output.contains("8.1.0 committed"), "\(status) \(output)")
        #expect(board.calls.suffix(2) == ["health 8.1.0", "commit"], "\(board.calls)")
        (status, output) = try once(agent, config)
        #expect(status == 0 && output.contains("up to date"), "\(status) \(output)")
        #expect(
            server.statusEvents().compactMap { $0["state"] as? String }.filter { $0 != "confirming" }
                == ["downloading", "verifying", "installing", "installed", "done"], "\(server.statusEvents())")
    }

    @Test(
        "firmware update --once against adversarial releases: each refused (12) or failed (13) with its reason, the installer never runs; the server down is 75",
        arguments: EmbeddedAgent.all)
    func adversarial(_ agent: EmbeddedAgent) throws {
        let (server, board) = try host.setUp("emb-bad-\(agent.arch)", running: "2.0.0")
        defer { server.remove() }
        try server.vendor.makeEC("stranger")
        let image = FirmwareServer.image(size: 256 << 10, seed: 3)
        let config = try board.writeConfig(server: server)
        let cases = host.adversarialReleases(server, image: image)
        for (name, publish, expected, reason) in cases {
            try publish()
            let (status, output) = try once(agent, config)
            #expect(status == expected && output.contains(reason), "\(name): \(status) \(output)")
        }
        #expect(board.installs.isEmpty, "\(board.calls)")
        server.stop()
        let (down, text) = try once(agent, config)
        #expect(down == 75 && text.contains("the update server was not reached"), "\(down) \(text)")
    }

    @Test(
        "run with a firmware section: downloaded, verified, installed once; after the reboot committed; SIGKILL mid-download resumes with a Range",
        arguments: EmbeddedAgent.all)
    func daemon(_ agent: EmbeddedAgent) async throws {
        let (server, board) = try host.setUp("emb-run-\(agent.arch)", running: "2.0.0")
        defer { server.remove() }
        // Slow enough to be killed in the middle (8 MiB at 1 MiB/s: 7 s to see it past 1 MiB).
        let image = FirmwareServer.image(size: 8 << 20, seed: 71)
        try server.publish(version: "2.1.0", image: image)
        let config = try board.writeConfig(server: server, extra: "maxBytesPerSecond: 1048576,")
        func start() throws -> ChildProcess {
            let (program, arguments) = try agent.command(["run", "--config", config])
            return try ChildProcess(
                program, arguments, environment: host.inherited(), stdout: .file(board.directory + "/log"),
                stderr: .file(board.directory + "/log"))
        }
        var process = try start()
        defer { process.stop() }
        let partial = board.directory + "/firmware/staging/image.part"
        #expect(
            await eventually(within: .seconds(120)) {
                let size = (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int) ?? 0
                return size > 1 << 20
            }, "the download never started: \(host.log(board))")
        process.signal(SIGKILL)
        _ = process.wait()
        process = try start()
        #expect(await host.reach("installed", version: "2.1.0", board, process), "never installed: \(host.log(board))")
        #expect(host.log(board).contains("firmware download continues"), "\(host.log(board))")
        #expect(board.installs == ["install \(board.directory)/firmware/staging/image.bin 2.1.0"])
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        #expect(host.stopAgent(process) == 0)

        try board.bootInstalledSlot()
        process = try start()
        #expect(await host.reach("done", version: "2.1.0", board, process), "never done: \(host.log(board))")
        #expect(board.calls == ["install \(board.directory)/firmware/staging/image.bin 2.1.0", "commit"], "\(board.calls)")
        #expect(
            await eventually(within: .seconds(60)) {
                server.statusEvents().compactMap { $0["state"] as? String }.last == "done"
            }, "events: \(server.statusEvents())")
        #expect(host.stopAgent(process) == 0)
    }

    @Test(
        "firmware verify: the same lines and exit statuses as the host's for a valid release, a refusal, an image and its mismatch",
        arguments: EmbeddedAgent.all)
    func verify(_ agent: EmbeddedAgent) throws {
        let (server, _) = try host.setUp("emb-verify-\(agent.arch)", running: "1.0.0")
        defer { server.remove() }
        try server.vendor.makeEC("stranger")
        let image = FirmwareServer.image(size: 128 << 10, seed: 5)
        try server.publish(version: "4.2.0", image: image, expires: "2099-01-01T00:00:00Z")
        let manifest = server.www + "/manifest.json"
        let vendor = server.vendor.directory
        let wrong = server.vendor.directory + "/wrong.img"
        try Data(image.reversed()).write(to: URL(filePath: wrong))
        let cases: [[String]] = [
            [manifest, "--key", vendor + "/ec.pub"],
            [manifest, "--key", vendor + "/stranger.pub", "--key", vendor + "/ec.pub", "--device-type", "test-board"],
            [manifest, "--key", vendor + "/ec.pub", "--device-type", "other-board"],
            [manifest, "--key", vendor + "/stranger.pub"],
            [manifest, "--key", vendor + "/ec.pub", "--image", server.www + "/image.bin"],
            [manifest, "--key", vendor + "/ec.pub", "--image", wrong],
            [manifest, "--key", vendor + "/missing.pub"],
            [manifest, "--key", vendor + "/ec.pub", "--signature", vendor + "/missing.sig"],
            [manifest],
            [],
        ]
        // The image's hashing time differs from run to run.
        func masked(_ text: String) -> String {
            text.replacingOccurrences(of: #"hashed in \d+ ms"#, with: "hashed in N ms", options: .regularExpression)
        }
        for arguments in cases {
            let embedded = try agent.run(["firmware", "verify"] + arguments)
            let full = try fireAgent(["firmware", "verify"] + arguments)
            #expect(embedded.status == full.status, "\(arguments): \(embedded.status) vs \(full.status): \(embedded.stderr)")
            #expect(
                masked(String(decoding: embedded.stdout, as: UTF8.self)) == masked(String(decoding: full.stdout, as: UTF8.self)),
                "\(arguments)")
            #expect(embedded.stderr == full.stderr, "\(arguments)")
        }
    }
}
