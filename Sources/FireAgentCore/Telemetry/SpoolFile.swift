/// What a spool file holds once checked: the lines InfluxDB will accept, and the ones it would
/// refuse, with their line numbers and reasons. Sans-I/O: fed the file's text.
public struct SpoolFile: Sendable, Equatable {
    /// A refused line.
    public struct Rejected: Sendable, Equatable {
        /// 1-based line number in the file.
        public var number: Int
        /// The line as it was.
        public var text: String
        /// Why (column and reason).
        public var reason: String
    }

    /// Valid lines, in order, without newlines.
    public var lines: [String]
    /// Refused lines.
    public var rejected: [Rejected]

    /// Checks `text`: blank lines and `#` comments are skipped; a last line without a newline
    /// is taken as complete (the writer renamed the file in, so it is whole); NUL bytes or an
    /// invalid line are refused.
    /// - Parameters:
    ///   - text: the file's contents.
    ///   - maxLineBytes: longer lines are refused (they fit no batch).
    ///   - timestamp: added to lines that have none (in the config's precision), so a batch
    ///     sent twice is the same points; nil leaves such lines as they are.
    public init(text: String, maxLineBytes: Int, timestamp: Int64? = nil) {
        lines = []
        rejected = []
        var number = 0
        // Split on the byte: for String, "\r\n" is one Character and would not split on "\n".
        for raw in text.utf8.split(separator: 0x0A, omittingEmptySubsequences: false) {
            number += 1
            var bytes = Substring(raw)
            if bytes.utf8.last == 0x0D { bytes = Substring(bytes.utf8.dropLast()) }
            let line = bytes
            let trimmed = line.trimmed()
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            if line.utf8.count + 1 > maxLineBytes {
                rejected.append(
                    Rejected(number: number, text: String(line.prefix(200)), reason: "longer than a batch (\(maxLineBytes) bytes)"))
            } else if line.contains("\0") {
                rejected.append(Rejected(number: number, text: String(line), reason: "contains a NUL byte"))
            } else {
                let (problem, hasTimestamp) = LineProtocol.check(line)
                if let problem {
                    rejected.append(Rejected(number: number, text: String(line), reason: problem))
                } else if !hasTimestamp, let timestamp {
                    lines.append(String(line) + " " + String(timestamp))
                } else {
                    lines.append(String(line))
                }
            }
        }
    }
}
