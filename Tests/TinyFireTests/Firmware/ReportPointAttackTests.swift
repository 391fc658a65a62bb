import FireAgent
import Foundation
import Testing

/// The firmware updater's `fire_agent_update` points go into the telemetry queue, never into
/// the spool: a writer of the spool cannot make the root agent write through its symlinks or
/// wait on its FIFOs.
extension FirmwareUpdateTests {
    @Test(
        "a spool writer's symlinks at every name the report point once used, for a minute, are never followed: the root-only file is untouched, the points reach influxd through the queue"
    )
    func reportPointsNeverTouchTheSpool() throws {
        let (server, board) = try setUp("report-points", running: "8.0.0")
        defer { server.remove() }
        try server.publish(version: "8.1.0", image: FirmwareServer.image(size: 256 << 10, seed: 82))
        let influx = try InfluxFixture()
        let config = try board.writeConfig(server: server, extra: board.confirmationSection(attempts: 2), telemetry: influx.base)
        let spool = board.directory + "/spool"
        try SpoolAttacker.makeSpool(spool)
        let secret = board.directory + "/state-of-root"
        let secretText = "{\"root\": \"only\"}\n"
        try Data(secretText.utf8).write(to: URL(filePath: secret))
        chmod(secret, 0o600)
        // The names the agent used: `.fire-agent-update-<ms>000000.lp`, predictable to the
        // millisecond. The attacker plants a symlink to the root-only file at each of the next
        // 60 s of them.
        let script = """
            import os, sys, time
            spool, secret = sys.argv[1], sys.argv[2]
            now = int(time.time() * 1000)
            for ms in range(now, now + 60000):
                os.symlink(secret, os.path.join(spool, ".fire-agent-update-%d000000.lp" % ms))
            """
        try SpoolAttacker.run([SpoolAttacker.python, "-c", script, spool, secret])
        let planted = try FileManager.default.contentsOfDirectory(atPath: spool).count

        let (status, output) = try once(config)
        #expect(status == 10 && output.contains("8.1.0 installed"), "\(status) \(output)")
        #expect(try String(contentsOfFile: secret, encoding: .utf8) == secretText, "the root-only file was written through a symlink")
        // Nothing of the agent's in the spool: the attacker's entries alone.
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool).count == planted)
        // The cycle's points wait in the telemetry queue; a sync delivers them.
        let sync = try fireAgent(["sync", "--once", "--config", config], environment: inherited())
        #expect(sync.status == 0, "\(String(describing: sync.stderr))")
        let rows = try influx.rows(#"SELECT "state" FROM "fire_agent_update" WHERE "device" = 'board-fw' AND "version" = '8.1.0'"#)
        #expect(
            rows.compactMap { $0.count > 1 ? $0[1] as? String : nil } == ["downloading", "verifying", "installing", "installed"],
            "\(rows)")
        #expect(try String(contentsOfFile: secret, encoding: .utf8) == secretText)
    }
}
