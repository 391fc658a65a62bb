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
    /// The config file in use.
    public var configFile: String
    /// When it was loaded (at start or by the last accepted reload).
    public var configLoadedAt: Date
    /// Why the last reload was refused (the running config was kept); nil after a good one.
    public var reloadError: String?
    /// What reachability says about the route to the server: `reachable <interface>`,
    /// `not-reachable` or `unknown`.
    public var reachability: String
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

    /// The JSON the status file holds (sorted keys, one document).
    public func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return try encoder.encode(self)
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
        let data: Data
        do {
            data = try encoded()
        } catch {
            throw AgentError(description: "status cannot be encoded: \(error)")
        }
        let directory = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw AgentError(description: "status file \(temporary): \(String(cString: strerror(errno)))") }
        var bytes = [UInt8](data)
        bytes.append(UInt8(ascii: "\n"))
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard written == bytes.count, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw AgentError(description: "status file \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Whether the process that wrote this still runs (signal 0 reaches it).
    public var daemonIsAlive: Bool {
        state != "stopped" && (kill(pid, 0) == 0 || errno == EPERM)
    }
}
