import FireAgent
import Foundation
import Synchronization
import Testing

/// fire-agent run with a firmware section, against nginx serving images and signed manifests,
/// on a fake board (version file, boot ID, an installer and a commit command that record their
/// calls). The agent is a real process: killed, restarted and "rebooted" like on a device.
@Suite("Firmware updates end to end (fire-agent run, nginx, openssl-signed manifests)", .serialized)
struct FirmwareUpdateTests {
    /// This process's environment (under qemu it says where the target's loader is) plus `extra`.
    func inherited(_ extra: [String: String] = [:]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM", "FIRE_AGENT_FIRMWARE_EXIT_AT"] {
            environment[name] = nil
        }
        return environment.merging(extra) { $1 }
    }

    func startAgent(_ board: FakeBoard, config: String, environment: [String: String] = [:]) throws -> ChildProcess {
        try ChildProcess(
            try fireAgentPath(), ["run", "--config", config], environment: inherited(environment),
            stdout: .file(board.directory + "/log"), stderr: .file(board.directory + "/log"))
    }

    func log(_ board: FakeBoard) -> String {
        (try? String(contentsOfFile: board.directory + "/log", encoding: .utf8)) ?? ""
    }

    /// Waits for `agent`'s status (not one an earlier process left) to show `phase` (for
    /// `version`, when given).
    func reach(_ phase: String, version: String? = nil, _ board: FakeBoard, _ agent: ChildProcess, within: Duration = .seconds(120)) async
        -> Bool
    {
        await eventually(within: within) {
            guard let status = board.status, status.pid == agent.pid, let firmware = status.firmware else { return false }
            return firmware.phase == phase && (version == nil || firmware.version == version)
        }
    }

    /// A server with an ECDSA key `ec.pub`, and a board running `version`.
    func setUp(_ name: String, running version: String) throws -> (FirmwareServer, FakeBoard) {
        let server = try FirmwareServer(name)
        try server.vendor.makeEC("ec")
        return (server, try FakeBoard(in: server.vendor.directory + "/board", version: version))
    }

    func stopAgent(_ agent: ChildProcess) -> Int32 {
        agent.signal(SIGTERM)
        return agent.wait()
    }

    @Test(
        "a good update: downloaded, verified, installed once, rebooted into, committed after a sync; then a replayed older manifest is refused",
        arguments: ["ec", "rsa", "rsa-pss"])
    func goodUpdate(key: String) async throws {
        let server = try FirmwareServer("good-\(key)")
        defer { server.remove() }
        let keyName = key == "ec" ? "ec" : "rsa"
        if key == "ec" { try server.vendor.makeEC("ec") } else { try server.vendor.makeRSA("rsa") }
        let pss = key == "rsa-pss" ? ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:digest"] : []
        let board = try FakeBoard(in: server.vendor.directory + "/board", version: "2.0.0")
        let image = FirmwareServer.image(size: 3 << 20, seed: 7)
        try server.publish(version: "2.1.0", image: image, key: keyName, signOptions: pss)
        // Telemetry to a real influxd: the fire_agent_update points arrive there.
        let influx = try InfluxFixture()
        let config = try board.writeConfig(server: server, keys: ["\(keyName).pub"], telemetry: influx.base)
        var agent = try startAgent(board, config: config)
        defer { agent.stop() }

        #expect(await reach("installed", version: "2.1.0", board, agent), "never installed: \(log(board))")
        #expect(board.installs == ["install \(board.directory)/firmware/staging/image.bin 2.1.0"])
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        #expect(!board.calls.contains("commit"), "committed before the new version ran")
        #expect(stopAgent(agent) == 0)

        // The "reboot": the other slot boots, the agent starts again.
        try board.bootInstalledSlot()
        agent = try startAgent(board, config: config)
        #expect(await reach("done", version: "2.1.0", board, agent), "never done: \(log(board))")
        #expect(board.calls == ["install \(board.directory)/firmware/staging/image.bin 2.1.0", "commit"])
        #expect(board.firmware?.highestAccepted == "2.1.0")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: board.directory + "/firmware/staging")) == [])

        // The report reached the server for every step, once each.
        #expect(
            await eventually(within: .seconds(120)) {
                server.statusEvents().compactMap { $0["state"] as? String }
                    == ["downloading", "verifying", "installing", "installed", "confirming", "done"]
            }, "events: \(server.statusEvents())")
        let done = try #require(server.statusEvents().last)
        #expect(
            done["device"] as? String == "board-fw" && done["version"] as? String == "2.1.0" && done["fromVersion"] as? String == "2.0.0")
        #expect((done["manifest"] as? String)?.count == 64 && done["time"] is String)
        // And as telemetry: one fire_agent_update point per step, tagged with the device and version.
        var states: [String] = []
        #expect(
            await eventually(within: .seconds(120)) {
                let rows =
                    (try? influx.rows(#"SELECT "state" FROM "fire_agent_update" WHERE "device" = 'board-fw' AND "version" = '2.1.0'"#))
                    ?? []
                states = rows.compactMap { $0.count > 1 ? $0[1] as? String : nil }
                return states.count == 6
            }, "fire_agent_update: \(states)")
        #expect(states == ["downloading", "verifying", "installing", "installed", "confirming", "done"])

        // An older release, correctly signed, served again (a rollback attack): refused.
        try server.publish(
            version: "2.0.5", image: FirmwareServer.image(size: 1 << 20, seed: 8), name: "old.bin", key: keyName, signOptions: pss)
        #expect(await reach("failed", version: "2.0.5", board, agent), "the replay was not refused: \(log(board))")
        #expect(
            board.firmware?.reason?.hasPrefix("notNewer: 2.0.5 is not newer than 2.1.0") == true, "\(String(describing: board.firmware))")
        #expect(board.installs.count == 1)
        let text = String(decoding: try fireAgent(["status", "--config", config]).stdout, as: UTF8.self)
        #expect(text.contains("firmware:      failed 2.0.5 (from 2.1.0)") && text.contains("highest version accepted: 2.1.0"), "\(text)")
        #expect(stopAgent(agent) == 0)
    }
}

extension FirmwareUpdateTests {
    @Test("a whole update through squid with Basic authentication: manifest, image, reports and telemetry to influxd via the proxy")
    func updateThroughProxy() async throws {
        let proxy = try proxies()
        let (server, board) = try setUp("proxied", running: "2.0.0")
        defer { server.remove() }
        let image = FirmwareServer.image(size: 2 << 20, seed: 11)
        try server.publish(version: "2.1.0", image: image)
        let influx = try InfluxFixture()
        let url = "http://\(ProxyFixture.encodedCredentials)@127.0.0.1:\(proxy.authPort)"
        let config = try board.writeConfig(server: server, telemetry: influx.base, topLevel: "network: { proxy: \"\(url)\" },")
        // It holds the proxy's password: the agent's alone, or it is refused.
        chmod(config, 0o600)
        // The environment says otherwise (a dead proxy): the config wins.
        let dead = ["http_proxy": "http://127.0.0.1:\(freePort())", "https_proxy": "http://127.0.0.1:1"]
        var agent = try startAgent(board, config: config, environment: dead)
        defer { agent.stop() }
        #expect(await reach("installed", version: "2.1.0", board, agent), "never installed: \(log(board))")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        #expect(stopAgent(agent) == 0)
        try board.bootInstalledSlot()
        agent = try startAgent(board, config: config, environment: dead)
        #expect(await reach("done", version: "2.1.0", board, agent), "never done: \(log(board))")
        #expect(
            await eventually(within: .seconds(60)) {
                server.statusEvents().compactMap { $0["state"] as? String }.last == "done"
            }, "events: \(server.statusEvents())")
        #expect(
            await eventually(within: .seconds(60)) {
                ((try? influx.count("fire_agent_update", field: "state")) ?? 0) >= 6
            }, "no telemetry through the proxy")
        #expect(stopAgent(agent) == 0)
        // Everything went through squid, authenticated; the log never holds the password.
        let manifest = proxy.squidLines(containing: "\(server.base)/manifest.json")
        let images = proxy.squidLines(containing: "\(server.base)/image.bin")
        let writes = proxy.squidLines(containing: "\(influx.base)/write")
        #expect(!manifest.isEmpty && manifest.allSatisfy { $0.contains(" fleet ") }, "\(manifest)")
        #expect(!images.isEmpty && images.allSatisfy { $0.contains(" fleet ") }, "\(images)")
        #expect(!writes.isEmpty && writes.allSatisfy { $0.contains(" fleet ") }, "\(writes)")
        #expect(!log(board).contains("s3cret"))
    }

    @Test("every refusal is reported with its reason and the installer never runs; a 404 image is asked for once")
    func refusals() async throws {
        let (server, board) = try setUp("refusals", running: "2.0.0")
        defer { server.remove() }
        try server.vendor.makeEC("stranger")
        let image = FirmwareServer.image(size: 256 << 10, seed: 3)
        let config = try board.writeConfig(server: server)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await eventually(within: .seconds(120)) { board.firmware?.lastCheck != nil }, "never polled: \(log(board))")

        // (what to publish, the version the status then shows, how its reason starts)
        let cases: [(String, () throws -> Void, String, String)] = [
            ("another key", { try server.publish(version: "3.0.1", image: image, key: "stranger") }, "", "badSignature: the signature"),
            (
                "no signature", { try server.publish(version: "3.0.2", image: image, signature: false) }, "",
                "badSignature: the signature http"
            ),
            ("expired", { try server.publish(version: "3.0.3", image: image, expires: "2020-01-01T00:00:00Z") }, "3.0.3", "expired: "),
            (
                "incompatible", { try server.publish(version: "3.0.4", image: image, compatible: ["other-board"]) }, "3.0.4",
                "incompatible: "
            ),
            ("older", { try server.publish(version: "1.9.0", image: image) }, "1.9.0", "notNewer: 1.9.0 is not newer than 2.0.0"),
            ("size", { try server.publish(version: "3.0.5", image: image, size: image.count + 1) }, "3.0.5", "sizeMismatch: "),
            (
                "oversize", { try server.publish(version: "3.0.6", image: image, size: image.count - 1) }, "3.0.6",
                "sizeMismatch: the server sends more"
            ),
            (
                "hash", { try server.publish(version: "3.0.7", image: image, sha256: String(repeating: "0", count: 64)) }, "3.0.7",
                "hashMismatch: "
            ),
            (
                "gone", { try server.publish(version: "3.0.8", image: image, name: "gone.bin", writeImage: false) }, "3.0.8",
                "the image http"
            ),
        ]
        for (name, publish, version, reason) in cases {
            try publish()
            let seen = await eventually(within: .seconds(120)) {
                guard let firmware = board.firmware, firmware.phase == "failed", let text = firmware.reason else { return false }
                return (version.isEmpty || firmware.version == version) && text.hasPrefix(reason)
                    && (!version.isEmpty || text.contains(name == "no signature" ? "HTTP 404" : "not valid"))
            }
            #expect(seen, "\(name): \(String(describing: board.firmware)) \(log(board))")
        }
        // The same version as the one running is no failure: the status says it is current.
        try server.publish(version: "2.0.0", image: image)
        #expect(
            await eventually(within: .seconds(120)) { board.firmware?.lastCheckResult?.hasSuffix("up to date (2.0.0 runs)") == true },
            "\(String(describing: board.firmware))")
        #expect(board.installs.isEmpty, "\(board.calls)")
        // A mismatched image was fetched once more from zero, then given up; a 404 only once.
        #expect(server.accessLines(containing: "/gone.bin").count == 1, "\(server.accessLines(containing: "/gone.bin"))")
        // Each refusal reported, and none twice for the same manifest and reason. (A signature
        // refusal is checked again at each poll: when the reason changes — the next case removes
        // the signature before it renames the new manifest in — that is a new report.)
        let failures = server.statusEvents().filter { $0["state"] as? String == "failed" }
            .compactMap { event -> String? in
                guard let manifest = event["manifest"] as? String, let reason = event["reason"] as? String else { return nil }
                return manifest + " " + reason
            }
        #expect(Set(failures).count == failures.count, "\(failures)")
        for (name, _, _, reason) in cases {
            #expect(failures.contains { $0.contains(" " + reason) }, "\(name): \(failures)")
        }
        #expect(stopAgent(agent) == 0)
    }
}

extension FirmwareUpdateTests {
    /// Bytes of the partial image on disk.
    func partialBytes(_ board: FakeBoard) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: board.directory + "/firmware/staging/image.part"))?[.size] as? Int) ?? 0
    }

    /// Starts the agent behind a proxy that stalls the image at `fraction` of it (so the test
    /// need not catch a moment, however late it wakes under qemu), and kills it with SIGKILL
    /// once that much is on disk. Returns the bytes on disk, and the proxy (later requests pass
    /// whole): the config must point at it.
    func killDuringDownload(_ board: FakeBoard, config: String, size: Int, fraction: Double) async throws -> Int {
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(
            await eventually(within: .seconds(120)) { partialBytes(board) >= Int(Double(size) * fraction) },
            "the download did not reach \(Int(fraction * 100)) %: \(log(board))")
        agent.signal(SIGKILL)
        _ = agent.wait()
        return partialBytes(board)
    }

    /// A proxy to `server` that holds the first request for the image at `fraction`.
    func stallingProxy(_ server: FirmwareServer, size: Int, fraction: Double, image: String = "/image.bin") throws -> CuttingProxy {
        try CuttingProxy(upstreamPort: server.port, cut: .stall(after: Int(Double(size) * fraction)), onlyFor: image, stallSeconds: 600)
    }

    /// The config, with the manifest fetched through `proxy`.
    func throughProxy(_ config: String, _ server: FirmwareServer, _ proxy: CuttingProxy) throws {
        let text = try String(contentsOfFile: config, encoding: .utf8)
            .replacingOccurrences(
                of: #"manifestURL: "\#(server.base)/manifest.json""#, with: #"manifestURL: "http://127.0.0.1:\#(proxy.port)/manifest.json""#
            )
        try text.write(toFile: config, atomically: true, encoding: .utf8)
    }

    /// nginx's line for the resumed request (the one with a Range).
    func resumedRequest(_ server: FirmwareServer) -> [String] {
        server.accessLines(containing: "/image.bin").first { $0.contains("\"bytes=") }?.split(separator: " ").map(String.init) ?? []
    }

    @Test("a release published while the agent is stopped mid-download: polled before resuming, one download of the new image")
    func releasePublishedWhileStopped() async throws {
        let (server, board) = try setUp("published-while-down", running: "1.0.0")
        defer { server.remove() }
        let size = 8 << 20
        try server.publish(version: "1.1.0", image: FirmwareServer.image(size: size, seed: 31))
        let config = try board.writeConfig(server: server)
        let proxy = try stallingProxy(server, size: size, fraction: 0.4)
        defer { proxy.stop() }
        try throughProxy(config, server, proxy)
        _ = try await killDuringDownload(board, config: config, size: size, fraction: 0.4)

        // While the agent is down, 1.2.0 replaces 1.1.0 at the same URL.
        let image = FirmwareServer.image(size: size, seed: 32)
        try server.publish(version: "1.2.0", image: image)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await reach("installed", version: "1.2.0", board, agent), "\(log(board))")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        // After the restart: no resume of 1.1.0 (no Range ever sent), one download from zero.
        // (The stalled first request's access-log line comes whenever the proxy lets it go.)
        let requests = server.accessLines(containing: "/image.bin")
        #expect(!requests.contains { $0.contains("\"bytes=") }, "\(requests)")
        #expect(requests.contains { $0.hasPrefix("/image.bin 200 \(size) \"-\"") }, "\(requests)")
        let text = log(board)
        let restart = try #require(text.range(of: "firmware updates on", options: .backwards), "\(text)")
        let second = text[restart.upperBound...]
        #expect(
            second.components(separatedBy: "firmware download starts").count == 2 && !second.contains("firmware download continues"),
            "\(second)")
        #expect(
            server.statusEvents().contains { $0["state"] as? String == "superseded" && $0["version"] as? String == "1.1.0" },
            "\(server.statusEvents())")
        #expect(board.installs.count == 1)
        #expect(stopAgent(agent) == 0)
    }

    @Test("SIGKILL at 40 % of the download: the next start continues with a Range from there, and the image is byte-identical")
    func killAtFortyPercent() async throws {
        let (server, board) = try setUp("kill40", running: "1.0.0")
        defer { server.remove() }
        let size = 8 << 20
        let image = FirmwareServer.image(size: size, seed: 11)
        try server.publish(version: "1.1.0", image: image)
        let config = try board.writeConfig(server: server)
        let proxy = try stallingProxy(server, size: size, fraction: 0.4)
        defer { proxy.stop() }
        try throughProxy(config, server, proxy)
        let killedAt = try await killDuringDownload(board, config: config, size: size, fraction: 0.4)
        #expect(killedAt < size, "finished before the kill")

        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await reach("installed", version: "1.1.0", board, agent), "\(log(board))")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        let requests = server.accessLines(containing: "/image.bin")
        // `uri status bytes "Range" "If-Range" "If-None-Match"`: the resumed request asks from
        // where the kill left it. (The first one's line comes when the proxy lets it go.)
        let second = resumedRequest(server)
        #expect(second.count >= 5 && second[1] == "206", "\(requests)")
        let from =
            Int(second.count >= 4 ? second[3].replacingOccurrences(of: "\"bytes=", with: "").replacingOccurrences(of: "-\"", with: "") : "")
            ?? -1
        #expect(from >= size * 2 / 5 && from <= killedAt, "resumed from \(from), killed at \(killedAt): \(requests)")
        #expect(Int(second[2]) == size - from, "the second request fetched \(second[2]) bytes, \(size - from) were missing")
        #expect(board.installs.count == 1)
        #expect(stopAgent(agent) == 0)
    }

    @Test("the image replaced on the server between attempts: If-Range brings it whole, never spliced onto the old bytes")
    func imageReplacedBetweenAttempts() async throws {
        let (server, board) = try setUp("replaced", running: "1.0.0")
        defer { server.remove() }
        let size = 8 << 20
        let stale = FirmwareServer.image(size: size, seed: 21)
        let image = FirmwareServer.image(size: size, seed: 22)
        // The manifest signs `image`, but the server still has a stale upload of the same size.
        try server.publish(version: "1.1.0", image: image, writeImage: false)
        try stale.write(to: URL(filePath: server.www + "/image.bin"))
        try FileManager.default.setAttributes(
            [.modificationDate: Date(timeIntervalSince1970: 1_600_000_000)], ofItemAtPath: server.www + "/image.bin")
        let config = try board.writeConfig(server: server)
        let proxy = try stallingProxy(server, size: size, fraction: 0.4)
        defer { proxy.stop() }
        try throughProxy(config, server, proxy)
        _ = try await killDuringDownload(board, config: config, size: size, fraction: 0.4)

        // The vendor fixes the upload; the agent starts again.
        try image.write(to: URL(filePath: server.www + "/image.bin"))
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await reach("installed", version: "1.1.0", board, agent), "\(log(board))")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        let requests = server.accessLines(containing: "/image.bin")
        let second = resumedRequest(server)
        // Range and If-Range were sent; the changed ETag made nginx answer 200. The agent read
        // only its head (the image changed: the manifest is polled first), then, the manifest
        // being the same, fetched it once from zero.
        #expect(second.count >= 5 && second[1] == "200" && second[3].hasPrefix("\"bytes=") && second[4] != "\"-\"", "\(requests)")
        // (The stalled first request's line comes whenever the proxy lets it go: the agent's
        // log tells what came after the change.)
        let text = log(board)
        let changed = try #require(text.range(of: "firmware image changed on the server"), "\(text)")
        let after = text[changed.upperBound...]
        #expect(
            after.components(separatedBy: "firmware download starts").count == 2 && !after.contains("firmware download continues"),
            "after the change: one download from zero, no resume: \(after)")
        #expect(board.installs.count == 1)
        #expect(stopAgent(agent) == 0)
    }
}

extension FirmwareUpdateTests {
    @Test(
        "the agent killed at every step of the flow (FIRE_AGENT_FIRMWARE_EXIT_AT): restarted, it finishes, and the installer ran exactly once",
        arguments: ["downloading", "verifying", "installing", "installer-exited", "installed", "confirming", "done"])
    func exitAtEveryStep(step: String) async throws {
        let (server, board) = try setUp("exit-\(step)", running: "4.0.0")
        defer { server.remove() }
        let image = FirmwareServer.image(size: 1 << 20, seed: 31)
        try server.publish(version: "4.1.0", image: image)
        let config = try board.writeConfig(server: server)
        var exited = false
        var rebooted = false
        var starts = 0
        while starts < 6 {
            starts += 1
            let agent = try startAgent(board, config: config, environment: exited ? [:] : ["FIRE_AGENT_FIRMWARE_EXIT_AT": step])
            defer { agent.stop() }
            // Until it exits at the step, waits for a reboot, or is done.
            var phase = ""
            let settled = await eventually(within: .seconds(120)) {
                if !agent.isRunning { return true }
                guard let status = board.status, status.pid == agent.pid, let firmware = status.firmware else { return false }
                phase = firmware.phase
                // The status may show the step a moment before the agent persists it and exits
                // there (under qemu the moment is long): that step settles only by the exit.
                if phase == step && !exited { return false }
                return (phase == "installed" && !rebooted) || phase == "done" || phase == "failed"
            }
            #expect(settled, "start \(starts) settled nowhere: \(log(board))")
            if !agent.isRunning {
                #expect(agent.wait() == 86 && !exited, "start \(starts) ended unexpectedly: \(log(board))")
                exited = true
                continue
            }
            #expect(stopAgent(agent) == 0)
            if phase == "installed" {
                try board.bootInstalledSlot()
                rebooted = true
                continue
            }
            break
        }
        #expect(exited, "the agent never stopped at \(step)")
        #expect(
            board.firmware?.phase == "done" && board.firmware?.version == "4.1.0", "\(String(describing: board.firmware)) \(log(board))")
        #expect(board.installs == ["install \(board.directory)/firmware/staging/image.bin 4.1.0"], "\(board.calls)")
        #expect(board.calls.last == "commit")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
    }
}

extension FirmwareUpdateTests {
    @Test("the old version booting after the install is a rollback, reported; the commit runs only once the new version has synced")
    func rollbackAndCommitAfterSync() async throws {
        let (server, board) = try setUp("rollback", running: "5.0.0")
        defer { server.remove() }
        try server.publish(version: "5.1.0", image: FirmwareServer.image(size: 512 << 10, seed: 41))
        let config = try board.writeConfig(server: server)
        var agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await reach("installed", version: "5.1.0", board, agent), "\(log(board))")
        #expect(stopAgent(agent) == 0)

        // The bootloader gave up on the new slot: the old version boots again.
        try board.reboot()
        agent = try startAgent(board, config: config)
        #expect(await reach("failed", version: "5.1.0", board, agent), "\(log(board))")
        #expect(board.firmware?.reason == "rolled back: 5.0.0 booted after installing 5.1.0")
        #expect(!board.calls.contains("commit"))
        #expect(
            await eventually(within: .seconds(120)) {
                server.statusEvents().last?["reason"] as? String == "rolled back: 5.0.0 booted after installing 5.1.0"
            },
            "\(server.statusEvents())")
        #expect(board.firmware?.highestAccepted == "5.0.0", "a rolled-back version is not the new floor")

        // A new release installs; after the reboot the server is unreachable: no commit until a sync.
        try server.publish(version: "5.2.0", image: FirmwareServer.image(size: 512 << 10, seed: 42))
        #expect(await reach("installed", version: "5.2.0", board, agent), "\(log(board))")
        #expect(stopAgent(agent) == 0)
        try board.bootInstalledSlot()
        server.stop()
        agent = try startAgent(board, config: config)
        #expect(
            await eventually(within: .seconds(120)) {
                guard let firmware = board.firmware, let status = board.status, status.pid == agent.pid else { return false }
                return firmware.phase == "confirming" && firmware.lastCheck != nil
                    && firmware.lastCheckResult?.hasPrefix("unchanged") == false
            }, "\(String(describing: board.firmware)) \(log(board))")
        #expect(!board.calls.contains("commit"), "committed without a sync: \(board.calls)")
        try server.start()
        #expect(await reach("done", version: "5.2.0", board, agent), "\(log(board))")
        #expect(board.calls.filter { $0 == "commit" }.count == 1 && board.installs.count == 2, "\(board.calls)")
        #expect(board.firmware?.highestAccepted == "5.2.0")
        #expect(stopAgent(agent) == 0)
    }
}

extension FirmwareUpdateTests {
    @Test("while a download waits to be retried: a refused offer leaves it alone (across a SIGKILL too), a newer good one supersedes it")
    func offersWhileDownloadWaits() async throws {
        let (server, board) = try setUp("during", running: "6.0.0")
        defer { server.remove() }
        let image = FirmwareServer.image(size: 1 << 20, seed: 51)
        // The image's URL answers 503 for now: the download is retried with backoff.
        try server.publish(version: "6.1.0", image: image, name: "unavailable/image.bin", writeImage: false)
        let config = try board.writeConfig(server: server, extra: "downloadAttempts: 1000,")
        var agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(
            await eventually(within: .seconds(120)) { server.accessLines(containing: "/unavailable/image.bin").count >= 2 }, "\(log(board))"
        )
        // An expired manifest for a newer version appears: refused, the update under way goes on.
        try server.publish(
            version: "6.2.0", image: FirmwareServer.image(size: 1 << 20, seed: 52), name: "other.bin", expires: "2020-01-01T00:00:00Z")
        #expect(
            await eventually(within: .seconds(120)) { board.firmware?.lastCheckResult?.contains("refused: expired") == true },
            "\(String(describing: board.firmware))")
        #expect(board.firmware?.phase == "downloading" && board.firmware?.version == "6.1.0")
        agent.signal(SIGKILL)
        _ = agent.wait()
        // Started again, it follows the manifest it kept (verified again), not the refused one.
        agent = try startAgent(board, config: config)
        #expect(
            await eventually(within: .seconds(120)) {
                server.accessLines(containing: "/unavailable/image.bin").count >= 4 && board.firmware?.version == "6.1.0"
            },
            "\(log(board))")
        #expect(board.firmware?.phase == "downloading", "the update under way survived the restart: \(String(describing: board.firmware))")

        // An older signed release (still above what runs) is replayed: it must not displace 6.1.0.
        try server.publish(version: "6.0.5", image: FirmwareServer.image(size: 1 << 20, seed: 53), name: "older.bin")
        #expect(
            await eventually(within: .seconds(120)) {
                board.firmware?.lastCheckResult?.contains("refused: notNewer: 6.0.5 is not above 6.1.0, the update under way") == true
            }, "\(String(describing: board.firmware))")
        #expect(board.firmware?.phase == "downloading" && board.firmware?.version == "6.1.0", "\(String(describing: board.firmware))")
        #expect(server.accessLines(containing: "/older.bin").isEmpty, "the older image was fetched")

        // A newer good release supersedes the one that cannot be fetched.
        let newest = FirmwareServer.image(size: 1 << 20, seed: 54)
        try server.publish(version: "6.4.0", image: newest, name: "six-four.bin")
        #expect(await reach("installed", version: "6.4.0", board, agent), "\(log(board))")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == newest)
        #expect(
            await eventually(within: .seconds(120)) {
                server.statusEvents().contains {
                    $0["state"] as? String == "superseded" && $0["version"] as? String == "6.1.0"
                        && $0["reason"] as? String == "superseded by a newer manifest (6.4.0)"
                }
            }, "\(server.statusEvents())")
        #expect(board.installs.count == 1)
        #expect(stopAgent(agent) == 0, "\(log(board))")
    }
}

extension FirmwareUpdateTests {
    @Test("40 refused manifests, then a failed release served again with its image fixed: never fetched or installed again")
    func refusalsDoNotEvictHistory() async throws {
        let (server, board) = try setUp("replays", running: "2.0.0")
        defer { server.remove() }
        let image = FirmwareServer.image(size: 64 << 10, seed: 61)
        let config = try board.writeConfig(server: server)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        // A release whose image is missing: failed (404).
        let failed = try server.publish(version: "3.0.0", image: image, name: "missing.bin", writeImage: false)
        #expect(
            await eventually(within: .seconds(120)) { board.firmware?.phase == "failed" && board.firmware?.version == "3.0.0" },
            "\(log(board))")
        // 40 manifests refused for this board, each a new digest.
        for index in 0..<40 {
            try server.publish(version: "4.\(index).0", image: image, compatible: ["other-board"])
            #expect(
                await eventually(within: .seconds(60)) {
                    board.firmware?.version == "4.\(index).0" && board.firmware?.reason?.hasPrefix("incompatible:") == true
                }, "\(index): \(String(describing: board.firmware))")
        }
        // The failed release again, byte for byte, and its image is there now.
        try image.write(to: URL(filePath: server.www + "/missing.bin"))
        try failed.write(to: URL(filePath: server.vendor.directory + "/manifest.json"))
        try failed.write(to: URL(filePath: server.www + "/manifest.json.tmp"))
        let signature = try server.vendor.sign("manifest.json", with: "ec", options: [])
        try Data(signature).write(to: URL(filePath: server.www + "/manifest.json.sig"))
        rename(server.www + "/manifest.json.tmp", server.www + "/manifest.json")
        let polls = server.accessLines(containing: "/manifest.json ").count
        #expect(await eventually(within: .seconds(60)) { server.accessLines(containing: "/manifest.json ").count >= polls + 4 })
        #expect(server.accessLines(containing: "/missing.bin").count == 1, "\(server.accessLines(containing: "/missing.bin"))")
        #expect(board.installs.isEmpty, "\(board.calls)")
        #expect(board.firmware?.version == "4.39.0", "\(String(describing: board.firmware))")
        #expect(stopAgent(agent) == 0)
    }

    @Test(
        "a manifest replaced by one of the same size in the same second (nginx's ETag repeats) is seen at the next poll, not hidden by If-None-Match"
    )
    func sameSecondSameSizeManifest() async throws {
        let (server, board) = try setUp("etag", running: "2.0.0")
        defer { server.remove() }
        let image = FirmwareServer.image(size: 64 << 10, seed: 62)
        try server.publish(version: "5.1.0", image: image, compatible: ["other-board"])
        let config = try board.writeConfig(server: server)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(
            await eventually(within: .seconds(60)) { board.firmware?.version == "5.1.0" }, "\(log(board))")
        let tag = { (text: String) in text.split(whereSeparator: \.isNewline).first { $0.lowercased().hasPrefix("etag:") } }
        let before = try runCommand("/usr/bin/curl", ["-sI", server.base + "/manifest.json"])
        // Same length, same modification time: the ETag nginx gives is the old one.
        try server.publish(version: "5.2.0", image: image, compatible: ["other-board"], sameMtimeAsServed: true)
        let after = try runCommand("/usr/bin/curl", ["-sI", server.base + "/manifest.json"])
        #expect(tag(before) != nil && tag(before) == tag(after), "before: \(before)\nafter: \(after)")
        #expect(
            await eventually(within: .seconds(60)) {
                board.firmware?.version == "5.2.0" && board.firmware?.reason?.hasPrefix("incompatible:") == true
            }, "\(String(describing: board.firmware))\n\(log(board))")
        #expect(stopAgent(agent) == 0)
    }

    @Test("a manifest published before its signature is refused and reported once, then installed when the signature appears")
    func signaturePublishedLate() async throws {
        let (server, board) = try setUp("late", running: "7.0.0")
        defer { server.remove() }
        try server.publish(version: "7.1.0", image: FirmwareServer.image(size: 256 << 10, seed: 61), signature: false)
        let config = try board.writeConfig(server: server)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await reach("failed", board, agent), "\(log(board))")
        #expect(board.firmware?.reason?.contains("answered HTTP 404") == true, "\(String(describing: board.firmware))")
        // Several polls later it is still one report.
        #expect(await eventually(within: .seconds(120)) { server.accessLines(containing: "manifest.json.sig").count >= 3 })
        #expect(server.statusEvents().filter { $0["state"] as? String == "failed" }.count == 1, "\(server.statusEvents())")
        let signature = try server.vendor.sign("manifest.json", with: "ec")
        try Data(signature).write(to: URL(filePath: server.www + "/manifest.json.sig"))
        #expect(await reach("installed", version: "7.1.0", board, agent), "\(log(board))")
        #expect(board.installs.count == 1)
        #expect(stopAgent(agent) == 0)
    }
}

extension FirmwareUpdateTests {
    /// A tmpfs of `size` (`8m`) at `path` (the tests run as root); the caller unmounts it.
    func mountSmall(_ path: String, size: String) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let mount = try runCapturingOutput(try #require(which("mount")), ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", path])
        try #require(mount.status == 0, "mount tmpfs (the tests run as root): \(mount.stderr)")
    }

    /// A file of `bytes` zeros (tmpfs keeps every page of it).
    func writeBallast(_ path: String, bytes: Int) throws {
        try Data(count: bytes).write(to: URL(filePath: path))
    }

    @Test(
        "an image larger than the staging file system (an 8 MiB tmpfs, less the reserve) fails at once, naming both sizes; nothing is fetched, nothing waits"
    )
    func imageLargerThanFileSystem() async throws {
        let (server, board) = try setUp("space-never", running: "8.0.0")
        defer { server.remove() }
        let small = board.directory + "/small"
        try mountSmall(small, size: "8m")
        defer { _ = try? runCapturingOutput(which("umount") ?? "/bin/umount", ["-l", small]) }
        try server.publish(version: "8.1.0", image: FirmwareServer.image(size: 12 << 20, seed: 71))
        let config = try board.writeConfig(server: server, extra: #"stagingReserveBytes: "1MiB","#, state: small + "/firmware")
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await reach("failed", version: "8.1.0", board, agent, within: .seconds(60)), "\(log(board))")
        let reason = board.firmware?.reason ?? ""
        #expect(
            reason.hasPrefix("tooLarge: the image (12582912 bytes) cannot fit in \(small)/firmware/staging: ")
                && reason.contains("holds 8388608 bytes in all, less firmware.stagingReserveBytes (1048576)"), "\(reason)")
        #expect(board.firmware?.waiting == nil)
        #expect(server.accessLines(containing: "/image.bin").isEmpty, "fetched")
        #expect(!log(board).contains("firmware update waits"), "\(log(board))")
        #expect(board.installs.isEmpty)
        #expect(stopAgent(agent) == 0)
    }

    @Test(
        "short of space (a ballast on an 8 MiB tmpfs) the download waits quietly: state.json not rewritten across retries, one log line, the reason in the status; it completes once the ballast goes"
    )
    func waitsForSpaceQuietly() async throws {
        let (server, board) = try setUp("space-wait", running: "8.0.0")
        defer { server.remove() }
        let small = board.directory + "/small"
        try mountSmall(small, size: "8m")
        defer { _ = try? runCapturingOutput(which("umount") ?? "/bin/umount", ["-l", small]) }
        // 6 MiB of the 8 taken: a 3 MiB image and the 1 MiB reserve do not fit now, but could.
        try writeBallast(small + "/ballast", bytes: 6 << 20)
        let image = FirmwareServer.image(size: 3 << 20, seed: 72)
        try server.publish(version: "8.2.0", image: image)
        // retry: 200 ms, doubling to 1 s (the board's config): a retry every second at most.
        let config = try board.writeConfig(server: server, extra: #"stagingReserveBytes: "1MiB","#, state: small + "/firmware")
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        let statePath = small + "/firmware/state.json"
        #expect(
            await eventually(within: .seconds(60)) {
                board.status?.pid == agent.pid
                    && board.firmware?.waiting?.hasPrefix("not enough space in \(small)/firmware/staging: ") == true
            }, "\(String(describing: board.firmware)) \(log(board))")
        let reason = board.firmware?.waiting ?? ""
        #expect(reason.contains("3145728 bytes to download and firmware.stagingReserveBytes (1048576)"), "\(reason)")
        #expect(board.firmware?.phase == "downloading" && board.firmware?.reason == "waiting: " + reason)
        // Ten seconds of retries: state.json is not written again (a write is a new inode), the
        // wait is logged once, and no retry is logged.
        func stateFile() -> (inode: UInt64, mtime: Int, content: Data?) {
            var info = stat()
            guard stat(statePath, &info) == 0 else { return (0, 0, nil) }
            return (
                UInt64(info.st_ino), info.st_mtim.tv_sec * 1_000_000_000 + info.st_mtim.tv_nsec,
                FileManager.default.contents(atPath: statePath)
            )
        }
        let before = stateFile()
        try await Task.sleep(for: .seconds(10))
        let after = stateFile()
        #expect(
            before.inode == after.inode && before.mtime == after.mtime && before.content == after.content && before.content != nil,
            "state.json rewritten while waiting: \(before.inode)/\(after.inode)")
        let lines = log(board).components(separatedBy: "\n")
        #expect(lines.filter { $0.contains("firmware update waits") }.count == 1, "\(log(board))")
        #expect(!lines.contains { $0.contains("firmware download will be tried again") }, "\(log(board))")
        #expect(server.accessLines(containing: "/image.bin").isEmpty, "fetched without room")
        #expect(
            server.statusEvents().filter { ($0["reason"] as? String)?.hasPrefix("waiting: not enough space") == true }.count == 1,
            "reported once: \(server.statusEvents())")
        // Room again: the next retry (within the 1 s maximum and its jitter) downloads.
        unlink(small + "/ballast")
        #expect(await reach("installed", version: "8.2.0", board, agent, within: .seconds(60)), "\(log(board))")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        #expect(log(board).components(separatedBy: "\n").filter { $0.contains("firmware update goes on") }.count == 1)
        #expect(board.firmware?.waiting == nil)
        #expect(stopAgent(agent) == 0)
    }

    /// The agent's peak RSS (VmHWM, KiB) through a whole update of a `size`-byte image.
    func peakRSS(imageSize size: Int, name: String) async throws -> Int {
        let (server, board) = try setUp("rss-\(name)", running: "9.0.0")
        defer { server.remove() }
        try server.publish(version: "9.1.0", image: FirmwareServer.image(size: size, seed: 81))
        let config = try board.writeConfig(server: server)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await reach("installed", version: "9.1.0", board, agent, within: .seconds(600)), "\(log(board))")
        let status = try String(contentsOfFile: "/proc/\(agent.pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") })
        #expect(stopAgent(agent) == 0)
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    @Test("memory stays flat in the image's size: peak RSS through a 64 MiB update within 1 MiB of a 1 MiB one (1 GiB: bench/firmware.sh)")
    func flatMemory() async throws {
        let small = try await peakRSS(imageSize: 1 << 20, name: "small")
        let large = try await peakRSS(imageSize: 64 << 20, name: "large")
        print("firmware update peak RSS: 1 MiB image \(small) KiB, 64 MiB image \(large) KiB")
        // Under qemu-user (cross/test.sh sets QEMU_LD_PREFIX) the figure is the emulator's, whose
        // translation cache grows with a longer run (+2.3 and +4.7 MiB in two fresh CI runs):
        // there the bound says only that nothing grows with the image (buffering it would be
        // 63 MiB more, an eighth of it 8 MiB).
        let emulated = ProcessInfo.processInfo.environment["QEMU_LD_PREFIX"] != nil
        let bound = emulated ? 8192 : 1024
        #expect(abs(large - small) <= bound, "1 MiB image: \(small) KiB, 64 MiB image: \(large) KiB (bound \(bound) KiB)")
    }
}

extension FirmwareUpdateTests {
    @Test("the manifest is polled at once when the route to the server comes back, not only on its (hour-long) interval")
    func pollWhenRouteReturns() async throws {
        let (server, board) = try setUp("route", running: "1.0.0")
        defer { server.remove() }
        try server.publish(version: "1.0.0", image: FirmwareServer.image(size: 1024, seed: 91))
        // Reachability by the default route of a namespace the test controls; the server
        // itself is on this process's loopback.
        let ns = try NetworkNamespace()
        let path = try board.writeConfig(server: server)
        var text = try String(contentsOfFile: path, encoding: .utf8)
        text = text.replacingOccurrences(of: #"pollInterval: "1s""#, with: #"pollInterval: "1h""#)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        var options = AgentDaemon.Options()
        options.handleSignals = false
        options.environment = [:]
        options.reachabilityNamespace = ns.path
        let daemon = try AgentDaemon(configPath: path, config: try AgentConfig.load(path: path), options: options) { _ in
            Logger(label: "test")
        }
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            try? daemon.run()
            done.signal()
        }
        defer {
            daemon.stop()
            _ = done.wait(timeout: .now() + 30)
        }
        // The first poll comes at start; then nothing for an hour.
        #expect(await eventually(within: .seconds(120)) { board.firmware?.lastCheckResult?.hasSuffix("up to date (1.0.0 runs)") == true })
        #expect(await eventually(within: .seconds(120)) { board.status?.reachability == "not-reachable" })
        let before = server.accessLines(containing: "/manifest.json ").count
        #expect(before == 1, "\(server.accessLines(containing: "/manifest.json"))")
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        #expect(
            await eventually(within: .seconds(120)) { server.accessLines(containing: "/manifest.json ").count == before + 1 },
            "no poll when the route came back: \(server.accessLines(containing: "/manifest.json"))")
    }
}

extension FirmwareUpdateTests {
    @Test(
        "an installer in a unit of its own (flock --shared, as etc/fire-agent-firmware@.service runs it): the agent killed mid-install waits for it after its restart; installed once"
    )
    func installerInItsOwnUnit() async throws {
        let (server, board) = try setUp("unit-install", running: "5.0.0")
        defer { server.remove() }
        let image = FirmwareServer.image(size: 256 << 10, seed: 53)
        try server.publish(version: "5.1.0", image: image)
        let config = try board.writeConfig(server: server)
        let lock = board.directory + "/firmware/install.lock"
        // What `systemctl start fire-agent-firmware@install.service` amounts to: the step runs in
        // a process systemd starts (no descriptor of the agent's), holding the install lock
        // shared, and the command waits for it to end.
        let unit = """
            import subprocess, sys
            step = ["flock", "--shared", "\(lock)", "sh", "-c",
                    'echo started > "\(board.directory)/unit-started"; sleep 4; cp "$1" "\(board.directory)/slot.img" && '
                    'echo "$2" > "\(board.directory)/slot.version" && echo "install $1 $2" >> "\(board.directory)/calls.log"',
                    "step", sys.argv[1], sys.argv[2]]
            sys.exit(subprocess.Popen(step, close_fds=True, start_new_session=True).wait())
            """
        try Data(unit.utf8).write(to: URL(filePath: board.directory + "/unit.py"))
        let python = which("python3") ?? "/usr/bin/python3"
        try Data("#!/bin/sh\nexec \(python) \"\(board.directory)/unit.py\" \"$1\" \"$2\"\n".utf8).write(
            to: URL(filePath: board.directory + "/install.sh"))
        chmod(board.directory + "/install.sh", 0o755)
        let first = try startAgent(board, config: config)
        let started = await eventually(within: .seconds(120)) { FileManager.default.fileExists(atPath: board.directory + "/unit-started") }
        first.signal(SIGKILL)
        _ = first.wait()
        #expect(started, "the step never ran: the agent's own lock kept it out \(log(board))")
        let second = try startAgent(board, config: config)
        defer { second.stop() }
        #expect(await reach("installed", version: "5.1.0", board, second), "\(log(board))")
        #expect(log(board).contains("still runs: waiting for it to end"), "\(log(board))")
        // It waited: the step had written the slot before the agent judged the install.
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        #expect(stopAgent(second) == 0)
        try board.bootInstalledSlot()
        let third = try startAgent(board, config: config)
        defer { third.stop() }
        #expect(await reach("done", version: "5.1.0", board, third), "\(log(board))")
        #expect(board.installs.count == 1, "\(board.calls)")
    }

    @Test(
        "a full disk: below the staging reserve the download waits; the disk filling mid-download fails a state write, which is retried; the update goes on by itself once space returns"
    )
    func fullDisk() async throws {
        let (server, board) = try setUp("fulldisk", running: "1.0.0")
        defer { server.remove() }
        // The firmware directory on a 20 MiB tmpfs of the test's own, to fill.
        let state = board.directory + "/fwfs"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        let mount = which("mount") ?? "/bin/mount"
        _ = try runCommand(mount, ["-t", "tmpfs", "-o", "size=20m,mode=0700", "tmpfs", state])
        defer { _ = try? runCommand(which("umount") ?? "/bin/umount", ["-l", state]) }
        try server.publish(version: "1.0.0", image: FirmwareServer.image(size: 1024, seed: 30))
        let config = try board.writeConfig(
            server: server, extra: #"stagingReserveBytes: "4MiB", maxBytesPerSecond: "1MiB","#, state: state)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(await eventually { board.firmware?.lastCheckResult?.contains("up to date") == true }, "\(log(board))")
        // 1. A release of 8 MiB with 10 MiB of the 20 taken: with the 4 MiB reserve it does not
        //    fit now, so the download waits (asked again on its backoff).
        let ballast = state + "/ballast"
        try Data(count: 10 << 20).write(to: URL(filePath: ballast))
        let size = 8 << 20
        let image = FirmwareServer.image(size: size, seed: 31)
        try server.publish(version: "1.1.0", image: image)
        #expect(
            await eventually { board.firmware?.waiting?.hasPrefix("not enough space in ") == true },
            "\(String(describing: board.firmware)) \(log(board))")
        // 2. Room: the download starts (1 MiB/s); the file system fills up under it: the write
        //    of the image fails, and so does the state's; it is retried.
        unlink(ballast)
        let partial = state + "/staging/image.part"
        func partialBytes() -> Int { ((try? FileManager.default.attributesOfItem(atPath: partial))?[.size] as? Int) ?? 0 }
        #expect(await eventually(within: .seconds(60)) { partialBytes() > 1 << 20 }, "\(log(board))")
        let filler = state + "/filler"
        let fd = open(filler, O_WRONLY | O_CREAT, 0o600)
        let block = [UInt8](repeating: 0, count: 65536)
        while block.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) > 0 {}
        close(fd)
        #expect(
            await eventually { log(board).contains("firmware state not written: the update waits and tries again") }, "\(log(board))")
        #expect(!FileManager.default.fileExists(atPath: board.directory + "/slot.img"))
        // 3. Space returns: the update goes on by itself, no restart, from the bytes on disk.
        unlink(filler)
        #expect(await reach("installed", version: "1.1.0", board, agent, within: .seconds(300)), "\(log(board))")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        #expect(board.installs.count == 1)
        #expect(stopAgent(agent) == 0)
    }

    @Test(
        "the firmware file system read-only at start: telemetry flows, firmware says unavailable and why, and updates start by themselves once it is writable"
    )
    func readOnlyFirmwareDirectory() async throws {
        let (server, board) = try setUp("readonly", running: "1.0.0")
        defer { server.remove() }
        let state = board.directory + "/fwfs"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        let mount = which("mount") ?? "/bin/mount"
        _ = try runCommand(mount, ["-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", state])
        defer { _ = try? runCommand(which("umount") ?? "/bin/umount", ["-l", state]) }
        let recorder = try RecordingInflux(directory: board.directory)
        defer { recorder.stop() }
        recorder.open()
        try server.publish(version: "1.0.0", image: FirmwareServer.image(size: 1024, seed: 40))
        // Read-only from boot on (an fsck that found errors, a failing eMMC the kernel protected).
        _ = try runCommand(mount, ["-o", "remount,ro", state])
        let config = try board.writeConfig(server: server, telemetry: "http://127.0.0.1:\(recorder.port)", state: state)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        #expect(
            await eventually { board.status?.pid == agent.pid && board.firmware?.phase == "unavailable" },
            "the agent did not run without its firmware directory: \(log(board))")
        #expect(board.firmware?.reason?.contains("Read-only file system") == true, "\(String(describing: board.firmware))")
        // Telemetry goes on beside the broken firmware section, twice over.
        for round in 0..<2 {
            try dropInSpool(
                (0..<10).map { "ro,round=\(round) seq=\($0)i" }.joined(separator: "\n") + "\n", as: "ro\(round).lp", in: board.directory)
            #expect(
                await eventually(within: .seconds(30)) {
                    ((try? recorder.lines()) ?? []).filter { $0.contains("round=\(round)") }.count == 10
                }, "telemetry stopped behind the firmware directory: \(log(board).suffix(2000))")
        }
        #expect(agent.isRunning)
        let image = FirmwareServer.image(size: 1 << 20, seed: 41)
        try server.publish(version: "1.1.0", image: image)
        #expect(board.installs.isEmpty)
        _ = try runCommand(mount, ["-o", "remount,rw", state])
        #expect(await reach("installed", version: "1.1.0", board, agent, within: .seconds(120)), "\(log(board))")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        #expect(board.installs.count == 1)
        #expect(stopAgent(agent) == 0)
    }

    @Test(
        "a dripping manifest server: a Content-Length above 64 KiB is refused before the body, a slow small one is cut at manifestTimeout; both say why"
    )
    func drippingManifest() async throws {
        let (server, board) = try setUp("drip", running: "1.0.0")
        defer { server.remove() }
        // Announces `length` bytes and sends one every 100 ms.
        let length = Mutex(100_000)
        let drip = try HostileServer { client in
            let head = client.readRequest()
            guard head.hasPrefix("GET ") else { return }
            let announced = length.withLock { $0 }
            guard client.send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(announced)\r\n\r\n") else { return }
            for _ in 0..<announced {
                guard client.send("{") else { return }
                usleep(100_000)
            }
        }
        defer { drip.stop() }
        let config = try board.writeConfig(server: server, extra: #"manifestTimeout: "3s","#)
        let text = try String(contentsOfFile: config, encoding: .utf8)
            .replacingOccurrences(
                of: #"manifestURL: "\#(server.base)/manifest.json""#, with: #"manifestURL: "\#(drip.base)/manifest.json""#)
        try text.write(toFile: config, atomically: true, encoding: .utf8)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        func result() -> String { board.status.flatMap { $0.pid == agent.pid ? $0.firmware?.lastCheckResult : nil } ?? "" }
        // The low-speed cut (60 s) used to end these polls; each must end within seconds.
        #expect(
            await eventually(within: .seconds(15)) { result().contains("larger than 64 KiB") }, "\(result()) \(log(board).suffix(1500))")
        length.withLock { $0 = 1000 }
        #expect(
            await eventually(within: .seconds(20)) { result().contains("the manifest: ") && !result().contains("larger than") },
            "\(result()) \(log(board).suffix(1500))")
        #expect(!result().contains("HTTP 200"), "\(result())")
        #expect(board.installs.isEmpty)
    }
}
