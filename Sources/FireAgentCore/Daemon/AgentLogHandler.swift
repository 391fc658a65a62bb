import Logging
import Synchronization

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

    /// One entry as its line, newline included.
    func render(level: Logger.Level, message: String, metadata: Logger.Metadata, time: Date) -> String {
        switch format {
        case .text:
            var line = journal ? "<\(Self.priority(level))>" : "\(Self.timestamp(time)) \(level.rawValue) "
            line += message.replacingNewlines()
            for key in metadata.keys.sorted() {
                line += " \(key)=\(Self.textValue(metadata[key]!))"
            }
            return line + "\n"
        case .json:
            var fields: [String] = []
            fields.append("\"level\":\(Self.jsonString(level.rawValue))")
            fields.append("\"message\":\(Self.jsonString(message))")
            if !metadata.isEmpty {
                let pairs = metadata.keys.sorted().map { "\(Self.jsonString($0)):\(Self.jsonValue(metadata[$0]!))" }
                fields.append("\"metadata\":{\(pairs.joined(separator: ","))}")
            }
            if !journal { fields.append("\"time\":\(Self.jsonString(Self.timestamp(time)))") }
            return "{\(fields.joined(separator: ","))}\n"
        }
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

    /// sd-daemon(3) priorities: 7 debug … 2 critical.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: return 7
        case .info: return 6
        case .notice: return 5
        case .warning: return 4
        case .error: return 3
        case .critical: return 2
        }
    }

    /// `date` in RFC 3339, UTC, whole seconds (`2026-11-24T01:02:03Z`).
    /// - Parameter date: the time.
    /// - Returns: the text.
    public static func timestamp(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }

    private static func textValue(_ value: Logger.Metadata.Value) -> String {
        let text = "\(value)".replacingNewlines()
        return text.contains(" ") || text.isEmpty || text.contains("\"") ? jsonString(text) : text
    }

    private static func jsonValue(_ value: Logger.Metadata.Value) -> String {
        switch value {
        case .string(let text): return jsonString(text)
        case .stringConvertible(let convertible): return jsonString(convertible.description)
        case .array(let values): return "[\(values.map(jsonValue).joined(separator: ","))]"
        case .dictionary(let pairs):
            return "{\(pairs.keys.sorted().map { "\(jsonString($0)):\(jsonValue(pairs[$0]!))" }.joined(separator: ","))}"
        }
    }

    /// `text` as a JSON string literal.
    static func jsonString(_ text: String) -> String { text.jsonQuoted }
}

extension String {
    /// Newlines as `\n`, so one entry stays one line.
    fileprivate func replacingNewlines() -> String {
        guard contains(where: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" }) else { return self }
        return split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" })
            .joined(separator: "\\n")
    }
}
