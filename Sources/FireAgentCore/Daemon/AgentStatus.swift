#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What the running daemon tells `fire-agent status`: written by `fire-agent run` to
/// `daemon.statusFile` (JSON, replaced atomically by rename) whenever something changes, at
/// most once a second, and once more as it stops. Times are RFC 3339 in UTC.
public struct AgentStatus: Codable, Sendable, Equatable {
    /// What the last sync (collection and spool queued) did.
    public struct Sync: Codable, Sendable, Equatable {
        /// When it ran.
        public var at: Date
        /// Points collected since the sync before.
        public var collectedPoints: Int
        /// Spool lines taken.
        public var spooledLines: Int
        /// Spool lines refused (kept in `rejected/`).
        public var rejectedLines: Int
        /// Batches queued.
        public var queuedBatches: Int
        /// Why something could not be queued, if it could not.
        public var error: String?
    }

    /// The last answer to a delivery attempt.
    public struct Delivery: Codable, Sendable, Equatable {
        /// When.
        public var at: Date
        /// `delivered`, `failed`, `dead-lettered`, `split` or `dropped`.
        public var result: String
        /// The server's status, when it answered.
        public var status: Int?
        /// Why it failed or was set aside.
        public var reason: String?
    }

    /// The offline queue's figures.
    public struct Queue: Codable, Sendable, Equatable {
        /// Batches queued.
        public var records: Int
        /// Their bytes on disk.
        public var bytes: Int64
        /// Seconds since the oldest queued batch was queued.
        public var oldestAgeSeconds: Double?
        /// Batches delivered (persistent across restarts).
        public var delivered: UInt64
        /// Batches dropped to stay in bounds (`.dropOldest`; persistent).
        public var dropped: UInt64
        /// Batches refused because the queue was full (persistent).
        public var rejected: UInt64
        /// Batches removed without delivery: dead letters and split batches (persistent).
        public var discarded: UInt64
        /// Damaged records set aside at open (persistent).
        public var quarantined: UInt64
        /// Failed attempts in a row of the oldest batch.
        public var headFailures: Int
        /// Why the oldest batch is failing, if it is.
        public var lastFailure: String?
    }

    /// `running`, `stopping` or `stopped`.
    public var state: String
    /// The daemon's process id.
    public var pid: Int32
    /// fire-agent's version.
    public var version: String
    /// When the daemon started.
    public var startedAt: Date
    /// When this was written.
    public var updatedAt: Date
    /// When the daemon will have written this file again at the latest (it rewrites it at
    /// every sync): past it, what the file says is stale. nil once the daemon stopped.
    public var nextUpdateBy: Date?
    /// Set by `fire-agent status`, never by the daemon: why what it shows is stale.
    public var stale: String?
    /// The config file in use.
    public var configFile: String
    /// When it was loaded (at start or by the last accepted reload).
    public var configLoadedAt: Date
    /// Why the last reload was refused (the running config was kept); nil after a good one.
    public var reloadError: String?
    /// What reachability says about the route to the server: `reachable <interface>`,
    /// `not-reachable` or `unknown`.
    public var reachability: String
    /// `trusted`, or why the wall clock is not (decisions that need the date wait; see
    /// `ClockVerdict`). Nil in status files of earlier versions.
    public var clock: String?
    /// The last sync.
    public var lastSync: Sync?
    /// The last delivery attempt's outcome.
    public var lastDelivery: Delivery?
    /// When a batch was last delivered.
    public var lastSuccessfulDelivery: Date?
    /// The queue.
    public var queue: Queue
    /// Dead letters kept in `queue.deadLetterDirectory`.
    public var deadLetters: Int
    /// Spool lines refused since the daemon started.
    public var rejectedSpoolLines: Int
    /// Collectors switched off because they failed on this board, with the reason.
    public var stoppedCollectors: [String: String]
    /// Firmware updates, when configured.
    public var firmware: Firmware?

    /// Where firmware updates stand (the updater's snapshot).
    public struct Firmware: Codable, Sendable, Equatable {
        /// The update's phase (`idle` when none).
        public var phase: String
        /// The version being installed, or last installed or refused.
        public var version: String?
        /// The version that ran when it was offered.
        public var fromVersion: String?
        /// Image bytes on disk.
        public var downloadedBytes: Int64
        /// The image's size.
        public var size: Int64
        /// Why it failed, or a note.
        public var reason: String?
        /// When the phase began.
        public var since: Date?
        /// The highest version ever accepted.
        public var highestAccepted: String?
        /// When the manifest was last polled.
        public var lastCheck: Date?
        /// What the last poll found.
        public var lastCheckResult: String?
        /// What the update waits for now (the link, the install window, the inhibit lock).
        public var waiting: String?

        /// Nothing under way yet.
        public init(phase: String, downloadedBytes: Int64 = 0, size: Int64 = 0) {
            self.phase = phase
            self.downloadedBytes = downloadedBytes
            self.size = size
        }

        var json: StatusJSON {
            var members: [(String, StatusJSON)] = [
                ("phase", .string(phase)), ("downloadedBytes", .integer(downloadedBytes)), ("size", .integer(size)),
            ]
            for (key, value) in [
                ("version", version), ("fromVersion", fromVersion), ("reason", reason), ("highestAccepted", highestAccepted),
                ("lastCheckResult", lastCheckResult), ("waiting", waiting),
            ] {
                if let value { members.append((key, .string(value))) }
            }
            if let since { members.append(("since", .date(since))) }
            if let lastCheck { members.append(("lastCheck", .date(lastCheck))) }
            return .object(members)
        }
    }

    /// The JSON the status file holds: one object, keys sorted, one member per line, times in
    /// RFC 3339. Written by hand rather than with `JSONEncoder`: the daemon writes it after
    /// every change, and the encoder's generic machinery and calendar-based date formatting
    /// would keep about 2 MiB of extra code resident in the daemon (measured with callgrind).
    public func encoded() -> Data {
        var members: [(String, StatusJSON)] = [
            ("configFile", .string(configFile)), ("configLoadedAt", .date(configLoadedAt)), ("deadLetters", .integer(Int64(deadLetters))),
            ("pid", .integer(Int64(pid))), ("reachability", .string(reachability)),
            ("rejectedSpoolLines", .integer(Int64(rejectedSpoolLines))), ("startedAt", .date(startedAt)), ("state", .string(state)),
            ("stoppedCollectors", .object(stoppedCollectors.map { ($0.key, .string($0.value)) })), ("updatedAt", .date(updatedAt)),
            ("version", .string(version)),
        ]
        if let reloadError { members.append(("reloadError", .string(reloadError))) }
        if let nextUpdateBy { members.append(("nextUpdateBy", .date(nextUpdateBy))) }
        if let stale { members.append(("stale", .string(stale))) }
        if let clock { members.append(("clock", .string(clock))) }
        if let lastSuccessfulDelivery { members.append(("lastSuccessfulDelivery", .date(lastSuccessfulDelivery))) }
        if let lastSync {
            var sync: [(String, StatusJSON)] = [
                ("at", .date(lastSync.at)), ("collectedPoints", .integer(Int64(lastSync.collectedPoints))),
                ("queuedBatches", .integer(Int64(lastSync.queuedBatches))), ("rejectedLines", .integer(Int64(lastSync.rejectedLines))),
                ("spooledLines", .integer(Int64(lastSync.spooledLines))),
            ]
            if let error = lastSync.error { sync.append(("error", .string(error))) }
            members.append(("lastSync", .object(sync)))
        }
        if let lastDelivery {
            var delivery: [(String, StatusJSON)] = [("at", .date(lastDelivery.at)), ("result", .string(lastDelivery.result))]
            if let status = lastDelivery.status { delivery.append(("status", .integer(Int64(status)))) }
            if let reason = lastDelivery.reason { delivery.append(("reason", .string(reason))) }
            members.append(("lastDelivery", .object(delivery)))
        }
        var queueMembers: [(String, StatusJSON)] = [
            ("bytes", .integer(queue.bytes)), ("delivered", .unsigned(queue.delivered)), ("discarded", .unsigned(queue.discarded)),
            ("dropped", .unsigned(queue.dropped)), ("headFailures", .integer(Int64(queue.headFailures))),
            ("quarantined", .unsigned(queue.quarantined)), ("records", .integer(Int64(queue.records))),
            ("rejected", .unsigned(queue.rejected)),
        ]
        if let age = queue.oldestAgeSeconds { queueMembers.append(("oldestAgeSeconds", .number(age))) }
        if let failure = queue.lastFailure { queueMembers.append(("lastFailure", .string(failure))) }
        members.append(("queue", .object(queueMembers)))
        if let firmware { members.append(("firmware", firmware.json)) }
        var out = ""
        StatusJSON.object(members).write(to: &out, indent: "")
        return Data(out.utf8)
    }

    /// Reads a status file.
    /// - Parameter path: the file.
    /// - Throws: `AgentError` naming the file when it is missing or not a status document.
    public static func read(path: String) throws(AgentError) -> AgentStatus {
        guard let data = FileManager.default.contents(atPath: path) else {
            let reason = access(path, F_OK) == 0 ? "cannot be read: \(String(cString: strerror(errno)))" : "does not exist"
            throw AgentError(description: "status file \(path) \(reason) (is fire-agent run running with this config?)")
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        do {
            return try decoder.decode(AgentStatus.self, from: data)
        } catch {
            throw AgentError(description: "status file \(path) is not a fire-agent status document: \(error)")
        }
    }

    /// Writes `self` to `path` atomically: a temporary file beside it, then a rename. The
    /// directory is created (0755) when missing; the file is 0644 (it holds no secrets).
    /// - Parameter path: the status file.
    /// - Throws: `AgentError` naming the file.
    public func write(to path: String) throws(AgentError) {
        let data = encoded()
        let directory = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw AgentError(description: "status file \(temporary): \(String(cString: strerror(errno)))") }
        var bytes = [UInt8](data)
        bytes.append(UInt8(ascii: "\n"))
        let written = writeAll(fd, bytes)
        close(fd)
        guard written, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw AgentError(description: "status file \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Why this status is stale at `now`, if it is: a live daemon that has not rewritten it by
    /// `nextUpdateBy`. `fileSystem` says what the status file's file system is like (read-only,
    /// full), when that explains it. Sans-I/O.
    public func staleness(now: Date, alive: Bool, fileSystem: String?) -> String? {
        guard alive, let due = nextUpdateBy, now > due else { return nil }
        let late = Int(now.timeIntervalSince(due).rounded())
        let why = fileSystem.map { "the daemon cannot write it: \($0)" } ?? "the daemon did not write it (stuck? see its log)"
        return "written \(Int(now.timeIntervalSince(updatedAt).rounded())) s ago, due again \(late) s ago: \(why)"
    }

    /// Whether the process that wrote this still runs (signal 0 reaches it).
    public var daemonIsAlive: Bool {
        state != "stopped" && (kill(pid, 0) == 0 || errno == EPERM)
    }
}

/// The few JSON shapes the daemon's documents use (status file, firmware state, reports),
/// written with sorted keys and without `JSONEncoder`.
enum StatusJSON: Sendable {
    case string(String)
    case integer(Int64)
    case unsigned(UInt64)
    case number(Double)
    case bool(Bool)
    case null
    case date(Date)
    case array([StatusJSON])
    case object([(String, StatusJSON)])

    /// The document as text, one member per line.
    var text: String {
        var out = ""
        write(to: &out, indent: "")
        return out
    }

    /// The document on one line (a report body, a log line).
    var compactText: String {
        var out = ""
        write(to: &out, indent: nil)
        return out
    }

    /// Writes the value; `indent` nil writes it on one line.
    func write(to out: inout String, indent: String?) {
        switch self {
        case .string(let text): out += text.jsonQuoted
        case .integer(let value): out += String(value)
        case .unsigned(let value): out += String(value)
        case .number(let value): out += value.isFinite ? String(value) : "null"
        case .bool(let value): out += String(value)
        case .null: out += "null"
        case .date(let date): out += AgentLogHandler.timestamp(date).jsonQuoted
        case .array(let items):
            out += "["
            for (index, item) in items.enumerated() {
                if index > 0 { out += ", " }
                item.write(to: &out, indent: indent)
            }
            out += "]"
        case .object(let members):
            guard !members.isEmpty else {
                out += "{}"
                return
            }
            guard let indent else {
                out += "{"
                for (index, (key, value)) in members.sorted(by: { $0.0 < $1.0 }).enumerated() {
                    out += (index == 0 ? "" : ",") + key.jsonQuoted + ":"
                    value.write(to: &out, indent: nil)
                }
                out += "}"
                return
            }
            let inner = indent + "  "
            out += "{\n"
            for (index, (key, value)) in members.sorted(by: { $0.0 < $1.0 }).enumerated() {
                out += inner + key.jsonQuoted + " : "
                value.write(to: &out, indent: inner)
                out += index == members.count - 1 ? "\n" : ",\n"
            }
            out += indent + "}"
        }
    }
}
