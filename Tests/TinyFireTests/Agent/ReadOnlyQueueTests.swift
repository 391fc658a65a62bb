import FireAgent
import Foundation
import Testing

@Suite("the queue's file system read-only", .serialized)
struct ReadOnlyQueueTests {
    @Test("sync --once on a read-only queue: a typed error naming the directory, the spool file untouched; delivered once writable")
    func readOnlyQueue() throws {
        let directory = try agentScratch("ro-queue")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let queue = directory + "/queue"
        try FileManager.default.createDirectory(atPath: queue, withIntermediateDirectories: true)
        let mount = which("mount") ?? "/bin/mount"
        _ = try runCommand(mount, ["-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", queue])
        defer { _ = try? runCommand(which("umount") ?? "/bin/umount", ["-l", queue]) }
        let recorder = try RecordingInflux(directory: directory)
        defer { recorder.stop() }
        recorder.open()
        let text = """
            {
              device: { id: "board-ro" },
              server: { url: "http://127.0.0.1:\(recorder.port)", connectTimeout: "2s" },
              telemetry: { influx: { database: "fleet" }, spoolDirectory: "spool",
                           collectors: { cpu: false, memory: false, load: false, uptime: false, disk: false, network: false,
                                         thermal: false, pressure: false, agent: false } },
              queue: { directory: "queue" },
            }
            """
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        let config = directory + "/agent.json5"
        try dropInSpool("ro,file=a seq=1i 1700000000000000000\n", as: "a.lp", in: directory)
        let first = try runCapturingOutput(try fireAgentPath(), ["sync", "--once", "--config", config])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try recorder.lines().count == 1)

        _ = try runCommand(mount, ["-o", "remount,ro", queue])
        let spooled = "ro,file=b seq=2i 1700000000000000001\n"
        try dropInSpool(spooled, as: "b.lp", in: directory)
        let before = try FileManager.default.attributesOfItem(atPath: directory + "/spool/b.lp")
        let refused = try runCapturingOutput(try fireAgentPath(), ["sync", "--once", "--config", config])
        let message = refused.stderr
        #expect(refused.status != 0, "a read-only queue was taken for a working one: \(message)")
        #expect(message.contains(queue) && message.lowercased().contains("read-only"), "\(message)")
        // Not rewritten, not moved: the file waits as it was.
        let after = try FileManager.default.attributesOfItem(atPath: directory + "/spool/b.lp")
        #expect(try String(contentsOfFile: directory + "/spool/b.lp", encoding: .utf8) == spooled)
        #expect(
            before[.modificationDate] as? Date == after[.modificationDate] as? Date
                && before[.systemFileNumber] as? Int == after[.systemFileNumber] as? Int)

        _ = try runCommand(mount, ["-o", "remount,rw", queue])
        let last = try runCapturingOutput(try fireAgentPath(), ["sync", "--once", "--config", config])
        #expect(last.status == 0, "\(last.stderr)")
        #expect(
            try recorder.lines().map(String.init) == [
                "ro,device=board-ro,file=a seq=1i 1700000000000000000", "ro,device=board-ro,file=b seq=2i 1700000000000000001",
            ])
        #expect(!FileManager.default.fileExists(atPath: directory + "/spool/b.lp"))
    }
}
