#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// fire-agent's log lines, rendered without Foundation or swift-log so that the Embedded agent
// writes exactly what the host agent writes (FireAgentCore's AgentLogHandler renders through
// this). Three layouts:
//
// - text on a terminal or in a file: `2026-11-24T01:02:03Z info message key=value`;
// - text under systemd (standard error is the journal): no time of its own — journald stamps
//   each line — and a `<N>` priority prefix (sd-daemon(3)), so `journalctl -p warning` works;
// - json: one object per line, `{"level":…,"message":…,"metadata":{…},"time":…}`, the time
//   left out under systemd for the same reason.

/// A log entry's severity, named as swift-log and syslog name them, lowest first (fire-agent's
/// log levels; the core's own lines go to a `LogSink` at one of them).
public enum LogLevel: String, Sendable, CaseIterable, Comparable {
    case trace, debug, info, notice, warning, error, critical

    /// Lower is less severe.
    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool {
        lhs.severity < rhs.severity
    }

    private var severity: Int {
        switch self {
        case .trace: return 0
        case .debug: return 1
        case .info: return 2
        case .notice: return 3
        case .warning: return 4
        case .error: return 5
        case .critical: return 6
        }
    }

    /// sd-daemon(3) priorities: 7 debug … 2 critical.
    package var journalPriority: Int {
        switch self {
        case .trace, .debug: return 7
        case .info: return 6
        case .notice: return 5
        case .warning: return 4
        case .error: return 3
        case .critical: return 2
        }
    }
}

/// A log entry's metadata value: text, a list or a map (swift-log's shape, without its
/// existentials). A string literal or interpolation is a `.string`.
public indirect enum LogValue: Sendable, Equatable, ExpressibleByStringLiteral, ExpressibleByStringInterpolation {
    case string(String)
    case array([LogValue])
    case dictionary([String: LogValue])

    /// `.string(value)`.
    public init(stringLiteral value: String) {
        self = .string(value)
    }

    /// The value as JSON, keys sorted.
    package var json: String {
        switch self {
        case .string(let text): return text.jsonQuoted
        case .array(let values):
            var out = "["
            for (index, value) in values.enumerated() { out += (index == 0 ? "" : ",") + value.json }
            return out + "]"
        case .dictionary(let pairs):
            var out = "{"
            for (index, key) in pairs.keys.sorted().enumerated() {
                out += (index == 0 ? "" : ",") + key.jsonQuoted + ":" + (pairs[key] ?? .string("")).json
            }
            return out + "}"
        }
    }

    /// The value in a text line: a string as it is (quoted as JSON when it holds a space or a
    /// quote, or is empty); a list or a map as JSON.
    package var text: String {
        guard case .string(let raw) = self else { return json }
        let text = raw.replacingNewlines()
        let needsQuotes =
            text.isEmpty || text.utf8.contains(UInt8(ascii: " ")) || text.utf8.contains(UInt8(ascii: "\""))
        return needsQuotes ? text.jsonQuoted : text
    }
}

/// Renders log entries as lines in one of fire-agent's layouts.
package struct LogLineRenderer: Sendable {
    /// The layouts.
    package enum Format: String, Sendable {
        case text
        case json
    }

    package let format: Format
    /// Whether the lines go to systemd's journal (no time, a priority prefix in text).
    package let journal: Bool

    package init(format: Format, journal: Bool) {
        self.format = format
        self.journal = journal
    }

    /// One entry as its line, newline included. Metadata keys are sorted.
    /// - Parameters:
    ///   - level: the severity.
    ///   - message: the message (newlines become `\n` in text).
    ///   - metadata: the entry's key/value pairs.
    ///   - epochSeconds: the wall-clock time, whole seconds since 1970 (UTC).
    package func render(level: LogLevel, message: String, metadata: [String: LogValue], epochSeconds: Int64) -> String {
        let keys = metadata.keys.sorted()
        switch format {
        case .text:
            var line = journal ? "<\(level.journalPriority)>" : "\(rfc3339(epochSeconds: epochSeconds)) \(level.rawValue) "
            line += message.replacingNewlines()
            for key in keys {
                line += " \(key)=\((metadata[key] ?? .string("")).text)"
            }
            return line + "\n"
        case .json:
            var line = "{\"level\":\(level.rawValue.jsonQuoted),\"message\":\(message.jsonQuoted)"
            if !metadata.isEmpty { line += ",\"metadata\":\(LogValue.dictionary(metadata).json)" }
            if !journal { line += ",\"time\":\(rfc3339(epochSeconds: epochSeconds).jsonQuoted)" }
            return line + "}\n"
        }
    }
}

/// `epochSeconds` in RFC 3339, UTC, whole seconds (`2026-11-24T01:02:03Z`; years 0–999 with
/// their leading zeros, as RFC 3339 writes four digits). Computed with integer calendar
/// arithmetic, not `gmtime_r`: armv7's 32-bit `time_t` ends in 2038.
package func rfc3339(epochSeconds: Int64) -> String {
    let (days, second) = epochSeconds.floorDivided(by: 86_400)
    let date = CivilDate(daysSince1970: days)
    func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
    let digits = "\(date.year)"
    let year = date.year >= 0 ? String(repeating: "0", count: max(0, 4 - digits.count)) + digits : digits
    return "\(year)-\(two(date.month))-\(two(date.day))T\(two(second / 3600)):\(two(second / 60 % 60)):\(two(second % 60))Z"
}

extension String {
    /// The text as a JSON string literal: quotes, backslashes and control characters escaped.
    package var jsonQuoted: String {
        var out = "\""
        for scalar in unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// Newlines as `\n`, so one entry stays one line.
    package func replacingNewlines() -> String {
        guard contains(where: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" }) else { return self }
        var out = ""
        var first = true
        for part in split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" }) {
            if !first { out += "\\n" }
            out += part
            first = false
        }
        return out
    }
}

/// Where the core's own log lines go (the offline queue's recoveries and refusals): TinyFire
/// hands in its swift-log `Logger` wrapped, the agent its log renderer. Called from any thread.
package protocol LogSink: AnyObject, Sendable {
    /// One line at `level`.
    func log(_ level: LogLevel, _ message: String)
}

extension LogSink {
    package func error(_ message: String) { log(.error, message) }
    package func warning(_ message: String) { log(.warning, message) }
    package func notice(_ message: String) { log(.notice, message) }
    package func info(_ message: String) { log(.info, message) }
}
