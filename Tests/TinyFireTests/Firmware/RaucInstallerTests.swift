import FireAgent
import Foundation
import Testing

/// A real installer: RAUC, as an A/B board runs it, with the bootloader left out.
extension FirmwareUpdateTests {
    @Test(
        "RAUC 1.8 (noop bootloader, file-backed slots, its service on a private D-Bus): the bundle lands in slot B; a passing check commits with mark-good, a failing one runs mark-bad and goes back to A",
        arguments: [true, false])
    func raucInstaller(healthy: Bool) async throws {
        let (server, board) = try setUp("rauc-\(healthy)", running: "10.0.0")
        defer { server.remove() }
        let rauc = try RaucFixture(in: board.directory + "/rauc")
        defer { rauc.stop() }
        let rootfs = FirmwareServer.image(size: 1 << 20, seed: healthy ? 101 : 102)
        try server.publish(version: "10.1.0", image: try rauc.bundle(version: "10.1.0", image: rootfs), name: "update.raucb")
        try board.setHealth(healthy ? "pass" : "fail")
        let config = try board.writeConfig(
            server: server,
            extra: board.confirmationSection(attempts: 2, timeout: "5s").replacingOccurrences(
                of: #"rollback: ["\#(board.directory)/rollback.sh"]"#, with: #"rollback: ["rauc", "status", "mark-bad", "booted"]"#),
            commands: #"install: ["rauc", "install", "{file}"], commit: ["rauc", "status", "mark-good"],"#)
        var booted = "A"
        for start in 1...4 {
            let agent = try startAgent(board, config: config, environment: rauc.environment)
            defer { agent.stop() }
            let settled = await eventually(within: .seconds(120)) {
                if board.rebootRequested { return true }
                guard let status = board.status, status.pid == agent.pid, let phase = status.firmware?.phase else { return false }
                return phase == "done" || phase == "failed"
            }
            #expect(settled, "start \(start): \(log(board)) \(rauc.serviceLog.suffix(2000))")
            #expect(stopAgent(agent) == 0)
            guard board.rebootRequested else { break }
            // The reboot: into B after the install; back to A after mark-bad.
            unlink(board.directory + "/reboot.requested")
            booted = booted == "A" ? "B" : "A"
            try rauc.boot(booted)
            try board.setVersion(booted == "B" ? "10.1.0" : "10.0.0")
            try board.reboot()
        }
        #expect(try rauc.slot("B", count: rootfs.count) == rootfs, "slot B does not hold the bundle's image")
        let text = log(board)
        #expect(text.contains("Installing `\(board.directory)/firmware/staging/image.bin` succeeded"), "\(text)")
        if healthy {
            #expect(board.firmware?.phase == "done" && text.contains("marked slot rootfs.1 as good"), "\(text)")
            #expect(!text.contains("as bad"))
        } else {
            #expect(text.contains("marked slot rootfs.1 as bad") && !text.contains("as good"), "\(text)")
            #expect(
                board.firmware?.phase == "failed"
                    && board.firmware?.reason?.hasPrefix(
                        "rolled back: 10.0.0 runs again after 10.1.0 failed (the health check failed 2 times") == true,
                "\(String(describing: board.firmware))")
            #expect(booted == "A")
        }
    }
}
