import Logging
import TinyFire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// swift-log's side of fire-agent's log output: what TinyFire's own parts that take a swift-log
/// `Logger` (the offline queue, the firmware report queue) write goes to the agent's
/// `LogOutput`, in the same lines as the agent's own `Logger` writes:
///
/// - `text` on a terminal or in a file: `2026-11-24T01:02:03Z info message key=value`;
/// - `text` under systemd (standard error is the journal, `JOURNAL_STREAM` names it): no time
///   of its own — journald stamps each line — and a `<N>` priority prefix (sd-daemon(3)), so
///   `journalctl -p warning` works;
/// - `json`: one object per line, `{"level":…,"message":…,"metadata":{…},"time":…}`, the time
///   left out under systemd for the same reason.
public struct AgentLogHandler: LogHandler {
    /// Where the lines go.
    public let output: LogOutput
    /// The lowest level written.
    public var logLevel: Logging.Logger.Level
    /// Metadata added to every entry.
    public var metadata: Logging.Logger.Metadata = [:]
    /// Metadata gathered at each entry (task-local values).
    public var metadataProvider: Logging.Logger.MetadataProvider?

    /// A handler writing to `output` from `level` up.
    public init(output: LogOutput, level: Logging.Logger.Level) {
        self.output = output
        logLevel = level
    }

    /// One metadata value.
    public subscript(metadataKey key: String) -> Logging.Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes one entry as one line.
    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        output.write(level: Self.coreLevel(event.level), message: event.message.description, metadata: merged.mapValues(Self.coreValue))
    }

    /// Whether standard error is the journal: `JOURNAL_STREAM` is `device:inode` of the stream
    /// systemd connected, and standard error must still be that stream (not redirected).
    public static func stderrIsJournal(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        guard let value = environment["JOURNAL_STREAM"] else { return false }
        return LogOutput.stderrIsJournal(journalStream: value)
    }

    /// `date` in RFC 3339, UTC, whole seconds (`2026-11-24T01:02:03Z`).
    /// - Parameter date: the time.
    /// - Returns: the text.
    public static func timestamp(_ date: Date) -> String {
        rfc3339(epochSeconds: Int64(date.timeIntervalSince1970.rounded(.down)))
    }

    static func coreLevel(_ level: Logging.Logger.Level) -> LogLevel {
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

    private static func coreValue(_ value: Logging.Logger.Metadata.Value) -> LogValue {
        switch value {
        case .string(let text): return .string(text)
        case .stringConvertible(let convertible): return .string(convertible.description)
        case .array(let values): return .array(values.map(coreValue))
        case .dictionary(let pairs): return .dictionary(pairs.mapValues(coreValue))
        }
    }
}

extension FireAgentBase.Logger {
    /// The same output and level as a swift-log `Logger`, for TinyFire's parts that take one.
    public var swiftLogger: Logging.Logger {
        let output = output
        let level = logLevel.swiftLogLevel
        return Logging.Logger(label: label) { _ in AgentLogHandler(output: output, level: level) }
    }
}
