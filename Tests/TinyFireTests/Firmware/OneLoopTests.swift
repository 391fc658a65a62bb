import Foundation
import Testing

@testable import FireAgent

extension FirmwareUpdateTests {
    /// The names of the running process's threads (`/proc/PID/task/*/comm`), sorted.
    func threadNames(_ process: ChildProcess) -> [String] {
        let tasks = "/proc/\(process.pid)/task"
        let ids = (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []
        return ids.compactMap { id in
            (try? String(contentsOfFile: "\(tasks)/\(id)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        }.sorted()
    }

    /// Whether `process` runs under qemu-user: its `/proc/PID/exe` is the emulator (qemu answers
    /// for `/proc/self/exe` only). The emulator adds a thread of its own, named as the program
    /// (its RCU thread, waiting on a futex).
    func emulated(_ process: ChildProcess) -> Bool {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(process.pid)/exe"))?.contains("qemu") == true
    }

    @Test(
        "the daemon runs one event loop: telemetry, its queue, the firmware client and its report queue all on fire-agent-io; three threads in all"
    )
    func oneEventLoop() async throws {
        let (server, board) = try setUp("one-loop", running: "2.0.0")
        defer { server.remove() }
        try server.publish(version: "2.1.0", image: FirmwareServer.image(size: 1 << 20, seed: 63))
        let influx = try InfluxFixture()
        let config = try board.writeConfig(server: server, telemetry: influx.base)
        let agent = try startAgent(board, config: config)
        defer { agent.stop() }
        // Every client has worked: the image downloaded and installed, the reports posted, the
        // update's points delivered to influxd through the telemetry queue.
        #expect(await reach("installed", version: "2.1.0", board, agent), "\(log(board))")
        #expect(await eventually(within: .seconds(60)) { server.statusEvents().count >= 4 }, "\(server.statusEvents())")
        #expect(
            await eventually(within: .seconds(60)) { ((try? influx.count("fire_agent_update", field: "state")) ?? 0) >= 4 },
            "\(log(board))")
        // Resting (short-lived helper threads, a DNS lookup or a trust callback, are gone):
        // the main thread, the one event loop, the updater's thread.
        // Under qemu-user, also the emulator's own.
        let expected = (emulated(agent) ? ["fire-agent"] : []) + ["fire-agent", "fire-agent-fw", "fire-agent-io"]
        var names: [String] = []
        #expect(
            await eventually(within: .seconds(30)) {
                names = threadNames(agent)
                return names == expected
            }, "threads: \(names) (expected \(expected))\n\(agent.threadReport)")
        #expect(stopAgent(agent) == 0)
    }
}
