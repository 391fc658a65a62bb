/// The verdict on one line of a spool file. Sans-I/O.
package enum SpoolLineVerdict: Sendable, Equatable {
    /// Blank or a `#` comment: nothing to send, nothing to report.
    case skip
    /// A line InfluxDB will accept; `stamped` when it had no time and was given `timestamp`.
    case point(String, stamped: Bool)
    /// A line refused, with its text (at most a prefix of a long one) and the reason.
    case refused(text: String, reason: String)

    /// The board's `device` tag, set on every spool point whatever the line said.
    package struct DeviceTag: Sendable, Equatable {
        /// The board's device ID.
        package var id: String
        /// A tag key for the `device` value the line carried itself; nil drops it.
        package var keptAs: String?

        /// Creates the tag.
        package init(id: String, keptAs: String? = nil) {
            self.id = id
            self.keptAs = keptAs
        }
    }

    /// Judges one line the splitter handed out.
    /// - Parameters:
    ///   - line: the line.
    ///   - timestamp: added to a valid line that has no time (in the config's precision), so a
    ///     batch sent twice is the same points; nil leaves such lines as they are.
    ///   - device: set as the point's `device` tag (a writer cannot speak for another board);
    ///     nil leaves the tags as they are.
    package static func judge(_ line: SpoolLineSplitter.Line, timestamp: Int64?, device: DeviceTag? = nil) -> SpoolLineVerdict {
        switch line.content {
        case .tooLong(let prefix, let length):
            return .refused(text: String(decoding: prefix, as: UTF8.self), reason: "longer than a batch (\(length) bytes)")
        case .torn(let bytes):
            if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { return .skip }
            return .refused(
                text: String(decoding: bytes.prefix(SpoolLineSplitter.keptPrefixBytes), as: UTF8.self),
                reason: "the last line has no newline (a torn or unfinished write): not sent")
        case .bytes(let bytes):
            guard let text = String(validating: bytes, as: UTF8.self) else {
                return .refused(text: String(decoding: bytes, as: UTF8.self), reason: "not valid UTF-8")
            }
            let trimmed = text.trimmed()
            if trimmed.isEmpty || trimmed.hasPrefix("#") { return .skip }
            if bytes.contains(0) { return .refused(text: text, reason: "contains a NUL byte") }
            let (problem, hasTimestamp) = LineProtocol.check(Substring(text))
            if let problem { return .refused(text: text, reason: problem) }
            let tagged = device.map { LineProtocol.settingDeviceTag(text, to: $0.id, keptAs: $0.keptAs) } ?? text
            if !hasTimestamp, let timestamp { return .point(tagged + " " + String(timestamp), stamped: true) }
            return .point(tagged, stamped: false)
        }
    }
}

/// What a whole spool file holds once checked: the lines InfluxDB will accept, and the ones it
/// would refuse, with their line numbers and reasons. Sans-I/O, for a file's text in memory (the
/// agent itself reads spool files as a stream: `SpoolDirectory`).
package struct SpoolFile: Sendable, Equatable {
    /// A refused line.
    package struct Rejected: Sendable, Equatable {
        /// 1-based line number in the file.
        package var number: Int
        /// The line as it was (the first bytes of a long one).
        package var text: String
        /// Why (column and reason).
        package var reason: String
    }

    /// Valid lines, in order, without newlines.
    package var lines: [String]
    /// Refused lines.
    package var rejected: [Rejected]

    /// Checks `text`: blank lines and `#` comments are skipped; a last line without a newline
    /// is refused (a writer that renames its file in ends every line); NUL bytes, invalid UTF-8
    /// or an invalid line are refused.
    /// - Parameters:
    ///   - text: the file's contents.
    ///   - maxLineBytes: longer lines are refused (they fit no batch).
    ///   - timestamp: added to lines that have none (in the config's precision), so a batch
    ///     sent twice is the same points; nil leaves such lines as they are.
    package init(text: String, maxLineBytes: Int, timestamp: Int64? = nil) {
        var lines: [String] = []
        var rejected: [Rejected] = []
        func take(_ line: SpoolLineSplitter.Line) {
            switch SpoolLineVerdict.judge(line, timestamp: timestamp) {
            case .skip: break
            case .point(let point, _): lines.append(point)
            case .refused(let text, let reason): rejected.append(Rejected(number: line.number, text: text, reason: reason))
            }
        }
        var splitter = SpoolLineSplitter(maxLineBytes: maxLineBytes)
        _ = Array(text.utf8).withUnsafeBytes { buffer in
            splitter.feed(buffer) { line in
                take(line)
                return true
            }
        }
        if let last = splitter.finish() { take(last) }
        self.lines = lines
        self.rejected = rejected
    }
}
