import FireAgent
// Runs TinyFireCore's pieces once on the machine (or emulator) it was built for, and says whether
// each gave the known answer: a chunked, gzip-encoded response through ResponseParser and
// ContentDecoder, SHA-256 over mbedTLS, the strict JSON reader, the monotonic clock, and errno
// through open(2). Exit status 0 only when every check passed. Built in Embedded Swift by
// cross/embedded/build.sh for x86_64, armv7 and aarch64, and run under qemu by cross/embedded/check.sh.
import Glibc
import HTTPTypes
import Synchronization
import TinyFireCore

var failures = 0
func check(_ name: String, _ ok: Bool, _ detail: String) {
    print("\(ok ? "ok  " : "FAIL") \(name): \(detail)")
    if !ok { failures += 1 }
}

func hex(_ bytes: [UInt8]) -> String {
    let digits: [Character] = Array("0123456789abcdef")
    var text = ""
    for byte in bytes {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 15)])
    }
    return text
}

// "hello, TinyFire\n" × 64, gzip-compressed, sent in three chunks with a trailer.
let response: [UInt8] = [
    72, 84, 84, 80, 47, 49, 46, 49, 32, 50, 48, 48, 32, 79, 75, 13, 10, 67, 111, 110, 116, 101, 110, 116, 45, 84, 121,
    112, 101, 58, 32, 116, 101, 120, 116, 47, 112, 108, 97, 105, 110, 13, 10, 67, 111, 110, 116, 101, 110, 116, 45, 69,
    110, 99, 111, 100, 105, 110, 103, 58, 32, 103, 122, 105, 112, 13, 10, 84, 114, 97, 110, 115, 102, 101, 114, 45, 69,
    110, 99, 111, 100, 105, 110, 103, 58, 32, 99, 104, 117, 110, 107, 101, 100, 13, 10, 13, 10, 97, 13, 10, 31, 139, 8,
    0, 0, 0, 0, 0, 2, 3, 13, 10, 49, 101, 13, 10, 203, 72, 205, 201, 201, 215, 81, 8, 201, 204, 171, 116, 203, 44, 74,
    229, 202, 24, 229, 143, 242, 71, 249, 35, 134, 15, 0, 249, 87, 124, 13, 10, 53, 13, 10, 66, 0, 4, 0, 0, 13, 10, 48,
    13, 10, 88, 45, 84, 114, 97, 105, 108, 101, 114, 58, 32, 100, 111, 110, 101, 13, 10, 13, 10,
]
let expectedBodySHA256 = "86a500edb8880e4fb1fd3295db8ee515780cf1a357d64a8426ffb46688c4bac3"

struct CheckError: Error { var text: String }

func parseResponse() throws(CheckError) -> (status: Int, body: [UInt8], trailer: String) {
    var parser = ResponseParser(isHeadRequest: false)
    var decoder: ContentDecoder?
    var status = 0
    var body: [UInt8] = []
    var trailer = ""
    // Fed 7 bytes at a time, as a slow link would deliver it.
    var offset = 0
    var end = 0
    while !parser.isComplete {
        if offset == end {
            guard end < response.count else { throw CheckError(text: "input ended before the response did") }
            end = min(response.count, end + 7)
        }
        let result: (Int, ResponseParser.Event)
        do {
            result = try response[offset..<end].withBytes { bytes throws(HTTPParseError) in try parser.parse(bytes) }
        } catch {
            throw CheckError(text: "parse error: \(error.description)")
        }
        let (consumed, event) = result
        switch event {
        case .needMore:
            offset = end
            continue
        case .informational:
            break
        case .head(let head):
            status = head.status
            do {
                if let coding = try ContentCoding.from(headerValues: head.listValues("Content-Encoding")) {
                    decoder = try ContentDecoder(coding: coding, outputCapacity: 256)
                }
            } catch {
                throw CheckError(text: "content coding: \(error.description)")
            }
        case .body(let range):
            guard let decoder else { throw CheckError(text: "a body before a decoder") }
            let base = offset
            try response[(base + range.lowerBound)..<(base + range.upperBound)].withBytes { bytes throws(CheckError) in
                try decoder.decode(bytes, corrupt: { CheckError(text: "gzip: \($0.description)") }) { decoded throws(CheckError) in
                    body.append(contentsOf: decoded)
                }
            }
        case .end(let trailers):
            trailer = trailers.first.map { "\($0.name): \($0.value)" } ?? ""
        }
        offset += consumed
    }
    do { try decoder?.finish() } catch { throw CheckError(text: "gzip end: \(error.description)") }
    return (status, body, trailer)
}

do throws(CheckError) {
    let (status, body, trailer) = try parseResponse()
    check("HTTP/1.1 chunked + gzip", status == 200 && body.count == 1024, "status \(status), \(body.count) bytes decoded")
    check("trailer", trailer == "X-Trailer: done", trailer)
    let digest = hex(SHA256.digest(of: body))
    check("SHA-256 (mbedTLS)", digest == expectedBodySHA256, digest)
} catch {
    check("HTTP/1.1 chunked + gzip", false, error.text)
}

do throws(StrictJSON.SyntaxError) {
    let document = try StrictJSON.parse(Array("{\"name\": \"fire-agent\", \"port\": 8443, \"tags\": [\"edge\", \"arm\"]}".utf8))
    var port: Int64?
    if case .object(let fields) = document, case .integer(let value) = fields["port"] { port = value }
    check("strict JSON", port == 8443, "port \(port.map { String($0) } ?? "missing")")
    _ = try StrictJSON.parse(Array("{\"a\": 1,}".utf8))
    check("strict JSON refuses a trailing comma", false, "accepted")
} catch {
    check("strict JSON refuses a trailing comma", error.description.hasPrefix("line 1, column "), error.description)
}

// The offline queue's journal: a record and the cursor, written and read back (sequence numbers
// and lengths are 64-bit on every board).
let payload = OfflineQueueJournal.Payload(
    method: "POST", url: "http://fleet.example/write?db=fleet", idempotencyKey: "k-1",
    headers: [(name: "Content-Type", value: "text/plain")], body: .inline(Array("cpu load=0.5".utf8)))
let record = OfflineQueueJournal.encode(sequence: 0x1_0000_0001, enqueuedAtMilliseconds: 1_790_000_000_000, payload: payload)
let header = record.withUnsafeBytes { OfflineQueueJournal.intactRecord(in: $0, at: 0) }
var decoded: OfflineQueueJournal.Payload?
do throws(OfflineQueueJournal.DecodeError) {
    decoded = try record[OfflineQueueJournal.headerLength...].withBytes { bytes throws(OfflineQueueJournal.DecodeError) in
        try OfflineQueueJournal.decodePayload(bytes)
    }
} catch {
    check("queue journal", false, error.description)
}
check(
    "queue journal record", header?.sequence == 0x1_0000_0001 && decoded == payload,
    "\(record.count) bytes, sequence \(header.map { String($0.sequence) } ?? "unreadable")")
let cursor = OfflineQueueJournal.Cursor(generation: 7, removedThrough: 0x1_0000_0000, delivered: 3)
let readBack = OfflineQueueJournal.encode(cursor).withUnsafeBytes { OfflineQueueJournal.decodeCursor($0) }
check("queue cursor", readBack == cursor, "removed through \(readBack.map { String($0.removedThrough) } ?? "unreadable")")

// The offline queue's store on disk: four threads enqueue at once (their appends share writes
// and syncs), the head is removed as delivered, and a second open recovers the other three.
/// A new directory `/tmp/core-check-NAME-XXXXXX`, or nil (errno says why).
func temporaryDirectory(_ name: String) -> String? {
    var template = Array("/tmp/core-check-\(name)-XXXXXX".utf8CString)
    guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else { return nil }
    return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

final class PrintSink: LogSink {
    func log(_ level: LogLevel, _ message: String) { print("  log \(level.rawValue): \(message)") }
}
func storeCheck() -> (ok: Bool, detail: String) {
    guard let directory = temporaryDirectory("queue") else { return (false, "mkdtemp: \(errnoMessage(errno))") }
    defer { _ = system("rm -rf " + directory) }
    let limits = OfflineQueueStore.Limits(
        maxRecords: 100, maxBytes: 1 << 20, dropOldest: false, segmentBytes: 64 * 1024, cursorSyncInterval: .seconds(1))
    let store: OfflineQueueStore
    do throws(OfflineQueueError) {
        store = try OfflineQueueStore(directory: directory, limits: limits, logger: PrintSink())
    } catch {
        return (false, error.description)
    }
    let bytes = OfflineQueueJournal.encodePayload(payload)
    let appended = Locked<[UInt64]>([])
    let done = Locked(0)
    for _ in 0..<4 {
        do throws(SystemResourceError) {
            try BlockingWork.run(label: "check-enqueue") {
                do throws(OfflineQueueError) {
                    try store.reserve(bytes: Int64(bytes.count + OfflineQueueJournal.headerLength))
                    let (entry, _) = try store.append(
                        payload: bytes, payloadChecksum: OfflineQueueJournal.checksum(bytes[...]), enqueuedAt: 1_790_000_000_000,
                        bodyFile: nil, bodyBytes: 0, reservedBytes: Int64(bytes.count + OfflineQueueJournal.headerLength))
                    appended.withLock { $0.append(entry.sequence) }
                } catch {
                    print("  enqueue failed: \(error)")
                }
                done.withLock { $0 += 1 }
            }
        } catch {
            return (false, error.description)
        }
    }
    let start = Instant.now()
    while done.withLock({ $0 }) < 4 && Instant.now().since(start) < .seconds(10) { usleep(1000) }
    let sequences = appended.withLock { $0 }.sorted()
    let removed = store.removeHead(sequence: 1, reason: .delivered)
    store.close()
    let reopened: OfflineQueueStore
    do throws(OfflineQueueError) {
        reopened = try OfflineQueueStore(directory: directory, limits: limits, logger: PrintSink())
    } catch {
        return (false, "reopen: \(error.description)")
    }
    defer { reopened.close() }
    let totals = reopened.totals()
    var readBackOK = false
    if let first = reopened.first {
        do throws(OfflineQueueError) {
            readBackOK = try reopened.read(first) == payload && first.sequence == 2
        } catch {
            return (false, "read: \(error.description)")
        }
    }
    let ok = sequences == [1, 2, 3, 4] && removed != nil && totals.records == 3 && totals.cursor.delivered == 1 && readBackOK
    return (
        ok,
        "appended \(sequences.map { String($0) }.joined(separator: ",")), reopened with \(totals.records) records, \(totals.cursor.delivered) delivered"
    )
}
let (storeOK, storeDetail) = storeCheck()
check("queue store (group commit, removal, recovery)", storeOK, storeDetail)

// The agent's spool, read as untrusted input, logging through the agent's Logger: good lines
// are batched, a bad line and a symlink to a file outside are set aside, the read file is gone.
func spoolCheck() -> (ok: Bool, detail: String) {
    guard let directory = temporaryDirectory("spool") else { return (false, "mkdtemp: \(errnoMessage(errno))") }
    defer { _ = system("rm -rf " + directory) }
    let spool = directory + "/spool"
    guard mkdir(spool, 0o750) == 0 else { return (false, "mkdir: \(errnoMessage(errno))") }
    let text = Array("cpu load=1i 1\nnot line protocol\ncpu load=2i 2\ncpu load=3i 3\n".utf8)
    let fd = open(spool + "/a.lp", O_WRONLY | O_CREAT | O_EXCL, 0o640)
    guard fd >= 0, text.withUnsafeBytes({ writeAll(fd, $0) }) == nil else { return (false, "write: \(errnoMessage(errno))") }
    close(fd)
    guard symlink("/etc/passwd", spool + "/evil.lp") == 0 else { return (false, "symlink: \(errnoMessage(errno))") }
    let logged = Locked<[String]>([])
    let logger = Logger(
        label: "core-check", output: LogOutput { level, message, _ in logged.withLock { $0.append("\(level.rawValue) \(message)") } },
        level: .info)
    let reader = SpoolDirectory(
        path: spool, progressPath: directory + "/progress", maxFileBytes: 1 << 20, maxLineBytes: 4096, logger: logger)
    var batcher = Batcher(maxPoints: 100, maxBytes: 64 * 1024)
    var batches: [Batch] = []
    let pass = reader.take(batcher: &batcher, stamp: { 0 }) { batch in
        batches.append(batch)
        return true
    }
    if let last = batcher.flush() { batches.append(last) }
    let lines = batches.flatMap { $0.lines }
    let leftover = access(spool + "/a.lp", F_OK) == 0
    let messages = logged.withLock { $0 }
    let ok =
        pass.queuedLines == 3 && pass.rejectedLines >= 2 && lines == ["cpu load=1i 1", "cpu load=2i 2", "cpu load=3i 3"] && !leftover
        && messages.contains { $0.hasPrefix("warning spool file has refused lines") }
    return (
        ok,
        "queued \(pass.queuedLines), set aside \(pass.rejectedLines), file \(leftover ? "left" : "removed"); \(messages.count) log entries"
    )
}
let (spoolOK, spoolDetail) = spoolCheck()
check("spool (untrusted lines and entries, the agent's logger)", spoolOK, spoolDetail)

// The config's JSON5 reader and typed reads: comments, unquoted keys, single quotes, hex, a
// trailing comma; durations and sizes with units; an unknown key with the closest known one;
// a syntax error located.
func configCheck() -> (ok: Bool, detail: String) {
    let text = """
        // the agent's config
        { server: { url: 'https://fleet.example:8086', connectTimeout: "250ms" },
          queue: { maxBytes: "64MiB", inFlight: 0x4, },
          telemetry: { intervl: 30 } }
        """
    let root: JSONValue
    do throws(ConfigError) {
        root = try JSONValue.parse(Array(text.utf8), file: "agent.json5")
    } catch {
        return (false, error.description)
    }
    let problems = ProblemList()
    let reader = ConfigReader.document(root, problems: problems)
    let server = reader.section("server")
    let url = server.requiredString("url") ?? "?"
    let connect = server.duration("connectTimeout", default: .seconds(15), minimum: .milliseconds(100))
    server.finish()
    let queue = reader.section("queue")
    let maxBytes = queue.byteCount("maxBytes", default: 1, minimum: 1)
    let inFlight = queue.integer("inFlight", default: 1, in: 1...64)
    queue.finish()
    let telemetry = reader.section("telemetry")
    _ = telemetry.duration("interval", default: .seconds(60), minimum: .seconds(1))
    telemetry.finish()
    reader.finish()
    var located = ""
    do throws(ConfigError) {
        _ = try JSONValue.parse(Array("{\n  a: 01\n}".utf8), file: "bad.json5")
    } catch {
        located = error.problems.first?.reason ?? ""
    }
    let found = problems.problems.map { $0.description }
    let ok =
        url == "https://fleet.example:8086" && connect == .milliseconds(250) && maxBytes == 64 << 20 && inFlight == 4
        && found == [#"telemetry.intervl: unknown key; did you mean "interval"?"#]
        && located == "line 2, column 6: '01': a number with a leading zero"
    return (
        ok,
        "\(url), \(ConfigReader.describe(connect)), \(ConfigReader.describeBytes(maxBytes)), \(inFlight); \(found.joined(separator: "; ")); \(located)"
    )
}
let (configOK, configDetail) = configCheck()
check("config: JSON5 and typed reads", configOK, configDetail)

// The agent's whole config: read from a file, with a firmware key read through mbedTLS, a
// proxy, URLs as the core parses them; then a file with three problems, each named.
func writeFile(_ path: String, _ text: String, mode: mode_t = 0o600) -> Bool {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    return writeAll(fd, Array(text.utf8)) == nil
}

func agentConfigCheck() -> (ok: Bool, detail: String) {
    guard let directory = temporaryDirectory("agent-config") else { return (false, "mkdtemp: \(errnoMessage(errno))") }
    defer { _ = system("rm -rf " + directory) }
    let key = """
        -----BEGIN PUBLIC KEY-----
        MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEXUXcDqOP/w01Z4gf9fdbWBruPXxi
        Rm1joj7RqMSBclgSniz9lqXAgtSita5+VQhOaYSUFyyB7yvvubKMANmruw==
        -----END PUBLIC KEY-----

        """
    let good = """
        { device: { id: "board-7", labels: { site: "north" } },
          server: { url: "https://fleet.example:8086/influx/", pins: ["sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="] },
          telemetry: { influx: { version: 2, org: "acme", bucket: "boards", token: "t" } },
          queue: { directory: "queue", overflow: "dropOldest" },
          logging: { level: "debug" },
          network: { proxy: "http://gw.example:3128", noProxy: ["10.0.0.0/8"] },
          firmware: { manifestURL: "https://updates.example/gw/manifest.json", keys: ["vendor.pem"], deviceType: "gw",
                      versionFile: "/etc/sw-version", install: ["rauc", "install", "{file}"], installWindow: ["Fri,Sat 22:00-02:00"] } }
        """
    let bad = """
        { device: { id: "b" }, server: { url: "ftp://fleet.example" },
          telemetry: { influx: { database: "d" } }, queue: { overflow: "dropNewest" } }
        """
    guard writeFile(directory + "/vendor.pem", key, mode: 0o644), writeFile(directory + "/agent.json5", good),
        writeFile(directory + "/bad.json5", bad)
    else { return (false, "writing the files: \(errnoMessage(errno))") }
    let config: AgentConfig
    do throws(ConfigError) {
        config = try AgentConfig.load(path: directory + "/agent.json5")
    } catch {
        return (false, error.description)
    }
    var refusals: [String] = []
    do throws(ConfigError) {
        _ = try AgentConfig.load(path: directory + "/bad.json5")
    } catch {
        refusals = error.problems.map { $0.path }
    }
    let window = config.firmware?.installWindow.first
    let ok =
        config.device.id == "board-7" && config.device.labels["site"] == "north" && config.server.url.host == "fleet.example"
        && config.server.url.port == 8086 && config.queue.overflow == .dropOldest && config.queue.directory == directory + "/queue"
        && config.logging.level == .debug && config.network.routeHost(for: config.server.url) == "gw.example"
        && config.firmware?.signatureURL.absoluteString == "https://updates.example/gw/manifest.json.sig"
        && config.firmware?.keys.first?.algorithm == "ECDSA" && window?.contains(weekday: 6, minute: 60) == true
        && refusals == ["server.url", "queue.overflow"]
    return (
        ok,
        "\(config.server.url) via \(config.network.routeHost(for: config.server.url) ?? "direct"); key \(config.firmware?.keys.first?.description ?? "none"); refused \(refusals.joined(separator: ", "))"
    )
}
let (agentConfigOK, agentConfigDetail) = agentConfigCheck()
check("agent config: file, firmware key, proxy, URLs, problems", agentConfigOK, agentConfigDetail)

// The agent's wall clock: the build time as the first floor, a saved floor a year ahead holds
// stamping back, and a record's age by the wall clock only while the clock is trusted.
func wallClockCheck() -> (ok: Bool, detail: String) {
    guard let directory = temporaryDirectory("clock") else { return (false, "mkdtemp: \(errnoMessage(errno))") }
    defer { _ = system("rm -rf " + directory) }
    let now = WallTime.now()
    let trusting = WallClock(floorFile: nil, requireSync: false)
    let twoHoursAgo = now.adding(.seconds(-7200))
    let age = trusting.age(enqueuedAt: twoHoursAgo, sinceEnqueue: nil, now: now)
    let bootAge = trusting.age(enqueuedAt: WallTime(secondsSince1970: 0), sinceEnqueue: .seconds(3), now: now)
    let ahead = now.adding(.seconds(365 * 86400))
    guard writeFile(directory + "/clock-floor", "\(ahead.secondsSince1970)\n") else { return (false, "write: \(errnoMessage(errno))") }
    let held = WallClock(floorFile: directory + "/clock-floor", requireSync: false)
    let verdict = held.verdict(now: now)
    let below = if case .belowFloor = verdict { true } else { false }
    let ok =
        WallClock.buildTime > WallTime(secondsSince1970: 1_767_225_600) && WallClock.buildTime <= now && trusting.mayStamp(now: now)
        && age == .seconds(7200) && bootAge == .seconds(3) && !held.mayStamp(now: now) && below
        && held.age(enqueuedAt: twoHoursAgo, sinceEnqueue: nil, now: now) == nil
    return (ok, "built \(WallClock.buildTime), now \(now); floor \(held.floor): \(verdict.reason)")
}
let (clockOK, clockDetail) = wallClockCheck()
check("wall clock: build floor, saved floor, ages", clockOK, clockDetail)

// The daemon's status file: the delivery tracker's figures in a status written, read back the
// same (RFC 3339 times, a UInt64 counter past Int64), refusals naming the key, the text for people.
func statusCheck() -> (ok: Bool, detail: String) {
    guard let directory = temporaryDirectory("status") else { return (false, "mkdtemp: \(errnoMessage(errno))") }
    defer { _ = system("rm -rf " + directory) }
    let at = WallTime(secondsSince1970: 2_147_483_648)
    let tracker = DeliveryTracker(deadLetters: 2)
    tracker.record(.deadLettered(sequence: 1, idempotencyKey: "k", status: 400, reason: "unable to parse"), at: at)
    tracker.record(.delivered(sequence: 2, idempotencyKey: "k2", status: 204), at: at.adding(.seconds(1)))
    tracker.rejectedSpool(3)
    let figures = tracker.snapshot
    var status = AgentStatus(
        state: "running", pid: getpid(), version: "0.1.0", startedAt: at, updatedAt: at.adding(.seconds(5)),
        nextUpdateBy: at.adding(.seconds(130)), configFile: "/etc/fire-agent/config.json5", configLoadedAt: at,
        reachability: "reachable eth0 ethernet", clock: "trusted", lastDelivery: figures.lastDelivery,
        lastSuccessfulDelivery: figures.lastSuccess,
        queue: .init(
            records: 3, bytes: 1234, oldestAgeSeconds: 12.5, delivered: .max, dropped: 1, rejected: 2, discarded: 3, quarantined: 4,
            headFailures: 0),
        deadLetters: figures.deadLetters, rejectedSpoolLines: figures.rejectedSpoolLines, stoppedCollectors: ["thermal": "no zones"])
    var firmware = AgentStatus.Firmware(phase: "downloading", downloadedBytes: 512, size: 2048)
    firmware.since = at
    status.firmware = firmware
    let path = directory + "/run/status.json"
    var readBack: AgentStatus?
    var refusal = ""
    do throws(AgentError) {
        try status.write(to: path)
        readBack = try AgentStatus.read(path: path)
        guard writeFile(directory + "/bad.json", "{\"queue\": []}") else { return (false, "write: \(errnoMessage(errno))") }
        _ = try AgentStatus.read(path: directory + "/bad.json")
    } catch {
        refusal = error.description
    }
    let text = status.describe(alive: status.daemonIsAlive, now: at.adding(.seconds(90)))
    let ok =
        readBack == status && figures.deadLetters == 3 && figures.lastSuccess == at.adding(.seconds(1)) && figures.rejectedSpoolLines == 3
        && refusal.hasSuffix("is not a fire-agent status document: queue: expected an object, found an array")
        && text.hasPrefix("fire-agent 0.1.0: running, pid \(getpid()), started 2038-01-19T03:14:08Z (90 s ago)")
        && status.staleness(now: at.adding(.seconds(200)), alive: true, fileSystem: nil) != nil
    return (
        ok,
        readBack == status
            ? "read back; \(refusal)" : "read back differs: \(readBack.map { String(decoding: $0.encoded(), as: UTF8.self) } ?? "none")"
    )
}
let (statusOK, statusDetail) = statusCheck()
check("status file: tracker, write, read back, refusal, text", statusOK, statusDetail)

// A batch's upload: gzip'd body, the judge on InfluxDB's answers (413 split into halves,
// Retry-After, 400 halves, an old batch refused), Basic and Token authorization.
func batchUploadCheck() -> (ok: Bool, detail: String) {
    let batch = Batch(lines: ["m x=0i 0", "m x=1i 1", "m x=2i 2", "m x=3i 3"])
    let body: [UInt8]
    do throws(AgentError) {
        body = try InfluxWrite.body(for: batch)
    } catch {
        return (false, error.description)
    }
    let now = WallTime.now()
    let record = OfflineQueueJournal.Payload(
        method: "POST", url: "http://influx/write?db=d", idempotencyKey: "k", headers: [(name: "Content-Encoding", value: "gzip")],
        body: .inline(body))
    /// The disposition in words: `delivered`, `retry`, `retryAfter 5000 ms`, `deadLetter REASON`, `halves A|B`.
    func judge(_ status: Int, retryAfter: String? = nil, message: String = "", age: Duration = .zero) -> String {
        switch InfluxWrite.judge(
            status: status, retryAfter: retryAfter, message: Array(message.utf8), record: record, maxAge: .seconds(3600), age: age,
            batchBytes: 1 << 20, now: now)
        {
        case .delivered: return "delivered"
        case .retry: return "retry"
        case .discard: return "discard"
        case .retryAfter(let delay): return "retryAfter \(delay.components.seconds * 1000) ms"
        case .deadLetter(let reason): return "deadLetter " + reason
        case .replace(let halves):
            var texts: [String] = []
            for half in halves {
                guard case .memory(let held) = half.body.first else { return "a half without its body" }
                var bytes: [UInt8] = []
                held.withBodyBytes { bytes = Array($0) }
                guard let plain = try? Gzip.decompress(bytes, limit: 1 << 20) else { return "a half is not gzip" }
                texts.append(String(decoding: plain, as: UTF8.self))
            }
            return "halves " + texts.joined(separator: "|")
        }
    }
    let roundTrip = (try? Gzip.decompress(body, limit: 1 << 20)).map { String(decoding: $0, as: UTF8.self) } ?? ""
    let basic = InfluxWrite.authorization(for: .v1(database: "d", retentionPolicy: nil, username: "fleet", password: "pässwörd:x"))
    let split = judge(413)
    let ok =
        roundTrip == "m x=0i 0\nm x=1i 1\nm x=2i 2\nm x=3i 3\n" && judge(204) == "delivered"
        && split == "halves m x=0i 0\nm x=1i 1\n|m x=2i 2\nm x=3i 3\n" && judge(429, retryAfter: "5") == "retryAfter 5000 ms"
        && judge(400, message: "{\"error\":\"unable to parse\"}") == split
        && judge(401, message: "unauthorized") == "retry"
        && judge(503, age: .seconds(7200)) == "deadLetter HTTP 503; still refused after 7200 s (queue.maxRecordAge)"
        && basic == "Basic ZmxlZXQ6cMOkc3N3w7ZyZDp4"
        && InfluxWrite.authorization(for: .v2(organization: "o", bucket: "b", token: "t")) == "Token t"
    return (ok, "\(body.count) bytes gzip'd; \(split); \(basic ?? "no authorization")")
}
let (uploadOK, uploadDetail) = batchUploadCheck()
check("batch upload: gzip body, the judge (413 halves, Retry-After, dead letters), authorization", uploadOK, uploadDetail)

// The built-in collectors on this machine's (or the emulator's host's) /proc and /sys: two
// rounds, CPU from the second, every point tagged and encodable as line protocol.
func collectorCheck() -> (ok: Bool, detail: String) {
    let stops = Locked<[String]>([])
    let logger = Logger(label: "core-check", output: LogOutput { _, message, _ in stops.withLock { $0.append(message) } })
    let collector = TelemetryCollector(
        collectors: AgentConfig.Collectors(), tags: ["device": "core-check"], logger: logger,
        agentHealth: { ["queue_records": .integer(0)] })
    let first = collector.collect(timestamp: 1_700_000_000_000_000_000)
    usleep(50_000)
    let second = collector.collect(timestamp: 1_700_000_001_000_000_000)
    var measurements: [String] = []
    for point in second where !measurements.contains(point.measurement) { measurements.append(point.measurement) }
    let encoded = second.compactMap { LineProtocol.encode($0, precision: .ns) }
    let ok =
        first.contains { $0.measurement == "mem" } && second.contains { $0.measurement == "cpu" }
        && second.contains { $0.measurement == "fire_agent" } && second.allSatisfy { $0.tags["device"] == "core-check" }
        && encoded.count == second.count
    return (ok, "\(second.count) points: \(measurements.joined(separator: ",")); stopped \(collector.stopped.count)")
}
let (collectorOK, collectorDetail) = collectorCheck()
check("collectors (/proc, /sys) and line protocol", collectorOK, collectorDetail)

// The daemon's parts: what a server's answer means for a batch, the schedule of collection,
// sync and watchdog, and sd_notify's datagrams to a socket bound here as systemd's would be.
func daemonPartsCheck() -> (ok: Bool, detail: String) {
    let now = WallTime(millisecondsSince1970: 784_111_777_000)
    let verdicts = [
        StatusClass(status: 204, now: now), StatusClass(status: 302, now: now), StatusClass(status: 413, now: now),
        StatusClass(status: 503, retryAfter: "Sun, 06 Nov 1994 08:50:07 GMT", now: now), StatusClass(status: 400, now: now),
        StatusClass(status: 401, now: now), StatusClass(status: 410, now: now), StatusClass(status: 425, now: now),
    ]
    let expected: [StatusClass] = [
        .success, .transient, .tooLarge, .throttled(retryAfter: .seconds(30)), .refused, .credentials, .gone, .transient,
    ]
    var schedule = DaemonSchedule(
        collectEvery: .seconds(10), syncEvery: .seconds(60), jitter: 0, watchdogInterval: .seconds(20), now: .zero, random: 0)
    let first = schedule.due(at: .zero, random: 0)
    let later = schedule.due(at: .seconds(10), random: 0)
    let path = "/tmp/core-check-notify-\(getpid())"
    unlink(path)
    let listener = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
    }
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    defer {
        close(listener)
        unlink(path)
    }
    guard listener >= 0, bound == 0 else { return (false, "cannot bind \(path): \(errnoMessage(errno))") }
    var received = ""
    if let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": path, "WATCHDOG_USEC": "20000000"]) {
        _ = notifier.ready(status: "running")
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = buffer.withUnsafeMutableBytes { recv(listener, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        if n > 0 { received = String(decoding: buffer[0..<n], as: UTF8.self) }
        received +=
            notifier.watchdogInterval == .seconds(20)
            ? "; watchdog 20 s" : "; watchdog \(notifier.watchdogInterval == nil ? "none" : "other")"
    }
    let ok =
        verdicts == expected && first == [.collect, .watchdog] && later == [.collect, .sync, .watchdog]
        && received == "READY=1\nSTATUS=running; watchdog 20 s"
    return (ok, "jobs \(first.count)+\(later.count); notify \(received.split(separator: "\n").joined(separator: " | "))")
}
let (daemonOK, daemonDetail) = daemonPartsCheck()
check("daemon parts: status classes, schedule, sd_notify", daemonOK, daemonDetail)

// The update gates: versions ordered as SemVer orders them, an install window past midnight,
// a lock held on the inhibit file.
func gatesCheck() -> (ok: Bool, detail: String) {
    let versions = ["1.10.0", "v1.2", "1.2.0-rc.1", "1.2.0-rc.10", "1.2.0-rc.2", "0.9"].compactMap { SemanticVersion($0) }.sorted()
    let order = versions.map { $0.description }.joined(separator: " < ")
    var window: InstallWindow?
    var refusal = ""
    do throws(InstallWindowError) {
        window = try InstallWindow(parsing: "Fri,Sat 22:00-02:00")
        _ = try InstallWindow(parsing: "Mon 25:00-26:00")
    } catch {
        refusal = error.description
    }
    // Friday 23:30 and Saturday 01:00 (past midnight, Friday's window) are inside; Friday 12:00 is not.
    let inside = window.map {
        [$0.contains(weekday: 5, minute: 23 * 60 + 30), $0.contains(weekday: 6, minute: 60), $0.contains(weekday: 5, minute: 720)]
    }
    let path = "/tmp/core-check-inhibit-\(getpid())"
    let fd = open(path, O_RDWR | O_CREAT, 0o600)
    defer {
        close(fd)
        unlink(path)
    }
    let free = InhibitLock.state(path) != .free
    // A lock on another open file description holds it for the check's own open.
    let holder = open(path, O_RDONLY)
    let locked = holder >= 0 && flock(holder, LOCK_EX) == 0
    let held = InhibitLock.state(path) == .held
    close(holder)
    let ok =
        order == "0.9 < 1.2.0-rc.1 < 1.2.0-rc.2 < 1.2.0-rc.10 < v1.2 < 1.10.0" && inside == [true, true, false] && !refusal.isEmpty
        && !free && locked && held
    return (
        ok,
        "\(order); window \(inside.map { $0.map { String($0) }.joined(separator: ",") } ?? "refused"); \(refusal); lock \(free) then \(held)"
    )
}
let (gatesOK, gatesDetail) = gatesCheck()
check("update gates: versions, install window, inhibit lock", gatesOK, gatesDetail)

// The event loop: its own thread (pthreads), epoll, the eventfd wake-up, a timer, a task handed
// over from this thread, and a pipe's readiness.
final class PipeReader: EventLoopHandler, @unchecked Sendable {
    let fd: Int32
    let received = Atomic<Int>(0)
    init(fd: Int32) { self.fd = fd }
    func handleEvents(_ events: UInt32) {
        var byte: UInt8 = 0
        if read(fd, &byte, 1) == 1 { received.store(Int(byte), ordering: .releasing) }
    }
}

final class LoopFlags: Sendable {
    let timerFired = Atomic<Bool>(false)
    let taskRan = Atomic<Bool>(false)
    let registered = Atomic<Bool>(false)
}

func eventLoopCheck() -> (ok: Bool, detail: String) {
    let loop: EventLoop
    do {
        loop = try EventLoop(name: "core-check")
    } catch {
        return (false, error.description)
    }
    defer { loop.shutdown() }
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { return (false, "pipe: \(errnoMessage(errno))") }
    defer {
        close(fds[0])
        close(fds[1])
    }
    let reader = PipeReader(fd: fds[0])
    let seen = LoopFlags()
    let start = Instant.now()
    loop.execute {
        loop.schedule(at: .now() + .milliseconds(30)) { seen.timerFired.store(true, ordering: .releasing) }
        seen.taskRan.store(true, ordering: .releasing)
        if (try? loop.register(reader.fd, interest: .read, handler: reader)) != nil {
            seen.registered.store(true, ordering: .releasing)
        }
    }
    while !seen.registered.load(ordering: .acquiring) && Instant.now().since(start) < .seconds(5) { usleep(1000) }
    var byte: UInt8 = 42
    _ = write(fds[1], &byte, 1)
    while !(seen.timerFired.load(ordering: .acquiring) && reader.received.load(ordering: .acquiring) == 42)
        && Instant.now().since(start) < .seconds(5)
    {
        usleep(1000)
    }
    let elapsed = Instant.now().since(start)
    let ok =
        seen.taskRan.load(ordering: .acquiring) && seen.timerFired.load(ordering: .acquiring)
        && reader.received.load(ordering: .acquiring) == 42 && elapsed >= .milliseconds(30)
    let milliseconds = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
    return (ok, "task, 30 ms timer and pipe readiness seen after \(milliseconds) ms")
}
let (loopOK, loopDetail) = eventLoopCheck()
check("event loop", loopOK, loopDetail)

// Name resolution on a lookup thread of its own (BlockingWork: a detached pthread), as the
// connection stack resolves: a numeric address, and localhost from /etc/hosts.
func resolveCheck(_ host: String) -> (ok: Bool, detail: String) {
    let answer = Locked<[SocketAddress]?>(nil)
    let failure = Locked<String?>(nil)
    DNSResolver.resolve(host: host, port: 80) { result in
        switch result {
        case .success(let addresses): answer.withLock { $0 = addresses }
        case .failure(let error): failure.withLock { $0 = error.message }
        }
    }
    let start = Instant.now()
    while answer.withLock({ $0 }) == nil && failure.withLock({ $0 }) == nil && Instant.now().since(start) < .seconds(10) {
        usleep(1000)
    }
    if let message = failure.withLock({ $0 }) { return (false, message) }
    guard let addresses = answer.withLock({ $0 }) else { return (false, "no answer within 10 s") }
    let text = addresses.map { $0.description }
    return (text.contains("127.0.0.1:80"), text.joined(separator: ", "))
}
for host in ["127.0.0.1", "localhost"] {
    let (ok, detail) = resolveCheck(host)
    check("resolve \(host) (lookup thread)", ok, detail)
}

// TLS over mbedTLS: the system's CA bundle parsed (the host's file, read through qemu), and a
// client handshake started on a non-blocking socket: it writes a ClientHello record and waits.
func tlsCheck() -> (ok: Bool, detail: String) {
    let context: TLSContext
    do throws(TLSSetupError) {
        context = try TLSContext(TLSConfiguration())
    } catch {
        return (false, error.reason)
    }
    let anchors = context.anchorDER.count
    var fds: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { return (false, "socketpair: \(errnoMessage(errno))") }
    defer {
        close(fds[0])
        close(fds[1])
    }
    _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
    let stream: TLSStream
    do throws(TLSSetupError) {
        stream = try TLSStream(context: context, over: SocketStream(fd: fds[0]), serverName: "example.org")
    } catch {
        return (false, error.reason)
    }
    let step = stream.handshake()
    var record = [UInt8](repeating: 0, count: 5)
    let got = read(fds[1], &record, 5)
    guard case .wantRead = step, got == 5, record[0] == 0x16, record[1] == 3 else {
        return (false, "\(anchors) anchors; handshake did not send a ClientHello (read \(got))")
    }
    return (anchors > 50, "\(anchors) trust anchors; ClientHello record of \(Int(record[3]) << 8 | Int(record[4])) bytes")
}
let (tlsOK, tlsDetail) = tlsCheck()
check("TLS (mbedTLS)", tlsOK, tlsDetail)

// Proxies: a proxy URL parsed (credentials percent-decoded), the hop's route through it, and the
// CONNECT step run against a fake proxy at the other end of a socket pair.
func proxyCheck() -> (ok: Bool, detail: String) {
    let proxy: Proxy
    let target: RequestTarget
    do throws(ProxyURLError) {
        proxy = try Proxy(parsing: "http://user:p%40ss@proxy.example:3128")
    } catch {
        return (false, error.reason)
    }
    do throws(RequestTargetError) {
        target = try RequestTarget(
            scheme: "https", host: "example.org", port: nil, path: "/x", query: nil, url: "https://example.org/x",
            proxies: ProxySettings(all: proxy))
    } catch {
        return (false, error.description)
    }
    guard case .tunnel = target.route, target.connectPort == 3128 else { return (false, "route \(target.poolKey)") }
    var fds: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { return (false, "socketpair") }
    defer {
        close(fds[0])
        close(fds[1])
    }
    _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
    let step = ProxyTunnelStep(
        stream: SocketStream(fd: fds[0]), authority: target.tunnelAuthority,
        authorization: proxy.credentials?.basicAuthorization, userAgent: nil, maxHeadBytes: 8192)
    guard case .wantRead = step.advance() else { return (false, "the CONNECT request was not sent") }
    var request = [UInt8](repeating: 0, count: 512)
    let got = read(fds[1], &request, request.count)
    let text = String(decoding: request[0..<max(got, 0)], as: UTF8.self)
    let answer = Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8)
    _ = write(fds[1], answer, answer.count)
    guard case .done = step.advance() else { return (false, "the 200 answer did not open the tunnel") }
    let ok =
        text.hasPrefix("CONNECT example.org:443 HTTP/1.1\r\n")
        && text.firstRange(ofASCII: "Proxy-Authorization: Basic dXNlcjpwQHNz\r\n") != nil && step.answer?.status == 200
    return (ok, "CONNECT \(target.tunnelAuthority) via \(target.poolKey.proxy?.displayURL ?? "?"), answered 200")
}
let (proxyOK, proxyDetail) = proxyCheck()
check("proxy URL, route and CONNECT", proxyOK, proxyDetail)

// Happy Eyeballs on the event loop: a refused address first, then a listening one.
/// A TCP listener on 127.0.0.1 and a port the kernel chose.
func loopbackListener() -> (fd: Int32, port: Int)? {
    let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) == 0 && getsockname(listener, $0, &length) == 0 }
    }
    guard bound, listen(listener, 4) == 0 else {
        close(listener)
        return nil
    }
    return (listener, Int(UInt16(bigEndian: address.sin_port)))
}

final class ConnectOutcome: Sendable {
    let result = Locked<String?>(nil)
}
func connectorCheck() -> (ok: Bool, detail: String) {
    guard let (listener, port) = loopbackListener() else { return (false, "cannot listen: \(errnoMessage(errno))") }
    defer { close(listener) }
    guard case .success(let refused) = DNSResolver.resolveNow(host: "127.0.0.1", port: 1),
        case .success(let listening) = DNSResolver.resolveNow(host: "127.0.0.1", port: port)
    else { return (false, "no addresses") }
    let loop: EventLoop
    do throws(SystemResourceError) {
        loop = try EventLoop(name: "core-connect")
    } catch {
        return (false, error.description)
    }
    defer { loop.shutdown() }
    let outcome = ConnectOutcome()
    let addresses = refused + listening
    loop.execute {
        // Nothing else holds the connector: its attempts do, until it ends.
        Connector(loop: loop, addresses: addresses).start { result in
            switch result {
            case .success(let connected):
                close(connected.fd)
                outcome.result.withLock { $0 = "connected to \(connected.address)" }
            case .failure(let failure):
                outcome.result.withLock { $0 = "failed: \(failure.attempts.joined(separator: "; "))" }
            }
        }
    }
    let start = Instant.now()
    while outcome.result.withLock({ $0 }) == nil && Instant.now().since(start) < .seconds(10) { usleep(1000) }
    let text = outcome.result.withLock { $0 } ?? "no answer within 10 s"
    return (text == "connected to 127.0.0.1:\(port)", text)
}
let (connectOK, connectDetail) = connectorCheck()
check("Happy Eyeballs connect", connectOK, connectDetail)

// The engine's sans-I/O cores: the pool's ledger (one connection per origin: a second request
// waits, is named when the first releases, then reuses it) and the transfer's deadlines (idle and
// low-speed verdicts, computed in Double on 32-bit too).
func engineCoresCheck() -> (ok: Bool, detail: String) {
    var ledger = PoolLedger<Int, Int>(maxPerOrigin: 1, idleTimeout: .seconds(5))
    let key = PoolKey(scheme: "https", host: "example.org", port: 443)
    let now = Instant.now()
    let first = ledger.lease(key, forceNew: false, waiter: 1)
    _ = ledger.opened(100, key: key, capacity: 1)
    let second = ledger.lease(key, forceNew: false, waiter: 2)
    let named = ledger.released(100, key: key, now: now)
    let third = ledger.lease(key, forceNew: false, waiter: 2)
    let ledgerOK = first == .connect && second == .wait && named == 2 && third == .reuse(100)
    var idle = TransferDeadlines(
        limits: TransferDeadlines.Limits(
            connect: .seconds(10), handshake: .seconds(10), idle: .seconds(1), total: nil, lowSpeed: nil,
            maxReceiveBytesPerSecond: nil),
        now: now)
    idle.enter(.exchanging, now: now)
    let idleVerdict = idle.fire(now: now + .seconds(2))
    var slow = TransferDeadlines(
        limits: TransferDeadlines.Limits(
            connect: .seconds(10), handshake: .seconds(10), idle: .seconds(60), total: nil,
            lowSpeed: LowSpeedLimit(bytesPerSecond: 1000, window: .seconds(10)), maxReceiveBytesPerSecond: nil),
        now: now)
    slow.enter(.exchanging, now: now)
    _ = slow.received(5000, now: now + .seconds(5))
    let slowVerdict = slow.fire(now: now + .seconds(10))
    let deadlinesOK =
        idleVerdict == .expired(.timedOut(.idle, limit: .seconds(1)))
        && slowVerdict == .expired(.lowSpeed(bytesPerSecond: 1000, window: .seconds(10), measuredBytesPerSecond: 500))
    return (ledgerOK && deadlinesOK, "ledger \(ledgerOK ? "ok" : "wrong"), deadlines \(deadlinesOK ? "ok" : "wrong")")
}
let (coresOK, coresDetail) = engineCoresCheck()
check("pool ledger and transfer deadlines", coresOK, coresDetail)

// One HTTP/1.1 exchange on an HTTPConnection over a socket pair, with a streamed upload: the
// stream is read on a thread of its own (three chunks), sent chunked; a server thread checks
// the request bytes and answers; the connection goes back to the pool as idle.
final class ThreeChunks: UploadSource {
    private let sent = Locked(0)
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(UploadSourceError) -> Int {
        sent.withLock { count -> Int in
            guard count < 3 else { return 0 }
            count += 1
            let text = Array("part \(count);".utf8)
            for (i, byte) in text.enumerated() { buffer[i] = byte }
            return text.count
        }
    }
}

final class ExchangeRecorder: HTTPExchangeDelegate {
    let outcome = Locked<String?>(nil)
    private var status = 0
    private var body: [UInt8] = []
    func exchangeDidSend(bytes: Int) {}
    func exchangeDidSendRequest() {}
    func exchangeDidReceive(bytes: Int) {}
    func exchangeDidReceiveInformational(_ head: ResponseHead) {}
    func exchangeDidReceiveHead(_ head: ResponseHead) throws(ExchangeAbort) { status = head.status }
    func exchangeDidReceiveBody(_ bytes: UnsafeRawBufferPointer) throws(ExchangeAbort) { body.append(contentsOf: bytes) }
    func exchangeDidComplete(trailers: [RawHeaderField]) {
        let text = "\(status) \(String(decoding: body, as: UTF8.self))"
        outcome.withLock { $0 = text }
    }
    func exchangeDidFail(_ failure: ExchangeFailure) { outcome.withLock { $0 = "failed: \(failure.kind)" } }
}

func exchangeCheck() -> (ok: Bool, detail: String) {
    var pair: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0 else {
        return (false, "socketpair: \(errnoMessage(errno))")
    }
    _ = fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK)
    let client = pair[0]
    let server = pair[1]
    defer { close(server) }
    let expected =
        "POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        + "7\r\npart 1;\r\n7\r\npart 2;\r\n7\r\npart 3;\r\n0\r\n\r\n"
    let request = Locked<[UInt8]>([])
    do throws(SystemResourceError) {
        try BlockingWork.run(label: "check-server") {
            var buffer = [UInt8](repeating: 0, count: 512)
            var got: [UInt8] = []
            while got.count < expected.utf8.count {
                let n = buffer.withUnsafeMutableBytes { read(server, $0.baseAddress, $0.count) }
                guard n > 0 else { break }
                got.append(contentsOf: buffer[0..<n])
            }
            request.withLock { $0 = got }
            let answer = Array("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".utf8)
            _ = answer.withUnsafeBytes { write(server, $0.baseAddress, $0.count) }
        }
    } catch {
        return (false, error.description)
    }
    let loop: EventLoop
    do throws(SystemResourceError) {
        loop = try EventLoop(name: "core-exchange")
    } catch {
        return (false, error.description)
    }
    defer { loop.shutdown() }
    let recorder = ExchangeRecorder()
    // The connection alone (the pool builds its own; the engine check below goes through it).
    let key = PoolKey(scheme: "http", host: "h", port: 80)
    let head = Array("POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
    let held = Locked<HTTPConnection?>(nil)
    loop.execute {
        let connection: HTTPConnection
        do throws(SystemResourceError) {
            connection = try HTTPConnection(
                key: key, fd: client, remoteAddress: SocketAddress(storage: sockaddr_storage(), length: 0), loop: loop,
                readBufferSize: 4096)
        } catch {
            recorder.outcome.withLock { $0 = error.description }
            return
        }
        held.withLock { $0 = connection }
        connection.start(
            head: head, body: nil, bodySource: .stream(StreamBodySource(ThreeChunks())), isHeadRequest: false,
            limits: ResponseParser.Limits(), delegate: recorder)
    }
    let start = Instant.now()
    while recorder.outcome.withLock({ $0 }) == nil && Instant.now().since(start) < .seconds(10) { usleep(1000) }
    loop.execute { held.withLock { $0?.close() } }
    let sent = String(decoding: request.withLock { $0 }, as: UTF8.self)
    let outcome = recorder.outcome.withLock { $0 } ?? "no answer within 10 s"
    let ok = outcome == "200 hello" && sent == expected
    return (ok, ok ? "chunked upload of 3 reads, \(outcome)" : "\(outcome); sent \(sent.escapingControlCharacters())")
}
let (exchangeOK, exchangeDetail) = exchangeCheck()
check("HTTP exchange (stream upload)", exchangeOK, exchangeDetail)

/// The engine settings the checks send with: short timeouts, two connections per host.
let checkEngineSettings: EngineSettings = {
    var settings = EngineSettings.standard
    settings.connectTimeout = .seconds(5)
    settings.idleTimeout = .seconds(5)
    settings.totalTimeout = .seconds(10)
    settings.maxHeaderBlockBytes = 16 * 1024
    settings.readBufferSize = 16 * 1024
    settings.maxConnectionsPerHost = 2
    settings.idleConnectionTimeout = .seconds(5)
    settings.maxRedirects = 3
    settings.defaultFields = [.userAgent: "core-check"]
    settings.expectContinueThreshold = nil
    return settings
}()

// A whole request through the engine, as the agent will send one: a GET to a listener on
// loopback, a 301 followed on the kept-alive connection, the 200's body in a ByteArraySink.
final class CheckOwner: TransferOwner, @unchecked Sendable {
    let sink = ByteArraySink(limit: 1024)
    let outcome = Locked<String?>(nil)
    var transferOwnerID: ObjectIdentifier { ObjectIdentifier(self) }
    var isCancelled: Bool { false }
    var isSuspended: Bool { false }
    var transferAsksRedirects: Bool { false }
    var transferWantsProgress: Bool { false }
    func transferMakeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> any ResponseBodySink { sink }
    func transferDidReceiveResponse(_ response: HTTPResponse, request: SentRequestHead) -> Bool { false }
    func transferWillRedirect(to redirect: RequestSpec, for response: HTTPResponse) {}
    func transferDecideRedirect(to target: RequestSpec, for response: HTTPResponse, sent: SentRequestHead?, answer: RedirectAnswer)
        -> Bool
    { false }
    func transferJudgeTrust(host: String) -> TrustJudgement { .defaultValidation }
    func transferProgress(upload: (UInt64, UInt64?)?, download: (UInt64, UInt64?)?, final: Bool) {}
    func transferDidFinish(
        _ result: Result<Void, TransferFailure>, request: SentRequestHead?, response: HTTPResponse?, report: TransferReport
    ) {
        let text: String
        switch result {
        case .success:
            text =
                "\(response?.status.code ?? 0) \(String(decoding: sink.bytes, as: UTF8.self)) via \(report.redirects.joined()),"
                + " reused \(report.reusedConnection)"
        case .failure(let failure): text = "failed: \(failure)"
        }
        outcome.withLock { $0 = text }
    }
}

/// Where the first blank line ends (the index after CR LF CR LF).
func headEnd(_ bytes: [UInt8]) -> Int? {
    guard bytes.count >= 4 else { return nil }
    for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
        return i + 4
    }
    return nil
}

/// One HTTP/1.1 request read from `connection`: its head's lines and its Content-Length body;
/// nil when the peer closed first.
struct CheckRequest {
    let lines: [String]
    let body: [UInt8]

    /// The value of the header `name` (lower case), or "".
    func field(_ name: String) -> String {
        for line in lines where line.lowercased().hasPrefix(name + ":") {
            return String(line.dropFirst(name.utf8.count + 1).drop { $0 == " " })
        }
        return ""
    }

    static func read(_ connection: Int32) -> CheckRequest? {
        var buffer = [UInt8](repeating: 0, count: 65536)
        var pending: [UInt8] = []
        while headEnd(pending) == nil {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(connection, $0.baseAddress, $0.count) }
            guard n > 0 else { return nil }
            pending.append(contentsOf: buffer[0..<n])
        }
        guard let end = headEnd(pending) else { return nil }
        let lines = String(decoding: pending[..<end], as: UTF8.self).split(separator: "\r\n").map(String.init)
        var request = CheckRequest(lines: lines, body: [])
        let length = Int(request.field("content-length")) ?? 0
        while pending.count - end < length {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(connection, $0.baseAddress, $0.count) }
            guard n > 0 else { return nil }
            pending.append(contentsOf: buffer[0..<n])
        }
        request = CheckRequest(lines: lines, body: Array(pending[end..<(end + length)]))
        return request
    }
}

func engineCheck() -> (ok: Bool, detail: String) {
    guard let (listener, port) = loopbackListener() else { return (false, "cannot listen: \(errnoMessage(errno))") }
    defer { close(listener) }
    let heads = Locked<[String]>([])
    do throws(SystemResourceError) {
        try BlockingWork.run(label: "check-origin") {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            defer { close(connection) }
            let answers = [
                "HTTP/1.1 301 Moved Permanently\r\nLocation: /final\r\nContent-Length: 4\r\n\r\ngone",
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            ]
            var pending: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 1024)
            for answer in answers {
                // One request head, up to its blank line.
                while headEnd(pending) == nil {
                    let n = buffer.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
                    guard n > 0 else { return }
                    pending.append(contentsOf: buffer[0..<n])
                }
                guard let end = headEnd(pending) else { return }
                let head = String(decoding: pending[..<end], as: UTF8.self)
                pending.removeSubrange(..<end)
                heads.withLock { $0.append(head.split(separator: "\r\n").first.map(String.init) ?? "") }
                _ = Array(answer.utf8).withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
            }
        }
    } catch {
        return (false, error.description)
    }
    let settings = checkEngineSettings
    let engine = Engine(settings: settings, name: "core-engine")
    defer { engine.shutdown() }
    guard let url = AbsoluteURL("http://127.0.0.1:\(port)/start") else { return (false, "URL refused") }
    let owner = CheckOwner()
    engine.start(RequestSpec(url: url, method: .get, headers: HTTPHeaders(), body: nil), owner: owner)
    let start = Instant.now()
    while owner.outcome.withLock({ $0 }) == nil && Instant.now().since(start) < .seconds(10) { usleep(1000) }
    let outcome = owner.outcome.withLock { $0 } ?? "no answer within 10 s"
    let seen = heads.withLock { $0 }
    let ok =
        outcome == "200 hello via http://127.0.0.1:\(port)/final, reused true"
        && seen == ["GET /start HTTP/1.1", "GET /final HTTP/1.1"]
    return (ok, ok ? outcome : "\(outcome); heads \(seen.joined(separator: " | "))")
}
let (engineOK, engineDetail) = engineCheck()
check("engine: GET, redirect on a kept-alive connection, body in a sink", engineOK, engineDetail)

// The offline queue's delivery as the agent runs it: records sent through the engine in order,
// with their idempotency key; a 503 and a captive portal's 302 retried after the backoff, a 400
// dead-lettered (its description and body written), a large body sent from its body file, then
// a flush with delivery stopped.
func deliveryCheck() -> (ok: Bool, detail: String) {
    guard let directory = temporaryDirectory("delivery") else { return (false, "mkdtemp: \(errnoMessage(errno))") }
    defer { _ = system("rm -rf " + directory) }
    guard let (listener, port) = loopbackListener() else { return (false, "cannot listen: \(errnoMessage(errno))") }
    defer { close(listener) }
    let answers = [
        "503 Service Unavailable\r\n", "302 Found\r\nLocation: http://portal.example/login\r\n", "204 No Content\r\n",
        "204 No Content\r\n", "400 Bad Request\r\n", "204 No Content\r\n",
    ]
    let seen = Locked<[String]>([])
    do throws(SystemResourceError) {
        try BlockingWork.run(label: "check-ingest") {
            for answer in answers {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return }
                defer { close(connection) }
                guard let request = CheckRequest.read(connection) else { return }
                let path = request.lines.first?.split(separator: " ").dropFirst().first.map(String.init) ?? "?"
                seen.withLock { $0.append("\(path) \(request.field("idempotency-key")) \(request.body.count)") }
                let response = "HTTP/1.1 " + answer + "Content-Length: 0\r\nConnection: close\r\n\r\n"
                _ = Array(response.utf8).withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
            }
        }
    } catch {
        return (false, error.description)
    }
    let settings = checkEngineSettings
    let engine = Engine(settings: settings, name: "core-queue")
    defer { engine.shutdown() }
    let events = Locked<[String]>([])
    let queue: DeliveryQueue
    do throws(OfflineQueueError) {
        let store = try OfflineQueueStore(
            directory: directory + "/queue",
            limits: .init(maxRecords: 10, maxBytes: 1 << 20, dropOldest: false, segmentBytes: 64 * 1024, cursorSyncInterval: .seconds(1)),
            logger: PrintSink())
        let delivery = QueueDeliverySettings(
            backoff: QueueBackoff(initial: .milliseconds(50), maximum: .milliseconds(100)),
            disposition: { status in
                (200..<300).contains(status) ? .delivered : status == 400 ? .deadLetter(reason: "refused as malformed") : .retry
            }, judge: nil, deadLetterDirectory: directory + "/dead", maxConcurrentDeliveries: 1, inlineBodyLimit: 16)
        let keys = Locked(0)
        queue = try DeliveryQueue(
            store: store, settings: delivery, sender: EngineQueueSender(engine: engine), logger: PrintSink(),
            newKey: {
                keys.withLock {
                    $0 += 1
                    return "key-\($0)"
                }
            },
            onEvent: { event in
                let text: String
                switch event {
                case .delivered(let sequence, _, let status): text = "\(sequence) delivered \(status)"
                case .failed(let sequence, _, _, let failures): text = "\(sequence) failed \(failures)"
                case .deadLettered(let sequence, _, let status, _): text = "\(sequence) dead \(status)"
                default: text = "other"
                }
                events.withLock { $0.append(text) }
            })
        let base = "http://127.0.0.1:\(port)"
        for (path, body) in [("/a", "a x=1\n"), ("/b", String(repeating: "b x=2\n", count: 20)), ("/c", "bad")] {
            _ = try queue.enqueue(
                QueueSubmission(
                    method: "POST", url: base + path, headers: HTTPHeaders(), body: [.memory(ByteArrayBody(Array(body.utf8)))]))
        }
    } catch {
        return (false, error.description)
    }
    defer { queue.close() }
    queue.start(network: .unknown)
    let start = Instant.now()
    while queue.store.count > 0 && Instant.now().since(start) < .seconds(10) { usleep(2000) }
    // Stopped once no attempt is in flight: the record queued next waits for the flush.
    let stopped = Locked(false)
    queue.stop { stopped.withLock { $0 = true } }
    while !stopped.withLock({ $0 }) && Instant.now().since(start) < .seconds(10) { usleep(2000) }
    let flushed = Locked<String?>(nil)
    do throws(OfflineQueueError) {
        _ = try queue.enqueue(
            QueueSubmission(method: "PUT", url: "http://127.0.0.1:\(port)/d", headers: ["Idempotency-Key": "\"own\""], body: []))
    } catch {
        return (false, "enqueue after stop: \(error.description)")
    }
    queue.flush { result in
        let text: String
        switch result {
        case .success(let outcome): text = "flush delivered \(outcome.delivered), \(outcome.remaining) left"
        case .failure(let error): text = "flush failed: \(error.description)"
        }
        flushed.withLock { $0 = text }
    }
    while flushed.withLock({ $0 }) == nil && Instant.now().since(start) < .seconds(15) { usleep(2000) }
    let letter = (try? readWholeFile(directory + "/dead/3.json")).map { String(decoding: $0, as: UTF8.self) } ?? ""
    let letterBody = (try? readWholeFile(directory + "/dead/3.body")).map { String(decoding: $0, as: UTF8.self) } ?? ""
    let requests = seen.withLock { $0 }
    let happened = events.withLock { $0 }
    let outcome = flushed.withLock { $0 } ?? "flush never finished"
    let ok =
        requests == [#"/a "key-1" 6"#, #"/a "key-1" 6"#, #"/a "key-1" 6"#, #"/b "key-2" 120"#, #"/c "key-3" 3"#, #"/d "own" 0"#]
        && happened == ["1 failed 1", "1 failed 2", "1 delivered 204", "2 delivered 204", "3 dead 400", "4 delivered 204"]
        && outcome == "flush delivered 1, 0 left" && letter.firstRange(ofASCII: "\"status\" : \"400\"") != nil
        && letter.firstRange(ofASCII: "refused as malformed") != nil && letterBody == "bad"
    return (ok, "requests \(requests.joined(separator: " | ")); events \(happened.joined(separator: ", ")); \(outcome)")
}
let (deliveryOK, deliveryDetail) = deliveryCheck()
check("offline queue delivery through the engine (retry, captive portal, dead letter, flush)", deliveryOK, deliveryDetail)

// The agent's telemetry job on the core (TelemetryAgent, what the Embedded fire-agent runs): a
// config file read, this board's collectors and a spool file batched, gzip'd, queued and sent to
// a write API on loopback with Basic credentials; the status written from what it did.
func telemetryAgentCheck() -> (ok: Bool, detail: String) {
    guard let directory = temporaryDirectory("agent") else { return (false, "mkdtemp: \(errnoMessage(errno))") }
    defer { _ = system("rm -rf " + directory) }
    guard let (listener, port) = loopbackListener() else { return (false, "cannot listen: \(errnoMessage(errno))") }
    defer { close(listener) }
    let requests = Locked<[String]>([])
    let received = Locked<[String]>([])
    let stop = Locked(false)
    do throws(SystemResourceError) {
        try BlockingWork.run(label: "check-influx") {
            while !stop.withLock({ $0 }) {
                var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
                guard poll(&ready, 1, 100) > 0 else { continue }
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { continue }
                defer { close(connection) }
                guard let request = CheckRequest.read(connection) else { continue }
                let body = (try? Gzip.decompress(request.body, limit: 1 << 20)) ?? []
                requests.withLock {
                    $0.append("\(request.lines.first ?? "") \(request.field("authorization")) \(request.field("content-encoding"))")
                }
                received.withLock { $0 += String(decoding: body, as: UTF8.self).split(separator: "\n").map(String.init) }
                let response = "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"
                _ = Array(response.utf8).withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
            }
        }
    } catch {
        return (false, error.description)
    }
    defer { stop.withLock { $0 = true } }
    let config = """
        { device: { id: "board-7", labels: { site: "lab" } },
          server: { url: "http://127.0.0.1:\(port)/influx/", connectTimeout: "2s", requestTimeout: "10s" },
          telemetry: { influx: { database: "fleet", username: "fleet", password: "s3cret", precision: "ms" }, spoolDirectory: "spool" },
          queue: { directory: "queue" } }
        """
    guard mkdir(directory + "/spool", 0o755) == 0, writeFile(directory + "/agent.json5", config),
        writeFile(directory + "/spool/app.lp", "app,unit=a requests=5i 1700000000000\napp value=hot\n", mode: 0o644)
    else { return (false, "write: \(errnoMessage(errno))") }
    let agent: TelemetryAgent
    do throws(AgentError) {
        let loaded: AgentConfig
        do throws(ConfigError) {
            loaded = try AgentConfig.load(path: directory + "/agent.json5")
        } catch {
            return (false, error.description)
        }
        agent = try TelemetryAgent(
            config: loaded, logger: Logger(label: "check", output: LogOutput(format: .text, journal: false), level: .error))
    } catch {
        return (false, error.description)
    }
    defer { agent.close() }
    let report = agent.syncOnce()
    let seen = requests.withLock { $0 }
    let lines = received.withLock { $0 }
    var measurements: [String] = []
    for line in lines {
        let name = String(line.prefix { $0 != "," && $0 != " " })
        if !measurements.contains(name) { measurements.append(name) }
    }
    // The file holds whole seconds.
    let now = WallTime(secondsSince1970: WallTime.now().secondsSince1970)
    let figures = agent.queueFigures
    let snapshot = agent.tracker.snapshot
    let status = AgentStatus(
        state: "running", pid: getpid(), version: "check", startedAt: now, updatedAt: now, configFile: directory + "/agent.json5",
        configLoadedAt: now, reachability: "unknown", lastDelivery: nil,
        lastSuccessfulDelivery: snapshot.lastSuccess.map { WallTime(secondsSince1970: $0.secondsSince1970) },
        queue: figures, deadLetters: snapshot.deadLetters, rejectedSpoolLines: snapshot.rejectedSpoolLines,
        stoppedCollectors: agent.stoppedCollectors)
    var readBack: AgentStatus?
    do throws(AgentError) {
        try status.write(to: directory + "/status.json")
        readBack = try AgentStatus.read(path: directory + "/status.json")
    } catch {
        return (false, error.description)
    }
    let expectedRequest = "POST /influx/write?db=fleet&precision=ms HTTP/1.1 Basic ZmxlZXQ6czNjcmV0 gzip"
    var names = ""
    for name in measurements { names += (names.isEmpty ? "" : ",") + name }
    let ok =
        report.failure == nil && report.remaining == 0 && report.delivered >= 1 && report.spooledLines == 1 && report.rejectedLines == 1
        && !seen.isEmpty && seen.allSatisfy { $0 == expectedRequest }
        && lines.contains("app,device=board-7,unit=a requests=5i 1700000000000")
        && measurements.contains("mem") && measurements.contains("fire_agent")
        && lines.allSatisfy { $0.firstRange(ofASCII: "device=board-7") != nil || $0.hasPrefix("app") }
        && readBack == status && snapshot.lastDelivery?.result == "delivered" && figures.delivered >= 1 && status.rejectedSpoolLines == 1
    return (
        ok,
        "\(report.collectedPoints) points, \(report.spooledLines) spool line (\(report.rejectedLines) rejected), "
            + "\(report.delivered) delivered in \(seen.count) requests (\(seen.first ?? "none")); \(names)"
            + (ok
                ? ""
                : "; lines: " + lines.filter { $0.hasPrefix("app") }.joined(separator: " | ") + "; read back \(readBack == status), "
                    + "last \(snapshot.lastDelivery?.result ?? "none"), delivered \(figures.delivered)")
    )
}
let (telemetryOK, telemetryDetail) = telemetryAgentCheck()
check("telemetry agent: config, collectors, spool, gzip'd batches to a write API, status", telemetryOK, telemetryDetail)

// URL parsing and reference resolution (RFC 3986 §5.4's examples), as a redirect is followed.
let resolvedURLs = ["g;x=1/../y", "../../../g", "//g", "?y", "/path with space"].map {
    AbsoluteURL("http://a/b/c/d;p?q")?.resolving($0)?.absoluteString ?? "nil"
}
check(
    "URL references",
    resolvedURLs == ["http://a/b/c/y", "http://a/g", "http://g", "http://a/b/c/d;p?y", "http://a/path%20with%20space"]
        && AbsoluteURL("https://[::1]:8443/x")?.port == 8443,
    resolvedURLs.joined(separator: " "))

// Line protocol, byte for byte what the host agent writes (CollectorTests.lineProtocol).
let pointLine = LineProtocol.encode(
    Point(
        measurement: "my meas,x", tags: ["host": "a b", "k=1": "v,2"],
        fields: ["f": .float(1.5), "n": .integer(-3), "s": .string("say \"hi\" \\ ok"), "b": .bool(true)],
        timestamp: 1_700_000_000_123_456_789), precision: .ms)
let floatLine = LineProtocol.encode(
    Point(measurement: "m", fields: ["a": .float(0.1), "b": .float(1e-7), "c": .float(1e20), "d": .float(-0.25)], timestamp: 0),
    precision: .ns)
check(
    "line protocol",
    pointLine == #"my\ meas\,x,host=a\ b,k\=1=v\,2 b=true,f=1.5,n=-3i,s="say \"hi\" \\ ok" 1700000000123"#
        && floatLine == "m a=0.1,b=1e-07,c=1e+20,d=-0.25 0",
    "\(pointLine ?? "nil") | \(floatLine ?? "nil")")

// The agent's log lines, byte for byte what the host agent writes (DaemonPartsTests.logLines).
let metadata: [String: LogValue] = ["file": .string("app 1.lp"), "line": .string("3")]
let textLine = LogLineRenderer(format: .text, journal: false).render(
    level: .warning, message: "spool line\nrejected", metadata: metadata, epochSeconds: 1_795_000_000)
let journalLine = LogLineRenderer(format: .text, journal: true).render(
    level: .error, message: "refused", metadata: [:], epochSeconds: 1_795_000_000)
let jsonLine = LogLineRenderer(format: .json, journal: false).render(
    level: .info, message: "say \"hi\"\u{1}", metadata: metadata, epochSeconds: 1_795_000_000)
check(
    "log lines (text, journal, JSON)",
    textLine == "2026-11-18T11:06:40Z warning spool line\\nrejected file=\"app 1.lp\" line=3\n" && journalLine == "<3>refused\n"
        && jsonLine
            == "{\"level\":\"info\",\"message\":\"say \\\"hi\\\"\\u0001\",\"metadata\":{\"file\":\"app 1.lp\",\"line\":\"3\"},\"time\":\"2026-11-18T11:06:40Z\"}\n",
    jsonLine.escapingControlCharacters())

let before = Instant.now()
let after = Instant.now()
check("monotonic clock", after.nanoseconds >= before.nanoseconds && before.nanoseconds > 0, "\(before.nanoseconds) ns")

let fd = open("/nonexistent/tinyfire-core-check", O_RDONLY)
let code = errno
check("open + errno", fd == -1 && code == ENOENT, "fd \(fd), \(errnoMessage(code))")

check("word size", MemoryLayout<Int>.size == MemoryLayout<UnsafeRawPointer>.size, "Int is \(MemoryLayout<Int>.size * 8)-bit")
print(failures == 0 ? "core-check: all passed" : "core-check: \(failures) failed")
exit(failures == 0 ? 0 : 1)
