import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// fire-agent's logger, with swift-log's call shape (`logger.warning("…", metadata: ["file":
/// "\(name)"])`) and without swift-log, which Embedded Swift cannot build: lines go to a
/// `LogOutput` in one of the agent's layouts (text, journald, JSON).
package struct Logger: Sendable {
    /// Severities, lowest first.
    package typealias Level = LogLevel
    /// Metadata of one entry.
    package typealias Metadata = [String: LogValue]
    /// One metadata value.
    package typealias MetadataValue = LogValue

    /// The logger's name (not written: the agent's lines carry none).
    package let label: String
    /// The lowest level written.
    package var logLevel: Level
    /// Metadata added to every entry (an entry's own wins).
    package var metadata: Metadata = [:]
    /// Where the lines go.
    package let output: LogOutput

    /// A logger writing to `output` (default: text lines on standard error) from `level` up.
    package init(label: String, output: LogOutput = .standardError, level: Level = .info) {
        self.label = label
        self.output = output
        logLevel = level
    }

    /// One metadata value of every entry.
    package subscript(metadataKey key: String) -> MetadataValue? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes one entry when `level` is at least `logLevel`; the message and metadata are
    /// built only then.
    package func log(level: Level, _ message: @autoclosure () -> String, metadata extra: @autoclosure () -> Metadata? = nil) {
        guard level >= logLevel else { return }
        var merged = metadata
        if let extra = extra() {
            for (key, value) in extra { merged[key] = value }
        }
        output.write(level: level, message: message(), metadata: merged)
    }

    /// Writes an entry at `.trace` (see `log(level:_:metadata:)`).
    package func trace(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .trace, message(), metadata: metadata())
    }

    /// Writes an entry at `.debug` (see `log(level:_:metadata:)`).
    package func debug(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .debug, message(), metadata: metadata())
    }

    /// Writes an entry at `.info` (see `log(level:_:metadata:)`).
    package func info(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .info, message(), metadata: metadata())
    }

    /// Writes an entry at `.notice` (see `log(level:_:metadata:)`).
    package func notice(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .notice, message(), metadata: metadata())
    }

    /// Writes an entry at `.warning` (see `log(level:_:metadata:)`).
    package func warning(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .warning, message(), metadata: metadata())
    }

    /// Writes an entry at `.error` (see `log(level:_:metadata:)`).
    package func error(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .error, message(), metadata: metadata())
    }

    /// Writes an entry at `.critical` (see `log(level:_:metadata:)`).
    package func critical(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .critical, message(), metadata: metadata())
    }
}

/// Where the agent's log lines go: a descriptor (standard error by default), one layout. A
/// line is written with one `write(2)` under a lock, so lines from threads never interleave.
/// Also the core's `LogSink` (the offline queue store's lines), from `info` up.
package final class LogOutput: LogSink, @unchecked Sendable {
    /// The line layouts.
    package enum Format: String, Sendable {
        /// `2026-11-24T01:02:03Z info message key=value` (under systemd: `<6>message key=value`).
        case text
        /// One JSON object per line.
        case json
    }

    /// The layout.
    package let format: Format
    /// Whether the descriptor is systemd's journal (no time of its own, a `<N>` priority).
    package let journal: Bool
    private let fd: Int32
    private let renderer: LogLineRenderer
    private let lock = Locked(())
    /// Takes each entry instead of the descriptor (`init(entries:)`).
    private let entries: (@Sendable (LogLevel, String, [String: LogValue]) -> Void)?

    /// Text lines on standard error, journal or not as `JOURNAL_STREAM` says.
    package static let standardError = LogOutput(format: .text, journal: LogOutput.stderrIsJournal(journalStream: nil))

    /// An output.
    /// - Parameters:
    ///   - format: text or JSON lines.
    ///   - journal: whether `fd` is the journal.
    ///   - fd: the descriptor written to; default standard error.
    package init(format: Format, journal: Bool, fd: Int32 = 2) {
        self.format = format
        self.journal = journal
        self.fd = fd
        renderer = LogLineRenderer(format: format == .text ? .text : .json, journal: journal)
        entries = nil
    }

    /// An output that hands each entry to `entries` instead of writing a line (a test's
    /// capture, an application that embeds the agent's parts).
    package init(entries: @escaping @Sendable (LogLevel, String, [String: LogValue]) -> Void) {
        format = .text
        journal = false
        fd = -1
        renderer = LogLineRenderer(format: .text, journal: false)
        self.entries = entries
    }

    /// One entry as its line, newline included.
    package func render(level: LogLevel, message: String, metadata: [String: LogValue], epochSeconds: Int64) -> String {
        renderer.render(level: level, message: message, metadata: metadata, epochSeconds: epochSeconds)
    }

    /// Writes one entry, stamped with the wall clock.
    package func write(level: LogLevel, message: String, metadata: [String: LogValue]) {
        if let entries {
            entries(level, message, metadata)
            return
        }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let bytes = Array(render(level: level, message: message, metadata: metadata, epochSeconds: Int64(now.tv_sec)).utf8)
        lock.withLock { _ in _ = bytes.withUnsafeBytes { writeAll(fd, $0) } }
    }

    /// The core's lines (`LogSink`), from `info` up, without metadata.
    package func log(_ level: LogLevel, _ message: String) {
        guard level >= .info else { return }
        write(level: level, message: message, metadata: [:])
    }

    /// Whether standard error is the journal: `JOURNAL_STREAM` is `device:inode` of the stream
    /// systemd connected, and standard error must still be that stream (not redirected).
    /// - Parameter journalStream: the variable's value; nil reads it from the environment.
    package static func stderrIsJournal(journalStream: String?) -> Bool {
        guard let value = journalStream ?? getenv("JOURNAL_STREAM").map({ String(cString: $0) }) else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(2, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }
}
