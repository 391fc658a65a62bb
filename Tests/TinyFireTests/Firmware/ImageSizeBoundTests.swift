import FireAgent
import Foundation
import Testing

/// A signed `size` no image has: refused when the manifest is read (at most 2^48), and an
/// update an older agent recorded with one is failed at the next start, never acted on. Before,
/// `size - onDisk + stagingReserveBytes` overflowed near 2^63 and the agent trapped, at every
/// start, before it polled: no remote recovery.
extension FirmwareUpdateTests {
    @Test(
        "signed manifests with a size past 2^48 (2^63-1, then 2^62) are refused by name; the agent runs on and installs the next good release"
    )
    func oversizeManifestRefused() async throws {
        let (server, board) = try setUp("oversize", running: "9.0.0")
        defer { server.remove() }
        let image = FirmwareServer.image(size: 256 << 10, seed: 95)
        let config = try board.writeConfig(server: server)
        try server.publish(version: "9.1.0", image: image, size: Int.max)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        for (version, size) in [("9.1.0", Int.max), ("9.1.1", 1 << 62)] {
            if version != "9.1.0" { try server.publish(version: version, image: image, size: size) }
            let reason = "badManifest: size \(size) is above 281474976710656 bytes (2^48), the largest image accepted"
            #expect(
                await eventually(within: .seconds(60)) { board.status?.pid == agent.pid && board.firmware?.reason == reason },
                "\(String(describing: board.firmware)) \(log(board))")
            #expect(board.firmware?.phase == "failed" && agent.isRunning, "\(log(board))")
            #expect(
                await eventually(within: .seconds(30)) { server.statusEvents().contains { $0["reason"] as? String == reason } },
                "\(server.statusEvents())")
        }
        #expect(server.accessLines(containing: "/image.bin").isEmpty, "fetched for a refused manifest")
        try server.publish(version: "9.2.0", image: image)
        #expect(await reach("installed", version: "9.2.0", board, agent), "\(log(board))")
        #expect(try Data(contentsOf: URL(filePath: board.directory + "/slot.img")) == image)
        #expect(stopAgent(agent) == 0)
    }

    @Test(
        "a state.json whose update has a size past 2^48 (an older agent's, its signed manifest kept): the cycle fails it with the reason instead of trapping, polls, and the next good release installs"
    )
    func oversizeRecordedUpdateFailed() throws {
        let (server, board) = try setUp("oversize-state", running: "9.0.0")
        defer { server.remove() }
        let image = FirmwareServer.image(size: 256 << 10, seed: 96)
        // 2^63 - 2^20: exactly representable as the JSON number state.json holds; with the
        // 16 MiB reserve added it overflowed.
        let size = 9_223_372_036_853_727_232
        let manifest = try server.publish(version: "9.5.0", image: image, size: size)
        let digest = SHA256Hasher.digest(of: [UInt8](manifest)).map { String(format: "%02x", $0) }.joined()
        // What an older agent left: the signed manifest kept under its digest, the update downloading.
        let firmware = board.directory + "/firmware"
        try FileManager.default.createDirectory(atPath: firmware + "/offers", withIntermediateDirectories: true)
        chmod(firmware, 0o700)
        chmod(firmware + "/offers", 0o700)
        try FileManager.default.copyItem(atPath: server.www + "/manifest.json", toPath: firmware + "/offers/\(digest).json")
        try FileManager.default.copyItem(atPath: server.www + "/manifest.json.sig", toPath: firmware + "/offers/\(digest).json.sig")
        let state = """
            {"history": [], "refused": [], "highestAccepted": "9.0.0",
             "update": {"phase": "downloading", "manifestDigest": "\(digest)", "version": "9.5.0", "fromVersion": "9.0.0",
                        "size": \(size), "freshDownloads": 0, "failedAttempts": 0, "since": 1800000000}}
            """
        try state.write(toFile: firmware + "/state.json", atomically: true, encoding: .utf8)
        // The server offers nothing now: the kept manifest is all the agent has.
        try FileManager.default.removeItem(atPath: server.www + "/manifest.json")
        try FileManager.default.removeItem(atPath: server.www + "/manifest.json.sig")
        let config = try board.writeConfig(server: server)

        var (status, output) = try once(config)
        #expect(
            status == 13
                && output.contains(
                    "9.5.0 failed: badManifest: the update recorded in the firmware state is not acted on: size \(size) is above 281474976710656 bytes (2^48)"
                ), "\(status) \(output)")
        #expect(server.accessLines(containing: "/manifest.json ").count == 1, "polled: \(server.accessLines(containing: "/manifest.json"))")
        #expect(server.accessLines(containing: "/image.bin").isEmpty)
        #expect(
            server.statusEvents().contains {
                $0["state"] as? String == "failed" && ($0["reason"] as? String)?.contains("size \(size)") == true
            }, "\(server.statusEvents())")
        // Next cycle: nothing to act on; then a good release installs.
        (status, output) = try once(config)
        #expect(status == 0, "\(status) \(output)")
        try server.publish(version: "9.6.0", image: image)
        (status, output) = try once(config)
        #expect(status == 10 && output.contains("9.6.0 installed"), "\(status) \(output)")
        #expect(board.installs == ["install \(board.directory)/firmware/staging/image.bin 9.6.0"], "\(board.calls)")
    }
}
