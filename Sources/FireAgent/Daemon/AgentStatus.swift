import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Why the agent cannot start or run: a typed error whose message names the problem.
package struct AgentError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    package let description: String
    /// Another fire-agent holds what this one needs (the firmware flow's lock): try later.
    package var isBusy = false

    /// An error saying `description`.
    package init(description: String, isBusy: Bool = false) {
        self.description = description
        self.isBusy = isBusy
    }
}

/// What the running daemon tells `fire-agent status`: written by `fire-agent run` to
/// `daemon.statusFile` (JSON, replaced atomically by rename) whenever something changes, at
/// most once a second, and once more as it stops. Times are RFC 3339 in UTC, whole seconds.
///
/// Written and read without Foundation (`encoded()`, `read(path:)`), so the Embedded agent's
/// `status` reads what either agent wrote. Memory: the document is at most
/// `maximumFileBytes` to read; what it holds is a few strings and one entry per stopped collector.
package struct AgentStatus: Sendable, Equatable {
    /// What the last sync (collection and spool queued) did.
    package struct Sync: Sendable, Equatable {
        /// When it ran.
        package var at: WallTime
        /// Points collected since the sync before.
        package var collectedPoints: Int
        /// Spool lines taken.
        package var spooledLines: Int
        /// Spool lines refused (kept in `rejected/`).
        package var rejectedLines: Int
        /// Batches queued.
        package var queuedBatches: Int
        /// Why something could not be queued, if it could not.
        package var error: String?

        /// A sync's figures.
        package init(at: WallTime, collectedPoints: Int, spooledLines: Int, rejectedLines: Int, queuedBatches: Int, error: String? = nil) {
            self.at = at
            self.collectedPoints = collectedPoints
            self.spooledLines = spooledLines
            self.rejectedLines = rejectedLines
            self.queuedBatches = queuedBatches
            self.error = error
        }
    }

    /// The last answer to a delivery attempt.
    package struct Delivery: Sendable, Equatable {
        /// When.
        package var at: WallTime
        /// `delivered`, `discarded`, `failed`, `dropped`, `quarantined`, `dead-lettered` or `split`.
        package var result: String
        /// The server's status, when it answered.
        package var status: Int?
        /// Why it failed or was set aside.
        package var reason: String?

        /// An attempt's outcome.
        package init(at: WallTime, result: String, status: Int? = nil, reason: String? = nil) {
            self.at = at
            self.result = result
            self.status = status
            self.reason = reason
        }
    }

    /// The offline queue's figures.
    package struct Queue: Sendable, Equatable {
        /// Batches queued.
        package var records: Int
        /// Their bytes on disk.
        package var bytes: Int64
        /// Seconds since the oldest queued batch was queued.
        package var oldestAgeSeconds: Double?
        /// Batches delivered (persistent across restarts).
        package var delivered: UInt64
        /// Batches dropped to stay in bounds (`.dropOldest`; persistent).
        package var dropped: UInt64
        /// Batches refused because the queue was full (persistent).
        package var rejected: UInt64
        /// Batches removed without delivery: dead letters and split batches (persistent).
        package var discarded: UInt64
        /// Damaged records set aside at open (persistent).
        package var quarantined: UInt64
        /// Failed attempts in a row of the oldest batch.
        package var headFailures: Int
        /// Why the oldest batch is failing, if it is.
        package var lastFailure: String?

        /// The queue's figures.
        package init(
            records: Int, bytes: Int64, oldestAgeSeconds: Double? = nil, delivered: UInt64, dropped: UInt64, rejected: UInt64,
            discarded: UInt64, quarantined: UInt64, headFailures: Int, lastFailure: String? = nil
        ) {
            self.records = records
            self.bytes = bytes
            self.oldestAgeSeconds = oldestAgeSeconds
            self.delivered = delivered
            self.dropped = dropped
            self.rejected = rejected
            self.discarded = discarded
            self.quarantined = quarantined
            self.headFailures = headFailures
            self.lastFailure = lastFailure
        }
    }

    /// Where firmware updates stand (the updater's snapshot).
    package struct Firmware: Sendable, Equatable {
        /// The update's phase (`idle` when none).
        package var phase: String
        /// The version being installed, or last installed or refused.
        package var version: String?
        /// The version that ran when it was offered.
        package var fromVersion: String?
        /// Image bytes on disk.
        package var downloadedBytes: Int64
        /// The image's size.
        package var size: Int64
        /// Why it failed, or a note.
        package var reason: String?
        /// When the phase began.
        package var since: WallTime?
        /// The highest version ever accepted.
        package var highestAccepted: String?
        /// When the manifest was last polled.
        package var lastCheck: WallTime?
        /// What the last poll found.
        package var lastCheckResult: String?
        /// What the update waits for now (the link, the install window, the inhibit lock).
        package var waiting: String?

        /// Nothing under way yet.
        package init(phase: String, downloadedBytes: Int64 = 0, size: Int64 = 0) {
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

        init(_ object: StatusFields) throws(StatusFields.Problem) {
            self.init(
                phase: try object.string("phase"), downloadedBytes: try object.int64("downloadedBytes"), size: try object.int64("size"))
            version = try object.optionalString("version")
            fromVersion = try object.optionalString("fromVersion")
            reason = try object.optionalString("reason")
            since = try object.optionalDate("since")
            highestAccepted = try object.optionalString("highestAccepted")
            lastCheck = try object.optionalDate("lastCheck")
            lastCheckResult = try object.optionalString("lastCheckResult")
            waiting = try object.optionalString("waiting")
        }
    }

    /// `running`, `stopping` or `stopped`.
    package var state: String
    /// The daemon's process id.
    package var pid: Int32
    /// fire-agent's version.
    package var version: String
    /// When the daemon started.
    package var startedAt: WallTime
    /// When this was written.
    package var updatedAt: WallTime
    /// When the daemon will have written this file again at the latest (it rewrites it at
    /// every sync): past it, what the file says is stale. nil once the daemon stopped.
    package var nextUpdateBy: WallTime?
    /// Set by `fire-agent status`, never by the daemon: why what it shows is stale.
    package var stale: String?
    /// The config file in use.
    package var configFile: String
    /// When it was loaded (at start or by the last accepted reload).
    package var configLoadedAt: WallTime
    /// Why the last reload was refused (the running config was kept); nil after a good one.
    package var reloadError: String?
    /// What reachability says about the route to the server: `reachable <interface>`,
    /// `not-reachable` or `unknown`.
    package var reachability: String
    /// `trusted`, or why the wall clock is not (decisions that need the date wait; see
    /// `ClockVerdict`). Nil in status files of earlier versions.
    package var clock: String?
    /// The last sync.
    package var lastSync: Sync?
    /// The last delivery attempt's outcome.
    package var lastDelivery: Delivery?
    /// When a batch was last delivered.
    package var lastSuccessfulDelivery: WallTime?
    /// The queue.
    package var queue: Queue
    /// Dead letters kept in `queue.deadLetterDirectory`.
    package var deadLetters: Int
    /// Spool lines refused since the daemon started.
    package var rejectedSpoolLines: Int
    /// Collectors switched off because they failed on this board, with the reason.
    package var stoppedCollectors: [String: String]
    /// Firmware updates, when configured.
    package var firmware: Firmware?

    /// A status; what is not given is absent.
    package init(
        state: String, pid: Int32, version: String, startedAt: WallTime, updatedAt: WallTime, nextUpdateBy: WallTime? = nil,
        stale: String? = nil, configFile: String, configLoadedAt: WallTime, reloadError: String? = nil, reachability: String,
        clock: String? = nil, lastSync: Sync? = nil, lastDelivery: Delivery? = nil, lastSuccessfulDelivery: WallTime? = nil,
        queue: Queue, deadLetters: Int, rejectedSpoolLines: Int, stoppedCollectors: [String: String], firmware: Firmware? = nil
    ) {
        self.state = state
        self.pid = pid
        self.version = version
        self.startedAt = startedAt
        self.updatedAt = updatedAt
        self.nextUpdateBy = nextUpdateBy
        self.stale = stale
        self.configFile = configFile
        self.configLoadedAt = configLoadedAt
        self.reloadError = reloadError
        self.reachability = reachability
        self.clock = clock
        self.lastSync = lastSync
        self.lastDelivery = lastDelivery
        self.lastSuccessfulDelivery = lastSuccessfulDelivery
        self.queue = queue
        self.deadLetters = deadLetters
        self.rejectedSpoolLines = rejectedSpoolLines
        self.stoppedCollectors = stoppedCollectors
        self.firmware = firmware
    }

    /// The largest status file read (one is a few KiB; the bound keeps a wrong path from
    /// costing memory).
    package static let maximumFileBytes = 1 << 20

    /// The JSON the status file holds: one object, keys sorted, one member per line, times in
    /// RFC 3339. Written by hand rather than with `JSONEncoder`: the daemon writes it after
    /// every change, and the encoder's generic machinery and calendar-based date formatting
    /// would keep about 2 MiB of extra code resident in the daemon (measured with callgrind).
    package func encoded() -> [UInt8] {
        var members: [(String, StatusJSON)] = [
            ("configFile", .string(configFile)), ("configLoadedAt", .date(configLoadedAt)), ("deadLetters", .integer(Int64(deadLetters))),
            ("pid", .integer(Int64(pid))), ("reachability", .string(reachability)),
            ("rejectedSpoolLines", .integer(Int64(rejectedSpoolLines))), ("startedAt", .date(startedAt)), ("state", .string(state)),
            ("updatedAt", .date(updatedAt)), ("version", .string(version)),
        ]
        var collectors: [(String, StatusJSON)] = []
        for (name, reason) in stoppedCollectors { collectors.append((name, .string(reason))) }
        members.append(("stoppedCollectors", .object(collectors)))
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
        return Array(StatusJSON.object(members).text.utf8)
    }

    /// Reads a status document: the keys `encoded()` writes, each checked for its type; keys
    /// it does not know are passed over (a newer agent may add some), an optional key may be
    /// absent or `null`. Times are RFC 3339 (`WallTime(rfc3339:)`).
    /// - Parameter bytes: the document.
    /// - Throws: `StatusFields.Problem` naming the first key that is missing or of the wrong
    ///   type, or where the JSON goes wrong.
    package static func parse(_ bytes: [UInt8]) throws(StatusFields.Problem) -> AgentStatus {
        let root: StrictJSON
        do throws(StrictJSON.SyntaxError) {
            root = try StrictJSON.parse(bytes, rules: .responses)
        } catch {
            throw StatusFields.Problem(description: error.description)
        }
        guard case .object(let members) = root else { throw StatusFields.Problem(description: "the document is not a JSON object") }
        let object = StatusFields(members: members, path: "")
        let queueFields = try object.object("queue")
        let queue = Queue(
            records: try queueFields.int("records"), bytes: try queueFields.int64("bytes"),
            oldestAgeSeconds: try queueFields.optionalDouble("oldestAgeSeconds"), delivered: try queueFields.uint64("delivered"),
            dropped: try queueFields.uint64("dropped"), rejected: try queueFields.uint64("rejected"),
            discarded: try queueFields.uint64("discarded"), quarantined: try queueFields.uint64("quarantined"),
            headFailures: try queueFields.int("headFailures"), lastFailure: try queueFields.optionalString("lastFailure"))
        var collectors: [String: String] = [:]
        let collectorFields = try object.object("stoppedCollectors")
        for name in collectorFields.members.keys { collectors[name] = try collectorFields.string(name) }
        guard let pid = Int32(exactly: try object.int("pid")) else {
            throw StatusFields.Problem(description: "pid: not a process id")
        }
        var status = AgentStatus(
            state: try object.string("state"), pid: pid, version: try object.string("version"),
            startedAt: try object.date("startedAt"), updatedAt: try object.date("updatedAt"),
            nextUpdateBy: try object.optionalDate("nextUpdateBy"), stale: try object.optionalString("stale"),
            configFile: try object.string("configFile"), configLoadedAt: try object.date("configLoadedAt"),
            reloadError: try object.optionalString("reloadError"), reachability: try object.string("reachability"),
            clock: try object.optionalString("clock"), lastSuccessfulDelivery: try object.optionalDate("lastSuccessfulDelivery"),
            queue: queue, deadLetters: try object.int("deadLetters"), rejectedSpoolLines: try object.int("rejectedSpoolLines"),
            stoppedCollectors: collectors)
        if let sync = try object.optionalObject("lastSync") {
            status.lastSync = Sync(
                at: try sync.date("at"), collectedPoints: try sync.int("collectedPoints"), spooledLines: try sync.int("spooledLines"),
                rejectedLines: try sync.int("rejectedLines"), queuedBatches: try sync.int("queuedBatches"),
                error: try sync.optionalString("error"))
        }
        if let delivery = try object.optionalObject("lastDelivery") {
            status.lastDelivery = Delivery(
                at: try delivery.date("at"), result: try delivery.string("result"), status: try delivery.optionalInt("status"),
                reason: try delivery.optionalString("reason"))
        }
        if let firmware = try object.optionalObject("firmware") { status.firmware = try Firmware(firmware) }
        return status
    }

    /// Reads a status file (at most `maximumFileBytes`).
    /// - Parameter path: the file.
    /// - Throws: `AgentError` naming the file when it is missing, unreadable or not a status
    ///   document (with the key or the place that is wrong).
    package static func read(path: String) throws(AgentError) -> AgentStatus {
        guard let bytes = SystemFiles().readBytes(path, limit: maximumFileBytes, whole: true) else {
            let reason = SystemFiles().whyUnreadable(path, limit: maximumFileBytes, what: "a status file")
            throw AgentError(description: "status file \(path) \(reason) (is fire-agent run running with this config?)")
        }
        do throws(StatusFields.Problem) {
            return try parse(bytes)
        } catch {
            throw AgentError(description: "status file \(path) is not a fire-agent status document: \(error.description)")
        }
    }

    /// Writes `self` to `path` atomically: a temporary file beside it, then a rename. The
    /// directory is created (0755) when missing; the file is 0644 (it holds no secrets).
    /// - Parameter path: the status file.
    /// - Throws: `AgentError` naming the file.
    package func write(to path: String) throws(AgentError) {
        var bytes = encoded()
        bytes.append(UInt8(ascii: "\n"))
        makeDirectories(directoryPart(of: path), mode: 0o755)
        // Rewritten at every change and rebuilt at start: atomic is enough, no fsync on flash.
        if let failure = replaceFile(path, with: bytes, mode: 0o644, durability: .atomic) {
            throw AgentError(description: "status file \(failure.description)")
        }
    }

    /// Why this status is stale at `now`, if it is: a live daemon that has not rewritten it by
    /// `nextUpdateBy`. `fileSystem` says what the status file's file system is like (read-only,
    /// full), when that explains it. Sans-I/O.
    package func staleness(now: WallTime, alive: Bool, fileSystem: String?) -> String? {
        guard alive, let due = nextUpdateBy, now > due else { return nil }
        let why = fileSystem.map { "the daemon cannot write it: \($0)" } ?? "the daemon did not write it (stuck? see its log)"
        return
            "written \(Self.roundedSeconds(now.duration(since: updatedAt))) s ago, due again \(Self.roundedSeconds(now.duration(since: due))) s ago: \(why)"
    }

    /// Whether the process that wrote this still runs (signal 0 reaches it).
    package var daemonIsAlive: Bool {
        state != "stopped" && (kill(pid, 0) == 0 || errno == EPERM)
    }

    /// What keeps a file in `path`'s directory from being written, if anything visible:
    /// a read-only or full file system.
    package static func fileSystemProblem(of path: String) -> String? {
        let directory = directoryPart(of: path)
        var info = statvfs()
        guard statvfs(directory, &info) == 0 else { return nil }
        if info.f_flag & UInt(ST_RDONLY) != 0 { return "its file system (\(directory)) is read-only" }
        if info.f_bavail == 0 { return "its file system (\(directory)) is full" }
        if info.f_favail == 0 && info.f_files > 0 { return "its file system (\(directory)) has no free inodes" }
        return nil
    }

    /// The status for people (`fire-agent status`).
    /// - Parameters:
    ///   - alive: whether the daemon still runs.
    ///   - now: the wall clock, for "… s ago".
    package func describe(alive: Bool, now: WallTime) -> String {
        func when(_ time: WallTime) -> String {
            let seconds = Self.roundedSeconds(now.duration(since: time))
            return "\(time) (\(seconds < 0 ? "in the future" : "\(seconds) s ago"))"
        }
        let shownState = alive ? state : "not running (\(state == "stopped" ? "stopped" : "gone without stopping"))"
        var lines = ["fire-agent \(version): \(shownState), pid \(pid), started \(when(startedAt))"]
        if let stale { lines.append("STALE:         what follows is old: \(stale)") }
        var config = "config:        \(configFile), loaded \(when(configLoadedAt))"
        if let reloadError { config += "\n               last reload refused: \(reloadError)" }
        lines.append(config)
        lines.append("reachability:  \(reachability)")
        if let clock { lines.append("clock:         \(clock)") }
        if let sync = lastSync {
            var line =
                "last sync:     \(when(sync.at)): \(sync.queuedBatches) batches queued, \(sync.spooledLines) spool lines "
                + "(\(sync.rejectedLines) rejected)"
            if let error = sync.error { line += ", error: \(error)" }
            lines.append(line)
        } else {
            lines.append("last sync:     none yet")
        }
        if let delivery = lastDelivery {
            var line = "last delivery: \(when(delivery.at)): \(delivery.result)"
            if let code = delivery.status { line += " (HTTP \(code))" }
            if let reason = delivery.reason { line += ": \(reason)" }
            lines.append(line)
        }
        lines.append("last success:  \(lastSuccessfulDelivery.map(when) ?? "none since start")")
        var queueLine = "queue:         \(queue.records) batches, \(queue.bytes) bytes"
        if let age = queue.oldestAgeSeconds { queueLine += ", oldest \(Int(age)) s" }
        queueLine +=
            "; delivered \(queue.delivered), dropped \(queue.dropped), rejected \(queue.rejected), discarded \(queue.discarded), "
            + "quarantined \(queue.quarantined)"
        if let failure = queue.lastFailure { queueLine += "\n               failing (\(queue.headFailures) attempts): \(failure)" }
        lines.append(queueLine)
        lines.append("dead letters:  \(deadLetters)")
        lines.append("spool:         \(rejectedSpoolLines) lines rejected since start")
        for (name, reason) in stoppedCollectors.sorted(by: { $0.key < $1.key }) {
            lines.append("collector off: \(name): \(reason)")
        }
        if let firmware {
            var line = "firmware:      \(firmware.phase)"
            if let version = firmware.version, !version.isEmpty {
                line += " \(version)" + (firmware.fromVersion.map { " (from \($0))" } ?? "")
            }
            if firmware.phase == "downloading", firmware.size > 0 {
                line += ": \(firmware.downloadedBytes) of \(firmware.size) bytes (\(firmware.downloadedBytes * 100 / firmware.size) %)"
            }
            if let since = firmware.since { line += ", since \(when(since))" }
            if let reason = firmware.reason { line += "\n               \(reason)" }
            if let waiting = firmware.waiting, firmware.reason != "waiting: \(waiting)" { line += "\n               waiting: \(waiting)" }
            if let check = firmware.lastCheck {
                line += "\n               last check \(when(check)): \(firmware.lastCheckResult ?? "")"
            }
            if let floor = firmware.highestAccepted { line += "\n               highest version accepted: \(floor)" }
            lines.append(line)
        }
        lines.append("written:       \(when(updatedAt))")
        var text = ""
        for (index, line) in lines.enumerated() { text += (index == 0 ? "" : "\n") + line }
        return text
    }

    /// `duration` in whole seconds, rounded half away from zero (as `Double.rounded()`).
    static func roundedSeconds(_ duration: Duration) -> Int64 {
        let milliseconds = duration.wholeMilliseconds
        let (seconds, remainder) = milliseconds.quotientAndRemainder(dividingBy: 1000)
        if remainder >= 500 { return seconds + 1 }
        if remainder <= -500 { return seconds - 1 }
        return seconds
    }

}

/// One object of a status document, read key by key with the key's path in every problem.
package struct StatusFields {
    /// What is wrong with a status document: "queue.records: expected an integer, found a string".
    package struct Problem: Error, Sendable, CustomStringConvertible {
        /// The key path and what is wrong there.
        package let description: String
    }

    let members: [String: StrictJSON]
    let path: String

    private func name(_ key: String) -> String { path.isEmpty ? key : path + "." + key }

    private func kind(_ value: StrictJSON) -> String {
        switch value {
        case .string: return "a string"
        case .integer, .unsigned: return "an integer"
        case .number: return "a number"
        case .bool: return "a boolean"
        case .null: return "null"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    private func required(_ key: String) throws(Problem) -> StrictJSON {
        guard let value = members[key], value != .null else { throw Problem(description: "\(name(key)): missing") }
        return value
    }

    private func mismatch(_ key: String, _ expected: String, _ value: StrictJSON) -> Problem {
        Problem(description: "\(name(key)): expected \(expected), found \(kind(value))")
    }

    func string(_ key: String) throws(Problem) -> String {
        let value = try required(key)
        guard case .string(let text) = value else { throw mismatch(key, "a string", value) }
        return text
    }

    func optionalString(_ key: String) throws(Problem) -> String? {
        members[key] == nil || members[key] == .null ? nil : try string(key)
    }

    func int64(_ key: String) throws(Problem) -> Int64 {
        let value = try required(key)
        guard case .integer(let number) = value else { throw mismatch(key, "an integer", value) }
        return number
    }

    func int(_ key: String) throws(Problem) -> Int {
        let number = try int64(key)
        guard let value = Int(exactly: number) else { throw Problem(description: "\(name(key)): \(number) is too large") }
        return value
    }

    func optionalInt(_ key: String) throws(Problem) -> Int? {
        members[key] == nil || members[key] == .null ? nil : try int(key)
    }

    func uint64(_ key: String) throws(Problem) -> UInt64 {
        let value = try required(key)
        switch value {
        case .integer(let number) where number >= 0: return UInt64(number)
        case .unsigned(let number): return number
        default: throw mismatch(key, "a whole number from 0", value)
        }
    }

    func optionalDouble(_ key: String) throws(Problem) -> Double? {
        guard let value = members[key], value != .null else { return nil }
        switch value {
        case .number(let number): return number
        case .integer(let number): return Double(number)
        case .unsigned(let number): return Double(number)
        default: throw mismatch(key, "a number", value)
        }
    }

    func date(_ key: String) throws(Problem) -> WallTime {
        let text = try string(key)
        guard let time = WallTime(rfc3339: text) else {
            throw Problem(description: "\(name(key)): \(text.jsonQuoted) is not an RFC 3339 time")
        }
        return time
    }

    func optionalDate(_ key: String) throws(Problem) -> WallTime? {
        members[key] == nil || members[key] == .null ? nil : try date(key)
    }

    func object(_ key: String) throws(Problem) -> StatusFields {
        let value = try required(key)
        guard case .object(let fields) = value else { throw mismatch(key, "an object", value) }
        return StatusFields(members: fields, path: name(key))
    }

    func optionalObject(_ key: String) throws(Problem) -> StatusFields? {
        members[key] == nil || members[key] == .null ? nil : try object(key)
    }
}

/// The few JSON shapes the daemon's documents use (status file, firmware state, reports),
/// written with sorted keys and without `JSONEncoder`.
package enum StatusJSON: Sendable {
    case string(String)
    case integer(Int64)
    case unsigned(UInt64)
    case number(Double)
    case bool(Bool)
    case null
    case date(WallTime)
    case array([StatusJSON])
    case object([(String, StatusJSON)])

    /// The document as text, one member per line.
    package var text: String {
        var out = ""
        write(to: &out, indent: "")
        return out
    }

    /// The document on one line (a report body, a log line).
    package var compactText: String {
        var out = ""
        write(to: &out, indent: nil)
        return out
    }

    /// Writes the value; `indent` nil writes it on one line.
    package func write(to out: inout String, indent: String?) {
        switch self {
        case .string(let text): out += text.jsonQuoted
        case .integer(let value): out += String(value)
        case .unsigned(let value): out += String(value)
        case .number(let value): out += value.isFinite ? String(value) : "null"
        case .bool(let value): out += value ? "true" : "false"
        case .null: out += "null"
        case .date(let time): out += time.description.jsonQuoted
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
            let sorted = members.sorted(by: { $0.0 < $1.0 })
            guard let indent else {
                out += "{"
                for (index, (key, value)) in sorted.enumerated() {
                    out += (index == 0 ? "" : ",") + key.jsonQuoted + ":"
                    value.write(to: &out, indent: nil)
                }
                out += "}"
                return
            }
            let inner = indent + "  "
            out += "{\n"
            for (index, (key, value)) in sorted.enumerated() {
                out += inner + key.jsonQuoted + " : "
                value.write(to: &out, indent: inner)
                out += index == members.count - 1 ? "\n" : ",\n"
            }
            out += indent + "}"
        }
    }
}

/// Creates `path` and the directories above it that are missing (`mkdir -p`), with `mode`;
/// an error shows when the file under it is opened.
package func makeDirectories(_ path: String, mode: mode_t) {
    var prefix = ""
    for part in path.split(separator: "/", omittingEmptySubsequences: false) {
        prefix += prefix.isEmpty && part.isEmpty ? "/" : (prefix.isEmpty || prefix == "/" ? "" : "/") + part
        if part.isEmpty || part == "." { continue }
        _ = mkdir(prefix, mode)
    }
}
