import Foundation
import HTTPTypes
import Synchronization
import Testing

@testable import FireAgent
@testable import TinyFire

extension TelemetryAgent {
    /// The agent for `config`, logging to standard error.
    static func testing(_ config: AgentConfig) throws(AgentError) -> TelemetryAgent {
        try TelemetryAgent(config: config, logger: Logger(label: "test"))
    }
}

@Suite("fire-agent sync against a real influxd", .serialized)
struct AgentSyncTests {
    /// A config for `influx` with everything under `directory`.
    func config(_ influx: InfluxFixture, in directory: String, extra: String = "") throws -> AgentConfig {
        let text = """
            {
              device: { id: "board-7", labels: { site: "lab" } },
              server: { url: "\(influx.base)", connectTimeout: "2s", requestTimeout: "10s" },
              telemetry: { influx: { database: "fleet", precision: "ns" }, spoolDirectory: "spool" },
              queue: { directory: "queue" },
              \(extra)
            }
            """
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        return try AgentConfig.load(path: directory + "/agent.json5")
    }

    @Test(
        "sync --once: points arrive with measurements, device tags and fields; a spool file is delivered once, its bad line rejected")
    func syncOnce() throws {
        let influx = try InfluxFixture()
        let directory = try agentScratch("sync")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let agent = try TelemetryAgent.testing(try config(influx, in: directory))
        defer { agent.close() }
        try dropInSpool("app,unit=a requests=5i 1700000000000000000\napp value=hot\napp,unit=b requests=7i\n", as: "app.lp", in: directory)
        let report = agent.syncOnce()
        #expect(report.failure == nil && report.remaining == 0, "\(report)")
        #expect(report.spooledLines == 2 && report.rejectedLines == 1)
        let measurements = try influx.measurements()
        for expected in ["mem", "system", "fire_agent", "app"] { #expect(measurements.contains(expected), "\(measurements)") }
        let tagged = try influx.rows(#"SELECT "total" FROM "mem" WHERE "device" = 'board-7' AND "site" = 'lab'"#)
        #expect(tagged.count == 1)
        #expect(try influx.count("app", field: "requests") == 2)
        // The spool file is gone; the refused line is kept with its number and reason.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/spool").sorted() == ["rejected"])
        let rejected = try String(contentsOfFile: directory + "/spool/rejected/app.lp", encoding: .utf8)
        #expect(rejected.contains("app.lp:2: column 11: 'hot' is not a field value") && rejected.contains("app value=hot"))
        // A second cycle sends the spool file's points no more.
        let again = agent.syncOnce()
        #expect(again.spooledLines == 0 && again.failure == nil)
        #expect(try influx.count("app", field: "requests") == 2)
    }

    @Test(
        "sync --once through the environment's proxy (what EnvironmentFile= gives the unit): via squid; a dead proxy queues, loses nothing")
    func syncThroughEnvironmentProxy() throws {
        let proxy = try proxies()
        let influx = try InfluxFixture()
        let directory = try agentScratch("sync-proxy")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = try config(influx, in: directory)
        try dropInSpool("proxied,unit=a requests=1i\n", as: "a.lp", in: directory)
        // A proxy that is not there: the points wait in the queue (sync exits non-zero).
        let dead = environmentWithoutProxies(["http_proxy": "http://127.0.0.1:\(freePort())"])
        let failed = try fireAgent(["sync", "--once", "--config", directory + "/agent.json5"], environment: dead)
        #expect(failed.status != 0 && failed.stderr.contains("proxy"), "\(failed.stderr)")
        #expect(try influx.count("proxied", field: "requests") == 0)
        // Through squid (HTTP_PROXY, which curl ignores, points at the dead one).
        let open = environmentWithoutProxies(["http_proxy": "http://127.0.0.1:\(proxy.openPort)", "HTTP_PROXY": "http://127.0.0.1:1"])
        let sent = try fireAgent(["sync", "--once", "--config", directory + "/agent.json5"], environment: open)
        #expect(sent.status == 0, "\(sent.stderr)")
        #expect(try influx.count("proxied", field: "requests") == 1)
        #expect(!proxy.squidLines(containing: "POST \(influx.base)/write").isEmpty)
    }

    @Test("disk points of two boards are two series in influxd: the board's device tag, the mount's device in disk_device")
    func diskSeriesPerBoard() throws {
        let influx = try InfluxFixture()
        let directory = try agentScratch("disk-series")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for board in ["board-a", "board-b"] {
            let home = directory + "/" + board
            try FileManager.default.createDirectory(atPath: home + "/spool", withIntermediateDirectories: true)
            let text = """
                {
                  device: { id: "\(board)" },
                  server: { url: "\(influx.base)", connectTimeout: "2s", requestTimeout: "10s" },
                  telemetry: { influx: { database: "fleet", precision: "ns" }, spoolDirectory: "spool",
                               collectors: { cpu: false, memory: false, load: false, uptime: false, disk: true, network: false,
                                             thermal: false, pressure: false, agent: false } },
                  queue: { directory: "queue" },
                }
                """
            try Data(text.utf8).write(to: URL(filePath: home + "/agent.json5"))
            let agent = try TelemetryAgent.testing(try AgentConfig.load(path: home + "/agent.json5"))
            defer { agent.close() }
            let report = agent.syncOnce()
            #expect(report.failure == nil && report.remaining == 0, "\(report)")
        }
        let keys = try influx.rows(#"SHOW SERIES FROM "disk" WHERE "path" = '/'"#).compactMap { $0.first as? String }
        #expect(keys.count == 2, "one series per board: \(keys)")
        for board in ["board-a", "board-b"] {
            #expect(keys.contains { $0.contains("device=\(board)") && $0.contains("disk_device=") }, "\(board): \(keys)")
        }
    }

    @Test(
        "a new server.url carries what was queued for the old one: the queued batch goes to the server configured now, at the precision its lines were stamped in"
    )
    func queuedBatchesFollowTheServer() throws {
        let influx = try InfluxFixture()
        let directory = try agentScratch("moved")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The board first points at a server that is gone (nothing listens there), in seconds.
        let gone = "http://127.0.0.1:\(freePort())"
        var text = """
            {
              device: { id: "board-7" },
              server: { url: "\(gone)", connectTimeout: "2s", requestTimeout: "10s" },
              telemetry: { influx: { database: "old", precision: "s" }, spoolDirectory: "spool",
                           collectors: { cpu: false, memory: false, load: false, uptime: false, disk: false, network: false,
                                         thermal: false, pressure: false, agent: false } },
              queue: { directory: "queue" },
            }
            """
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        do {
            let old = try TelemetryAgent.testing(try AgentConfig.load(path: directory + "/agent.json5"))
            defer { old.close() }
            try dropInSpool("moved n=1i 1700000000\n", as: "a.lp", in: directory)
            let report = old.syncOnce()
            #expect(report.queuedBatches == 1 && report.remaining == 1 && report.failure?.contains(gone) == true, "\(report)")
        }
        // Then the operator gives it the real server, another database and nanoseconds.
        text = text.replacingOccurrences(of: gone, with: influx.base).replacingOccurrences(of: "\"old\"", with: "\"fleet\"")
            .replacingOccurrences(of: "\"s\"", with: "\"ns\"")
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        let agent = try TelemetryAgent.testing(try AgentConfig.load(path: directory + "/agent.json5"))
        defer { agent.close() }
        let report = agent.syncOnce()
        #expect(report.failure == nil && report.remaining == 0, "\(report)")
        // Stored once, at 2023-11-14T22:13:20Z: read in seconds as it was stamped, not as nanoseconds.
        let rows = try influx.rows(#"SELECT "n" FROM "moved""#)
        #expect(rows.count == 1 && (rows.first?.first as? String) == "2023-11-14T22:13:20Z", "\(rows)")
    }

    @Test(
        "an outage: batches wait in the queue while influxd is down, and every point arrives exactly once after it returns")
    func outage() throws {
        let influx = try InfluxFixture()
        let directory = try agentScratch("outage")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let agent = try TelemetryAgent.testing(try config(influx, in: directory))
        defer { agent.close() }
        influx.stop()
        var expected = 0
        for round in 0..<5 {
            try dropInSpool("probe,round=r\(round) n=\(round)i \(1_700_000_000_000_000_000 + round)\n", as: "p\(round).lp", in: directory)
            expected += 1
            let report = agent.syncOnce()
            #expect(report.failure != nil && report.remaining >= round + 1, "round \(round): \(report)")
            // Said once, as the library says it: the request, where it failed, why.
            let failure = report.failure ?? ""
            #expect(
                failure.hasPrefix("POST \(influx.base)/write?db=fleet&precision=ns failed while connecting: ")
                    && failure.contains("Connection refused") && !failure.contains("failed: POST"), "\(failure)")
        }
        #expect(agent.queueFigures.records >= 5)
        try influx.start()
        let report = agent.syncOnce()
        #expect(report.failure == nil && report.remaining == 0, "\(report)")
        #expect(try influx.count("probe", field: "n") == expected)
        // Delivered once: a flush after everything arrived sends nothing more.
        #expect(agent.syncOnce().delivered >= 1)  // only the new round's batch
        #expect(try influx.count("probe", field: "n") == expected)
    }

    @Test(
        "a full queue takes part of a spool file: the file stays untouched, its progress is kept, the rest is sent once later")
    func fullQueueKeepsTheRest() throws {
        let influx = try InfluxFixture()
        let directory = try agentScratch("full")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let collectorsOff =
            "cpu: false, memory: false, load: false, uptime: false, disk: false, network: false, thermal: false, pressure: false, agent: false"
        var text = """
            {
              device: { id: "board-7" },
              server: { url: "\(influx.base)", connectTimeout: "2s" },
              telemetry: { influx: { database: "fleet", precision: "ns" }, spoolDirectory: "spool",
                           batch: { maxPoints: 1 }, collectors: { \(collectorsOff) } },
              queue: { directory: "queue", maxRecords: 10 },
            }
            """
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        let agent = try TelemetryAgent.testing(try AgentConfig.load(path: directory + "/agent.json5"))
        defer { agent.close() }
        influx.stop()
        // 15 points without a time (they get the time the file is first read) and one bad line.
        text = (0..<15).map { "untimed,n=\($0) v=\($0)i\n" }.joined() + "untimed v=oops\n"
        try dropInSpool(text, as: "u.lp", in: directory)
        let first = agent.syncOnce()
        #expect(first.spooledLines == 10 && first.remaining == 10, "\(first)")
        // The file is as it was (no rewrite: no wear, no window to lose it); the progress record
        // says where the next line starts and which time the untimed lines carry.
        #expect(try String(contentsOfFile: directory + "/spool/u.lp", encoding: .utf8) == text)
        func progress() throws -> SpoolProgress? {
            try #require(SpoolProgressSlots.decode(Array(try Data(contentsOf: URL(filePath: directory + "/queue/spool-progress"))))).record
        }
        let record = try #require(try progress())
        let tenLines = text.split(separator: "\n")[..<10].map { $0.utf8.count + 1 }.reduce(0, +)
        #expect(record.name == "u.lp" && record.lineNumber == 10 && record.offset == Int64(tenLines), "\(record)")
        // While the queue is full, further cycles leave the file and the record alone.
        for _ in 0..<3 { #expect(agent.syncOnce().spooledLines == 0) }
        #expect(try progress() == record)
        try influx.start()
        // This cycle's spool finds the queue still full; the flush then empties it.
        _ = agent.syncOnce()
        let last = agent.syncOnce()
        #expect(last.failure == nil && last.remaining == 0, "\(last)")
        #expect(try influx.count("untimed", field: "v") == 15)
        // Every untimed point carries the one time the file got when first read.
        let times = Set(try influx.rows(#"SELECT "v" FROM "untimed""#).map { "\($0.first ?? "")" })
        #expect(times.count == 1, "\(times)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/spool").sorted() == ["rejected"])
        #expect(try progress() == nil)
        // The bad line was recorded once.
        let rejected = try String(contentsOfFile: directory + "/spool/rejected/u.lp", encoding: .utf8)
        #expect(rejected.components(separatedBy: "untimed v=oops").count == 2, "\(rejected)")
    }

    @Test(
        "a spool file over 1 MiB arrives whole; one over spoolMaxFileBytes is set aside untouched, not sent")
    func largeSpoolFiles() throws {
        let influx = try InfluxFixture()
        let directory = try agentScratch("large")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let agent = try TelemetryAgent.testing(try config(influx, in: directory))
        // 50,000 lines, about 1.8 MiB: read whole (a reader capped at 1 MiB would lose the rest).
        let big = (0..<50_000).map { "big,n=\($0 % 100) v=\($0)i \(1_700_000_000_000_000_000 + $0)\n" }.joined()
        #expect(big.utf8.count > 1 << 20)
        try dropInSpool(big, as: "big.lp", in: directory)
        let report = agent.syncOnce()
        #expect(report.spooledLines == 50_000 && report.failure == nil, "\(report)")
        #expect(try influx.count("big", field: "v") == 50_000)
        agent.close()

        // With a 64 KiB bound, a 100 KiB file is moved to rejected/ as it was, and nothing of it is sent.
        var text = try String(contentsOfFile: directory + "/agent.json5", encoding: .utf8)
        text = text.replacingOccurrences(of: "spoolDirectory: \"spool\"", with: "spoolDirectory: \"spool\", spoolMaxFileBytes: \"64KiB\"")
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        let bounded = try TelemetryAgent.testing(try AgentConfig.load(path: directory + "/agent.json5"))
        defer { bounded.close() }
        let large = String(big.prefix(100 * 1024))
        try dropInSpool(large, as: "large.lp", in: directory)
        let refused = bounded.syncOnce()
        #expect(refused.spooledLines == 0 && refused.rejectedLines == 1, "\(refused)")
        #expect(try String(contentsOfFile: directory + "/spool/rejected/large.lp", encoding: .utf8) == large)
        #expect(!FileManager.default.fileExists(atPath: directory + "/spool/large.lp"))
        #expect(try influx.count("big", field: "v") == 50_000)
    }

    @Test("the server's answer through the agent's judge: 400 and 413 halves, Retry-After, 401 kept, an old batch let go")
    func judge() throws {
        let lines = (0..<4).map { "m x=\($0)i \($0)" }
        func answer(_ status: Int, retryAfter: String? = nil, message: String = "", age: Duration? = .zero, requestBody: [UInt8]? = nil)
            throws -> JudgedBatch
        {
            try InfluxWrite.judge(status, retryAfter: retryAfter, message: message, lines: lines, requestBody: requestBody, age: age)
        }
        #expect(try answer(204) == .delivered)
        // A 400 refuses lines of the batch: halves, down to the refused lines (DeliveryDecisionTests).
        #expect(try answer(400, message: #"{"error":"unable to parse"}"#) == answer(413))
        #expect(try answer(413) == .split([["m x=0i 0", "m x=1i 1"], ["m x=2i 2", "m x=3i 3"]]))
        #expect(try answer(429, retryAfter: "5") == .retryAfter(.seconds(5)))
        #expect(try answer(401, message: "authorization failed") == .retry, "401 keeps the batch")
        #expect(try answer(200, message: "<html>portal</html>") == .retry, "a 200 is not InfluxDB's 204")
        if case .deadLetter(let reason) = try answer(503, age: .seconds(7200)) {
            #expect(reason.contains("queue.maxRecordAge"))
        } else {
            Issue.record("a batch refused for longer than maxRecordAge must not block the queue")
        }
        // An age the clock cannot vouch for (queued in an earlier boot, clock untrusted): kept.
        #expect(try answer(503, age: nil) == .retry, "an unknown age must not dead-letter")
        // A 413 for a body that is not gzip cannot be split.
        #expect(try answer(413, requestBody: [1, 2, 3]) == .deadLetter(reason: "HTTP 413 (a single line larger than the server accepts)"))
    }

    @Test(
        "v2: POST /api/v2/write with org, bucket, precision and Authorization: Token, gzip'd; v1 credentials as Basic")
    func requestShapes() throws {
        let seen = Mutex<[String]>([])
        let server = try HostileServer { client in
            let head = client.readRequest()
            seen.withLock { $0.append(head) }
            let ok =
                head.contains("POST /api/v2/write?org=acme&bucket=fleet&precision=ms ") && head.contains("Authorization: Token s3cret")
                && head.contains("Content-Encoding: gzip")
            client.send(ok ? "HTTP/1.1 204 No Content\r\n\r\n" : "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
            client.close()
        }
        defer { server.stop() }
        let directory = try agentScratch("v2")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let text = """
            { device: { id: "b" }, server: { url: "\(server.base)" },
              telemetry: { influx: { version: 2, org: "acme", bucket: "fleet", token: "s3cret" },
                           collectors: { cpu: false, disk: false, network: false, thermal: false, pressure: false } },
              queue: { directory: "queue" } }
            """
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        chmod(directory + "/agent.json5", 0o600)  // it holds the token
        let agent = try TelemetryAgent.testing(try AgentConfig.load(path: directory + "/agent.json5"))
        defer { agent.close() }
        let report = agent.syncOnce()
        #expect(report.failure == nil && report.delivered == 1, "\(report) \(seen.withLock { $0 })")
        // The token is added when sending: it is not in the queue's files.
        let journal = try FileManager.default.subpathsOfDirectory(atPath: directory + "/queue").compactMap {
            try? Data(contentsOf: URL(filePath: directory + "/queue/" + $0))
        }
        #expect(!journal.contains { $0.range(of: Data("s3cret".utf8)) != nil })
        #expect(InfluxWrite.authorization(for: .v1(database: "d", retentionPolicy: nil, username: "u", password: "p")) == "Basic dTpw")
        // The core's base64 of the UTF-8 text, as TinyFire's (Foundation's) header has it.
        for (user, password) in [("fleet", "pässwörd:x"), ("", ""), ("a", "bc"), ("über", "🔥🔥🔥")] {
            #expect(
                InfluxWrite.authorization(for: .v1(database: "d", retentionPolicy: nil, username: user, password: password))
                    == HTTPHeader.authorization(username: user, password: password).value)
        }
        #expect(InfluxWrite.authorization(for: .v1(database: "d", retentionPolicy: nil, username: "u", password: nil)) == nil)
    }

    /// A config of `text`'s server part with every collector off and a spool directory.
    func quietConfig(server: String, in directory: String, batch: String = "") throws -> AgentConfig {
        let collectorsOff =
            "cpu: false, memory: false, load: false, uptime: false, disk: false, network: false, thermal: false, pressure: false, agent: false"
        let text = """
            { device: { id: "board-7" }, server: { \(server), connectTimeout: "2s", requestTimeout: "10s" },
              telemetry: { influx: { database: "fleet", precision: "ns" }, spoolDirectory: "spool", \(batch)
                           collectors: { \(collectorsOff) } },
              queue: { directory: "queue", retry: { initial: "100ms", maximum: "1s" } } }
            """
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        return try AgentConfig.load(path: directory + "/agent.json5")
    }

    @Test(
        "413 from the server: the batch is split in halves until each fits, every line arrives once, none is dead-lettered")
    func splitOnTooLarge() throws {
        let received = Mutex<[String]>([])
        let server = try HostileServer { client in
            while true {
                let head = client.readRequest()
                guard head.hasPrefix("POST ") else { return }
                let plain = (try? Gzip.decompress(Array(client.lastBody), limit: 1 << 20)) ?? []
                let lines = String(decoding: plain, as: UTF8.self).split(separator: "\n").map(String.init)
                if lines.count > 2 {
                    client.send("HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 0\r\n\r\n")
                } else {
                    received.withLock { $0 += lines }
                    client.send("HTTP/1.1 204 No Content\r\n\r\n")
                }
            }
        }
        defer { server.stop() }
        let directory = try agentScratch("split")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let agent = try TelemetryAgent.testing(try quietConfig(server: "url: \"\(server.base)\"", in: directory))
        defer { agent.close() }
        let lines = (0..<7).map { "big,n=\($0) v=\($0)i \(1_700_000_000_000_000_000 + $0)" }
        try dropInSpool(lines.joined(separator: "\n") + "\n", as: "big.lp", in: directory)
        var report = agent.syncOnce()
        // A replacement is queued at the tail: a second flush may be needed for the last halves.
        for _ in 0..<5 where report.remaining > 0 { report = agent.syncOnce() }
        #expect(report.remaining == 0 && report.failure == nil, "\(report)")
        // (Spool points carry the board's device tag.)
        #expect(
            received.withLock { $0 }.sorted() == lines.map { $0.replacingOccurrences(of: "big,", with: "big,device=board-7,") }.sorted())
        #expect(
            waitUntil(within: .seconds(5)) { agent.tracker.snapshot.lastDelivery?.result == "delivered" },
            "\(String(describing: agent.tracker.snapshot.lastDelivery))")
    }

    @Test(
        "server.pins over TLS: the pinned key's server is reached, a MITM key signed by the same trusted CA is refused and the batch kept")
    func pinnedServer() throws {
        let server = try tlsServer()
        let pin = try #require(try Certificate.load(contentsOf: server.directory + "/server.pem").first?.publicKeyPin)
        for (port, trusted) in [(server.port, true), (server.mitmPort, false)] {
            let directory = try agentScratch("pins")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let agent = try TelemetryAgent.testing(
                try quietConfig(
                    server: "url: \"https://localhost:\(port)\", caFile: \"\(server.caFile)\", pins: [\"\(pin)\"]", in: directory))
            defer { agent.close() }
            try dropInSpool("pinned v=1i 1700000000000000000\n", as: "p.lp", in: directory)
            let report = agent.syncOnce()
            if trusted {
                // nginx has no write API: its 404 is an answer, and the batch is dead-lettered.
                #expect(report.remaining == 0 && report.discarded == 1, "\(report)")
                // The library's queue tells its tracker on a dispatch queue: a moment later.
                #expect(
                    waitUntil(within: .seconds(5)) { agent.tracker.snapshot.lastDelivery?.status == 404 },
                    "\(String(describing: agent.tracker.snapshot.lastDelivery))")
            } else {
                #expect(report.remaining == 1 && report.discarded == 0 && report.failure != nil, "\(report)")
                #expect(
                    report.failure?.contains("no public key of") == true && report.failure?.contains("is pinned (path: sha256//") == true,
                    "\(report)")
            }
        }
    }

    @Test("the write URL: the core's percent-encoding reads back as the URLComponents query items it replaced, the base path kept")
    func writeURLs() throws {
        let directory = try agentScratch("write-url")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for (base, influx) in [
            ("http://127.0.0.1:8086", #"database: "fleet", precision: "ms""#),
            ("https://db.example/influx/", #"database: "fleet data&more=1", retentionPolicy: "a+b/c", precision: "s""#),
            ("http://[::1]:9999/base", #"version: 2, org: "acme ü", bucket: "b#1?x", token: "t""#),
        ] {
            let text = """
                { device: { id: "b" }, server: { url: "\(base)" }, telemetry: { influx: { \(influx) } }, queue: { directory: "queue" } }
                """
            try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
            chmod(directory + "/agent.json5", 0o600)
            let config = try AgentConfig.load(path: directory + "/agent.json5")
            let core = try #require(TelemetryAgent.writeURL(for: config))
            // What the agent built with Foundation before: URLComponents with query items.
            var components = try #require(URLComponents(string: config.server.url.absoluteString))
            let basePath = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
            var items: [URLQueryItem]
            switch config.telemetry.api {
            case .v1(let database, let retention, _, _):
                components.path = basePath + "/write"
                items = [URLQueryItem(name: "db", value: database)]
                if let retention { items.append(URLQueryItem(name: "rp", value: retention)) }
            case .v2(let organization, let bucket, _):
                components.path = basePath + "/api/v2/write"
                items = [URLQueryItem(name: "org", value: organization), URLQueryItem(name: "bucket", value: bucket)]
            }
            items.append(URLQueryItem(name: "precision", value: config.telemetry.precision.rawValue))
            components.queryItems = items
            let library = try #require(components.url)
            let ours = try #require(URLComponents(string: core.absoluteString))
            let theirs = try #require(URLComponents(url: library, resolvingAgainstBaseURL: false))
            #expect(ours.queryItems == theirs.queryItems, "\(core) vs \(library)")
            #expect(ours.path == theirs.path && ours.host == theirs.host && ours.port == theirs.port, "\(core) vs \(library)")
        }
    }
}
