import Foundation
import Testing

@testable import FireAgent
@testable import TinyFire

@Suite("fire-agent: a 400 costs only the lines the server refused, against a real influxd", .serialized)
struct RefusedLinesTests {
    @Test(
        "a field type conflict in a batch of two writers: halves down to the refused line, which alone is a dead letter; 20 good points arrive once"
    )
    func fieldTypeConflict() throws {
        let influx = try InfluxFixture()
        let directory = try agentScratch("conflict")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let collectorsOff =
            "cpu: false, memory: false, load: false, uptime: false, disk: false, network: false, thermal: false, pressure: false, agent: false"
        let text = """
            { device: { id: "board-7" }, server: { url: "\(influx.base)", connectTimeout: "2s", requestTimeout: "10s" },
              telemetry: { influx: { database: "fleet", precision: "ns" }, spoolDirectory: "spool", collectors: { \(collectorsOff) } },
              queue: { directory: "queue", retry: { initial: "100ms", maximum: "1s" } } }
            """
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        let agent = try TelemetryAgent.testing(try AgentConfig.load(path: directory + "/agent.json5"))
        defer { agent.close() }
        let deadLetters = agent.config.queue.deadLetterDirectory

        // Writer A's first file makes `v` an integer field.
        try dropInSpool("conflict,writer=a v=1i 1700000000000000000\n", as: "a1.lp", in: directory)
        let first = agent.syncOnce()
        #expect(first.failure == nil && first.remaining == 0 && first.delivered == 1, "\(first)")

        // One batch from two writers: writer A's `v` as a string, which influxd refuses with 400
        // (1.x writes the other points of the batch all the same), and 20 points of writer B
        // without a time (the agent stamps them once, when it reads the file; their file ends
        // the batch that A's timed line opened).
        let bad = #"conflict,writer=a v="text" 1700000000000000001"#
        let good = (0..<20).map { "conflict,writer=b,n=\($0) v=\($0)i" }
        try dropInSpool(bad + "\n", as: "a2.lp", in: directory)
        try dropInSpool(good.joined(separator: "\n") + "\n", as: "b.lp", in: directory)
        var report = agent.syncOnce()
        #expect(report.spooledLines == 21, "\(report)")
        var discarded = report.discarded
        // The halves are queued at the tail; a further flush may be needed for the last ones.
        for _ in 0..<8 where report.remaining > 0 {
            report = agent.syncOnce()
            discarded += report.discarded
        }
        #expect(report.remaining == 0 && report.failure == nil, "\(report)")

        // Every good point arrived, each once: a half sent again after influxd had written its
        // good points wrote the same points (same tags, same time), not new ones.
        let points = try influx.rows(#"SELECT "v", "n" FROM "conflict" WHERE "writer" = 'b'"#)
        #expect(points.count == 20, "\(points)")
        #expect(Set(points.compactMap { $0.last as? String }) == Set((0..<20).map { "\($0)" }))
        #expect(try influx.rows(#"SELECT "v" FROM "conflict" WHERE "writer" = 'a'"#).count == 1, "writer A's integer point")

        // The 21-line batch was split at least four times (21, 10, 5 and 2 lines with the
        // refused one first) before it stood alone: the one dead letter, that line only.
        #expect(discarded >= 5, "replaced batches and the dead letter: \(discarded)")
        let names = try FileManager.default.contentsOfDirectory(atPath: deadLetters).sorted()
        let letters = names.filter { $0.hasSuffix(".json") }
        #expect(letters.count == 1 && names.count == 2, "\(names)")
        if let letter = letters.first {
            let description = try String(contentsOfFile: deadLetters + "/" + letter, encoding: .utf8)
            #expect(description.contains("\"status\" : \"400\"") && description.contains("field type conflict"), "\(description)")
            let body = try Data(contentsOf: URL(filePath: deadLetters + "/" + letter.dropLast(5) + ".body"))
            let lines = String(decoding: try Gzip.decompress(Array(body), limit: 1 << 20), as: UTF8.self).split(separator: "\n")
            // Writer A's line alone (with whatever tags the agent adds to spool points).
            #expect(lines.count == 1 && lines.allSatisfy { $0.contains("writer=a") && $0.hasSuffix(#" v="text" 1700000000000000001"#) })
        }
        #expect(agent.tracker.snapshot.deadLetters == 1)
    }
}
