import Logging
import Synchronization
import TinyFire

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

/// fire-agent's log output on standard error, one line per entry:
///
/// - `text` on a terminal or in a file: `2026-11-24T01:02:03Z info message key=value`;
/// - `text` under systemd (standard error is the journal, `JOURNAL_STREAM` names it): no time
///   of its own — journald stamps each line — and a `<N>` priority prefix (sd-daemon(3)), so
///   `journalctl -p warning` works;
/// - `json`: one object per line, `{"level":…,"message":…,"metadata":{…},"time":…}`, the time
///   left out under systemd for the same reason.
///
/// A line is written with one `write(2)` under a lock, so lines from threads never interleave.
public struct AgentLogHandler: LogHandler {
    /// The output format.
    public enum Format: String, Sendable {
        case text
        case json
    }

    /// The line layout.
    public let format: Format
    /// Whether standard error is systemd's journal.
    public let journal: Bool
    /// The lowest level written.
    public var logLevel: Logger.Level
    /// Metadata added to every entry.
    public var metadata: Logger.Metadata = [:]
    /// Metadata gathered at each entry (task-local values).
    public var metadataProvider: Logger.MetadataProvider?
    private let output: Int32

    private static let writeLock = Mutex(())

    /// A handler.
    /// - Parameters:
    ///   - format: text or json.
    ///   - level: the lowest level written.
    ///   - journal: whether standard error is the journal; default from `JOURNAL_STREAM`.
    ///   - output: the descriptor written to; default standard error.
    public init(format: Format, level: Logger.Level, journal: Bool = AgentLogHandler.stderrIsJournal(), output: Int32 = 2) {
        self.format = format
        self.journal = journal
        logLevel = level
        self.output = output
    }

    /// One metadata value.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes one entry as one line.
    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        let line = render(level: event.level, message: event.message.description, metadata: merged, time: Date())
        let bytes = Array(line.utf8)
        Self.writeLock.withLock { _ in _ = writeAll(output, bytes) }
    }

    /// One entry as its line, newline included (TinyFireCore's `LogLineRenderer`: the same
    /// lines as the Embedded agent writes; a list or map value is JSON in text lines too).
    func render(level: Logger.Level, message: String, metadata: Logger.Metadata, time: Date) -> String {
        LogLineRenderer(format: format == .text ? .text : .json, journal: journal).render(
            level: Self.coreLevel(level), message: message, metadata: metadata.mapValues(Self.coreValue),
            epochSeconds: Int64(time.timeIntervalSince1970.rounded(.down)))
    }

    /// Whether standard error is the journal: `JOURNAL_STREAM` is `device:inode` of the stream
    /// systemd connected, and standard error must still be that stream (not redirected).
    public static func stderrIsJournal(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        guard let value = environment["JOURNAL_STREAM"] else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(2, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// `date` in RFC 3339, UTC, whole seconds (`2026-11-24T01:02:03Z`).
    /// - Parameter date: the time.
    /// - Returns: the text.
    public static func timestamp(_ date: Date) -> String {
        rfc3339(epochSeconds: Int64(date.timeIntervalSince1970.rounded(.down)))
    }

    private static func coreLevel(_ level: Logger.Level) -> LogLevel {
        switch level {
        case .trace: return .trace
        case .debug: return .debug
        case .info: return .info
        case .notice: return .notice
        case .warning: return .warning
        case .error: return .error
        case .critical: return .critical
        }
    }

    private static func coreValue(_ value: Logger.Metadata.Value) -> LogValue {
        switch value {
        case .string(let text): return .string(text)
        case .stringConvertible(let convertible): return .string(convertible.description)
        case .array(let values): return .array(values.map(coreValue))
        case .dictionary(let pairs): return .dictionary(pairs.mapValues(coreValue))
        }
    }
}
