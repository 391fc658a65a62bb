import Foundation
import Testing
import TinyFireCore

@testable import FireAgent

@Suite("Daemon parts: schedule, log lines, systemd notifications")
struct DaemonPartsTests {
    private func schedule(collect: Int = 10, sync: Int = 60, jitter: Double = 0.1, watchdog: Duration? = nil, random: Double = 0.5)
        -> DaemonSchedule
    {
        DaemonSchedule(
            collectEvery: .seconds(collect), syncEvery: .seconds(sync), jitter: jitter, watchdogInterval: watchdog, now: .zero,
            random: random)
    }

    @Test("collection at once and on a fixed cadence; the first sync falls somewhere in the first interval")
    func cadence() {
        var plan = schedule()
        #expect(plan.due(at: .zero, random: 0.5) == [.collect])
        #expect(plan.nextCollect == .seconds(10))
        // A round that runs late does not shift the ones after it.
        #expect(plan.due(at: .seconds(13), random: 0.5) == [.collect])
        #expect(plan.nextCollect == .seconds(20))
        // Past more than a whole period (suspended): a new cadence from now, no catching up.
        #expect(plan.due(at: .seconds(47), random: 0.5) == [.collect, .sync])
        #expect(plan.nextCollect == .seconds(57))
        #expect(plan.due(at: .seconds(50), random: 0.5) == [])
        // The first sync's place depends on the random draw: early for 0, a full period for 1.
        #expect(schedule(random: 0).nextSync == .seconds(6))
        #expect(schedule(random: 1).nextSync == .seconds(60))
    }

    @Test("a fleet started together spreads its syncs over the interval; each next sync is the period ± jitter")
    func jitterSpreads() {
        let firsts = (0..<100).map { schedule(random: Double($0) / 99).nextSync }
        #expect(Set(firsts).count == 100)
        #expect(firsts.min()! >= .seconds(6) && firsts.max()! <= .seconds(60))
        var plan = schedule(jitter: 0.2, random: 0)
        _ = plan.due(at: .seconds(12), random: 0)  // the first sync, at 12 s: next one 48 s later
        #expect(plan.nextSync == .seconds(12) + .seconds(48))
        _ = plan.due(at: plan.nextSync, random: 1)
        #expect(plan.nextSync == .seconds(60) + .seconds(72))
        var flat = schedule(jitter: 0, random: 1)
        _ = flat.due(at: .seconds(60), random: 0.9)
        #expect(flat.nextSync == .seconds(120))
    }

    @Test("the route coming back makes a sync due now; a reload with shorter periods brings the next rounds closer")
    func routeAndReload() {
        var plan = schedule(random: 1)
        _ = plan.due(at: .zero, random: 0.5)
        plan.routeReturned(at: .seconds(3))
        #expect(plan.due(at: .seconds(3), random: 0.5) == [.sync])
        #expect(plan.nextSync >= .seconds(57))
        plan.reconfigure(collectEvery: .seconds(2), syncEvery: .seconds(5), jitter: 0, now: .seconds(4))
        #expect(plan.nextCollect == .seconds(6))
        #expect(plan.nextSync == .seconds(9))
        // A longer period does not push a round that is already due sooner.
        plan.reconfigure(collectEvery: .seconds(600), syncEvery: .seconds(600), jitter: 0, now: .seconds(5))
        #expect(plan.nextCollect == .seconds(6) && plan.nextSync == .seconds(9))
    }

    @Test("the watchdog is fed every half of systemd's interval; without one it is never due")
    func watchdog() {
        var plan = schedule(collect: 60, sync: 600, watchdog: .seconds(20))
        #expect(plan.due(at: .zero, random: 0.5) == [.collect, .watchdog])
        #expect(plan.nextDeadline == .seconds(10))
        #expect(plan.due(at: .seconds(10), random: 0.5) == [.watchdog])
        var none = schedule()
        _ = none.due(at: .zero, random: 0.5)
        #expect(none.nextWatchdog == nil && none.nextDeadline == .seconds(10))
    }

    @Test("log lines: text with time for terminals, a <priority> prefix and no time for the journal, JSON objects")
    func logLines() throws {
        let time: Int64 = 1_795_000_000
        let metadata: Logger.Metadata = ["file": "app 1.lp", "line": "3"]
        let text = LogOutput(format: .text, journal: false)
        #expect(
            text.render(level: .warning, message: "spool line\nrejected", metadata: metadata, epochSeconds: time)
                == "2026-11-18T11:06:40Z warning spool line\\nrejected file=\"app 1.lp\" line=3\n")
        let journal = LogOutput(format: .text, journal: true)
        #expect(journal.render(level: .error, message: "refused", metadata: [:], epochSeconds: time) == "<3>refused\n")
        #expect(journal.render(level: .info, message: "ok", metadata: [:], epochSeconds: time) == "<6>ok\n")
        let json = LogOutput(format: .json, journal: false)
        let line = json.render(level: .info, message: "say \"hi\"\u{1}", metadata: metadata, epochSeconds: time)
        #expect(line.hasSuffix("\n") && !line.dropLast().contains("\n"))
        // Byte for byte, as the Embedded agent's core-check expects it too.
        #expect(
            line
                == #"{"level":"info","message":"say \"hi\"\u0001","metadata":{"file":"app 1.lp","line":"3"},"time":"2026-11-18T11:06:40Z"}"#
                + "\n")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["message"] as? String == "say \"hi\"\u{1}")
        #expect(object["level"] as? String == "info" && object["time"] as? String == "2026-11-18T11:06:40Z")
        #expect((object["metadata"] as? [String: String]) == ["file": "app 1.lp", "line": "3"])
        let journalJSON = LogOutput(format: .json, journal: true)
        #expect(!journalJSON.render(level: .info, message: "x", metadata: [:], epochSeconds: time).contains("time"))
        // JOURNAL_STREAM counts only when it names the stream standard error still is.
        #expect(!LogOutput.stderrIsJournal(journalStream: "1:2"))
        #expect(!LogOutput.stderrIsJournal(journalStream: ""))
        var info = stat()
        fstat(2, &info)
        #expect(LogOutput.stderrIsJournal(journalStream: "\(info.st_dev):\(info.st_ino)"))
    }

    @Test("the agent's logger writes whole lines to its descriptor from its level up, with its metadata")
    func loggerOutput() throws {
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        defer { close(fds[0]) }
        let output = LogOutput(format: .json, journal: true, fd: fds[1])
        var logger = Logger(label: "test", output: output, level: .notice)
        logger[metadataKey: "device"] = "board-1"
        var built = 0
        logger.info("not written: \({ built += 1; return "x" }())")
        logger.warning("spool file cannot be read", metadata: ["file": "a.lp", "device": "board-2"])
        logger.error("queue: \(3) records")
        logger.debug("not written either")
        close(fds[1])
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fds[0], &buffer, buffer.count)
            if n <= 0 { break }
            bytes += buffer[0..<n]
        }
        #expect(built == 0, "a message below the level was built")
        #expect(
            String(decoding: bytes, as: UTF8.self)
                == #"{"level":"warning","message":"spool file cannot be read","metadata":{"device":"board-2","file":"a.lp"}}"# + "\n"
                + #"{"level":"error","message":"queue: 3 records","metadata":{"device":"board-1"}}"# + "\n")
    }

    @Test("sd_notify datagrams reach a NOTIFY_SOCKET path and an abstract one; WATCHDOG_USEC is read, for this pid only")
    func notifications() throws {
        for abstract in [false, true] {
            let name =
                abstract
                ? "@tinyfire-notify-\(UUID().uuidString.prefix(8))" : NSTemporaryDirectory() + "notify-\(UUID().uuidString.prefix(8))"
            let listener = try DatagramListener(path: name)
            let notifier = try #require(SystemdNotifier(environment: ["NOTIFY_SOCKET": name, "WATCHDOG_USEC": "3000000"]))
            #expect(notifier.watchdogInterval == .seconds(3))
            notifier.ready(status: "running")
            notifier.watchdog()
            #expect(listener.receive() == "READY=1\nSTATUS=running")
            #expect(listener.receive() == "WATCHDOG=1")
        }
        // A socket nobody reads: a ping is dropped at once, a state message after waiting for
        // room, and neither blocks; once the queue has room again, messages go through.
        let name = NSTemporaryDirectory() + "notify-\(UUID().uuidString.prefix(8))"
        let deaf = try DatagramListener(path: name)
        let queued = deaf.fill()
        #expect(queued >= 1)
        let notifier = try #require(SystemdNotifier(environment: ["NOTIFY_SOCKET": name]))
        #expect(!notifier.watchdog())
        #expect(!notifier.ready(status: "running"))
        #expect(deaf.drain().count == queued, "the dropped messages are not in the queue")
        #expect(notifier.ready(status: "running"))
        #expect(deaf.drain() == ["READY=1\nSTATUS=running"])
        #expect(SystemdNotifier(environment: [:]) == nil)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "relative"]) == nil)
        let other = try #require(SystemdNotifier(environment: ["NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"]))
        #expect(other.watchdogInterval == nil)
    }
}

/// A datagram socket bound to a path (or an abstract name starting with `@`), as systemd's
/// notification socket is.
final class DatagramListener: @unchecked Sendable {
    let fd: Int32
    let path: String
    /// The bound address and its length (an abstract name's length says where it ends).
    private var address = sockaddr_un()
    private let length: socklen_t

    init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
            if bytes.first == UInt8(ascii: "@") { raw[0] = 0 }
        }
        length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == UInt8(ascii: "@") ? 0 : 1))
        let bound = withUnsafePointer(to: &address) { [fd, length] in
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else { throw FixtureError(description: "bind \(path): \(String(cString: strerror(errno)))") }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit {
        close(fd)
        if !path.hasPrefix("@") { unlink(path) }
    }

    /// Fills the socket's queue as a service manager that stopped reading would leave it: sends
    /// datagrams until the kernel refuses more (`net.unix.max_dgram_qlen` of them). Returns how
    /// many went in.
    @discardableResult
    func fill() -> Int {
        let sender = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(sender) }
        var count = 0
        while count < 100_000 {
            let sent = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(sender, "FILLER=1", 8, Int32(MSG_DONTWAIT), $0, length) }
            }
            guard sent == 8 else { break }
            count += 1
        }
        return count
    }

    /// Every datagram waiting now, as text (without waiting for more).
    func drain() -> [String] {
        var messages: [String] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            guard count >= 0 else { return messages }
            messages.append(String(decoding: buffer[0..<count], as: UTF8.self))
        }
    }

    /// The next datagram as text, or nil after 10 s without one.
    func receive() -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(fd, &buffer, buffer.count, 0)
        return count < 0 ? nil : String(decoding: buffer[0..<count], as: UTF8.self)
    }
}

@Suite("The systemd unit in etc/")
struct SystemdUnitTests {
    @Test("etc/fire-agent.service passes systemd-analyze verify, is Type=notify with a watchdog, and is hardened")
    func unitVerifies() throws {
        let root = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let unit = try String(contentsOf: root.appending(path: "etc/fire-agent.service"), encoding: .utf8)
        for line in [
            "Type=notify", "WatchdogSec=60", "ExecReload=/bin/kill -HUP $MAINPID", "NoNewPrivileges=yes", "ProtectSystem=strict",
            "CapabilityBoundingSet=", "RestartPreventExitStatus=78", "User=fire-agent", "SupplementaryGroups=fire-spool",
        ] {
            #expect(unit.split(separator: "\n").contains(Substring(line)), "missing \(line)")
        }
        // verify checks that ExecStart's program exists: point it at the built binary.
        let directory = FileManager.default.temporaryDirectory.appending(path: "tinyfire-unit-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appending(path: "fire-agent.service")
        try Data(unit.replacingOccurrences(of: "/usr/bin/fire-agent", with: try fireAgentPath()).utf8).write(to: file)
        let analyze = try #require(which("systemd-analyze"), "systemd-analyze is missing (scripts/install-deps.sh installs systemd)")
        let verify = try runCapturingOutput(analyze, ["verify", file.path])
        #expect(verify.status == 0, "\(verify.stderr)")
        let security = try runCapturingOutput(analyze, ["security", "--offline=yes", file.path])
        let summary = String(decoding: security.stdout, as: UTF8.self)
        // "Overall exposure level for fire-agent.service: 2.2 OK": below 3 is systemd's "OK".
        let level = summary.split(separator: "\n").last { $0.contains("Overall exposure level") }?.split(separator: " ")
            .compactMap { Double($0) }.first
        #expect((level ?? 10) < 3, "\(summary.suffix(300))")
        // The kernel's "clock synchronized" flag is read with adjtimex: allowed, and not
        // forbidden again by ProtectClock= (docs/OPERATIONS.md, "Time").
        #expect(unit.contains("SystemCallFilter=@system-service adjtimex\n") && !unit.contains("ProtectClock=yes"))
    }

    @Test(
        "etc/fire-agent-firmware@.service (the privileged firmware steps) passes systemd-analyze verify and holds the install lock shared")
    func firmwareUnitVerifies() throws {
        let root = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let unit = try String(contentsOf: root.appending(path: "etc/fire-agent-firmware@.service"), encoding: .utf8)
        for line in [
            "Type=oneshot", "NoNewPrivileges=yes", "PrivateNetwork=yes",
            "ExecStart=/usr/bin/flock --shared /var/lib/fire-agent/firmware/install.lock /etc/fire-agent/firmware-%i "
                + "/var/lib/fire-agent/firmware/staging/image.bin",
        ] {
            #expect(unit.split(separator: "\n").contains(Substring(line)), "missing \(line)")
        }
        let directory = FileManager.default.temporaryDirectory.appending(path: "tinyfire-unit-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try Data(unit.utf8).write(to: directory.appending(path: "fire-agent-firmware@.service"))
        let analyze = try #require(which("systemd-analyze"), "systemd-analyze is missing (scripts/install-deps.sh installs systemd)")
        for step in ["install", "commit"] {
            let instance = directory.appending(path: "fire-agent-firmware@\(step).service").path
            let verify = try runCapturingOutput(analyze, ["verify", instance])
            #expect(verify.status == 0, "\(step): \(verify.stderr)")
            let security = try runCapturingOutput(analyze, ["security", "--offline=yes", instance])
            let summary = String(decoding: security.stdout, as: UTF8.self)
            let level = summary.split(separator: "\n").last { $0.contains("Overall exposure level") }?.split(separator: " ")
                .compactMap { Double($0) }.first
            // Privileged on purpose (it writes boot media), yet not systemd's "UNSAFE" (9+) default.
            #expect((level ?? 10) < 7, "\(summary.suffix(300))")
        }
    }
}

@Suite("The status document")
struct StatusDocumentTests {
    let at = WallTime(secondsSince1970: 1_795_000_000)

    var full: AgentStatus {
        var status = AgentStatus(
            state: "running", pid: 42, version: "0.1.0", startedAt: at, updatedAt: at.adding(.seconds(5)),
            nextUpdateBy: at.adding(.seconds(130)), configFile: "/etc/a \"b\".json5", configLoadedAt: at,
            reachability: "reachable eth0 ethernet", clock: "trusted",
            queue: .init(
                records: 3, bytes: 1234, oldestAgeSeconds: 12.5, delivered: .max, dropped: 1, rejected: 2, discarded: 3, quarantined: 4,
                headFailures: 5, lastFailure: "POST /write answered 503\nretry"),
            deadLetters: 7, rejectedSpoolLines: 8, stoppedCollectors: ["thermal": "no zones", "pressure": "no PSI"])
        status.reloadError = "line 3: bad \u{1}"
        status.lastSync = .init(at: at, collectedPoints: 1, spooledLines: 2, rejectedLines: 3, queuedBatches: 4, error: "full")
        status.lastDelivery = .init(at: at, result: "failed", status: 401, reason: "unauthorized ✓")
        status.lastSuccessfulDelivery = at.adding(.seconds(-60))
        var firmware = AgentStatus.Firmware(phase: "downloading", downloadedBytes: 512, size: 2048)
        firmware.version = "1.2.0"
        firmware.fromVersion = "1.1.0"
        firmware.since = at
        firmware.lastCheck = at.adding(.seconds(1))
        firmware.lastCheckResult = "offered 1.2.0"
        firmware.waiting = "the install window"
        firmware.highestAccepted = "1.1.0"
        status.firmware = firmware
        return status
    }

    func temporaryDirectory() -> String {
        FileManager.default.temporaryDirectory.appending(path: "tinyfire-status-\(UUID().uuidString.prefix(8))").path
    }

    @Test("what the daemon writes reads back the same, every optional part present or absent, text escaped")
    func roundTrip() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var status = full
        try status.write(to: directory + "/sub/status.json")
        #expect(try AgentStatus.read(path: directory + "/sub/status.json") == status)
        #expect(try FileManager.default.attributesOfItem(atPath: directory + "/sub")[.posixPermissions] as? Int == 0o755)
        #expect(try FileManager.default.attributesOfItem(atPath: directory + "/sub/status.json")[.posixPermissions] as? Int == 0o644)
        status = AgentStatus(
            state: "starting", pid: 1, version: "0.1.0", startedAt: at, updatedAt: at, configFile: "c", configLoadedAt: at,
            reachability: "unknown",
            queue: .init(records: 0, bytes: 0, delivered: 0, dropped: 0, rejected: 0, discarded: 0, quarantined: 0, headFailures: 0),
            deadLetters: 0, rejectedSpoolLines: 0, stoppedCollectors: [:])
        try status.write(to: directory + "/sub/status.json")
        #expect(try AgentStatus.read(path: directory + "/sub/status.json") == status)
        #expect(!FileManager.default.fileExists(atPath: directory + "/sub/status.json.tmp"))
    }

    /// The status as Foundation's `JSONDecoder` reads it: the reader the agent used before.
    struct Decoded: Decodable {
        struct Sync: Decodable {
            var at: Date
            var collectedPoints, spooledLines, rejectedLines, queuedBatches: Int
            var error: String?
        }
        struct Delivery: Decodable {
            var at: Date
            var result: String
            var status: Int?
            var reason: String?
        }
        struct Queue: Decodable {
            var records: Int
            var bytes: Int64
            var oldestAgeSeconds: Double?
            var delivered, dropped, rejected, discarded, quarantined: UInt64
            var headFailures: Int
            var lastFailure: String?
        }
        struct Firmware: Decodable {
            var phase: String
            var version, fromVersion, reason, highestAccepted, lastCheckResult, waiting: String?
            var downloadedBytes, size: Int64
            var since, lastCheck: Date?
        }
        var state, version, configFile, reachability: String
        var pid: Int32
        var startedAt, updatedAt, configLoadedAt: Date
        var nextUpdateBy, lastSuccessfulDelivery: Date?
        var stale, reloadError, clock: String?
        var lastSync: Sync?
        var lastDelivery: Delivery?
        var queue: Queue
        var deadLetters, rejectedSpoolLines: Int
        var stoppedCollectors: [String: String]
        var firmware: Firmware?
    }

    @Test("the core's reader and Foundation's JSONDecoder read every written status alike, field by field")
    func againstJSONDecoder() throws {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        var variants = [full]
        var bare = full
        bare.lastSync = nil
        bare.lastDelivery = nil
        bare.firmware = .init(phase: "idle")
        bare.queue.oldestAgeSeconds = 0
        bare.queue.lastFailure = nil
        bare.clock = nil
        bare.stoppedCollectors = [:]
        variants.append(bare)
        bare.firmware = nil
        bare.queue.delivered = UInt64(Int64.max) + 1
        bare.startedAt = WallTime(secondsSince1970: 2_147_483_648)
        variants.append(bare)
        for status in variants {
            let bytes = status.encoded()
            let ours = try AgentStatus.parse(bytes)
            let theirs = try decoder.decode(Decoded.self, from: Data(bytes))
            #expect(ours == status)
            #expect(ours.state == theirs.state && ours.pid == theirs.pid && ours.version == theirs.version)
            #expect(ours.configFile == theirs.configFile && ours.reachability == theirs.reachability && ours.clock == theirs.clock)
            #expect(ours.startedAt.date == theirs.startedAt && ours.updatedAt.date == theirs.updatedAt)
            #expect(ours.configLoadedAt.date == theirs.configLoadedAt && ours.nextUpdateBy?.date == theirs.nextUpdateBy)
            #expect(ours.lastSuccessfulDelivery?.date == theirs.lastSuccessfulDelivery)
            #expect(ours.stale == theirs.stale && ours.reloadError == theirs.reloadError)
            #expect(ours.lastSync?.at.date == theirs.lastSync?.at && ours.lastSync?.error == theirs.lastSync?.error)
            #expect(ours.lastSync?.queuedBatches == theirs.lastSync?.queuedBatches)
            #expect(ours.lastDelivery?.at.date == theirs.lastDelivery?.at && ours.lastDelivery?.result == theirs.lastDelivery?.result)
            #expect(ours.lastDelivery?.status == theirs.lastDelivery?.status && ours.lastDelivery?.reason == theirs.lastDelivery?.reason)
            #expect(ours.queue.records == theirs.queue.records && ours.queue.bytes == theirs.queue.bytes)
            #expect(ours.queue.oldestAgeSeconds == theirs.queue.oldestAgeSeconds && ours.queue.lastFailure == theirs.queue.lastFailure)
            #expect(ours.queue.delivered == theirs.queue.delivered && ours.queue.quarantined == theirs.queue.quarantined)
            #expect(ours.deadLetters == theirs.deadLetters && ours.rejectedSpoolLines == theirs.rejectedSpoolLines)
            #expect(ours.stoppedCollectors == theirs.stoppedCollectors)
            #expect(ours.firmware?.phase == theirs.firmware?.phase && ours.firmware?.version == theirs.firmware?.version)
            #expect(ours.firmware?.since?.date == theirs.firmware?.since && ours.firmware?.lastCheck?.date == theirs.firmware?.lastCheck)
            #expect(ours.firmware?.waiting == theirs.firmware?.waiting && ours.firmware?.size == theirs.firmware?.size)
        }
    }

    @Test("a status file that is not one is refused naming the key, the place or the file's problem; unknown keys and nulls pass")
    func refusals() throws {
        let directory = temporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let good = String(decoding: full.encoded(), as: UTF8.self)
        func reason(_ text: String) -> String {
            do {
                _ = try AgentStatus.parse(Array(text.utf8))
                return "accepted"
            } catch {
                return error.description
            }
        }
        #expect(reason("{}") == "queue: missing")
        #expect(reason("[]") == "the document is not a JSON object")
        #expect(reason(good.replacingOccurrences(of: #""pid" : 42"#, with: #""pid" : "42""#)) == "pid: expected an integer, found a string")
        #expect(reason(good.replacingOccurrences(of: #""pid" : 42"#, with: #""pid" : 4294967296"#)) == "pid: not a process id")
        #expect(
            reason(good.replacingOccurrences(of: #""records" : 3"#, with: #""records" : 3.5"#))
                == "queue.records: expected an integer, found a number")
        #expect(
            reason(good.replacingOccurrences(of: #""dropped" : 1"#, with: #""dropped" : -1"#))
                == "queue.dropped: expected a whole number from 0, found an integer")
        #expect(reason(good.replacingOccurrences(of: "2026-11-18T", with: "2026-11-31T")).hasSuffix("is not an RFC 3339 time"))
        #expect(
            reason(good.replacingOccurrences(of: #""thermal" : "no zones""#, with: #""thermal" : 1"#))
                == "stoppedCollectors.thermal: expected a string, found an integer")
        #expect(reason(good + "x").hasPrefix("line "))
        // A status from an earlier agent has no clock; a later one may add keys; null is absent.
        let older = try AgentStatus.parse(
            Array(good.replacingOccurrences(of: #""clock" : "trusted","#, with: #""clock" : null, "future" : [1, {"x": 2}],"#).utf8))
        var expected = full
        expected.clock = nil
        #expect(older == expected)

        let path = directory + "/status.json"
        #expect(throws: AgentError.self) { try AgentStatus.read(path: path) }
        func readError(_ path: String) -> String {
            do {
                _ = try AgentStatus.read(path: path)
                return "read"
            } catch {
                return error.description
            }
        }
        #expect(readError(path).hasPrefix("status file \(path) does not exist"))
        #expect(readError(directory).contains("cannot be read: Is a directory"))
        // `status --status-file` takes any path: a FIFO there is refused, not waited on.
        let fifo = directory + "/status.fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(readError(fifo).hasPrefix("status file \(fifo) is not a regular file (a FIFO)"), "\(readError(fifo))")
        try Data(repeating: 0x20, count: AgentStatus.maximumFileBytes + 1).write(to: URL(filePath: path))
        #expect(readError(path).contains("is larger than 1MiB: not a status file"))
        try Data("{}".utf8).write(to: URL(filePath: path))
        #expect(readError(path) == "status file \(path) is not a fire-agent status document: queue: missing")
    }

    @Test("staleness and the text for people count seconds on the wall clock, rounded")
    func describing() {
        var status = full
        let now = status.nextUpdateBy!.adding(.milliseconds(10_600))
        let stale = status.staleness(now: now, alive: true, fileSystem: "its file system (/run) is read-only")
        #expect(stale == "written 136 s ago, due again 11 s ago: the daemon cannot write it: its file system (/run) is read-only")
        #expect(status.staleness(now: now, alive: false, fileSystem: nil) == nil)
        #expect(status.staleness(now: status.nextUpdateBy!, alive: true, fileSystem: nil) == nil)
        status.stale = stale
        let text = status.describe(alive: true, now: at.adding(.seconds(90)))
        #expect(text.hasPrefix("fire-agent 0.1.0: running, pid 42, started 2026-11-18T11:06:40Z (90 s ago)\nSTALE:"))
        #expect(
            text.contains("firmware:      downloading 1.2.0 (from 1.1.0): 512 of 2048 bytes (25 %), since 2026-11-18T11:06:40Z (90 s ago)"))
        #expect(text.contains("last success:  2026-11-18T11:05:40Z (150 s ago)"))
        #expect(text.contains("collector off: pressure: no PSI\ncollector off: thermal: no zones"))
        #expect(text.hasSuffix("written:       2026-11-18T11:06:45Z (85 s ago)"))
        #expect(status.describe(alive: false, now: at).contains("not running (gone without stopping)"))
        #expect(directoryPart(of: "/status.json") == "/" && directoryPart(of: "status.json") == ".")
    }
}
