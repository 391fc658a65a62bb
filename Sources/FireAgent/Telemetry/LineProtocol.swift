/// One InfluxDB point: a measurement, tags, fields and the time it was taken.
package struct Point: Sendable, Equatable {
    /// A field's value.
    package enum Value: Sendable, Equatable {
        /// A float (`1.5`).
        case float(Double)
        /// An integer (`12i`).
        case integer(Int64)
        /// A string (`"text"`).
        case string(String)
        /// A boolean.
        case bool(Bool)
    }

    /// The measurement (InfluxDB's table).
    package var measurement: String
    /// Tags, sorted by key when encoded (InfluxDB's preferred order).
    package var tags: [String: String]
    /// Fields, encoded in key order.
    package var fields: [String: Value]
    /// Nanoseconds since the Unix epoch, fixed when the point was collected, so a point sent
    /// twice is the same point (InfluxDB keeps one).
    package var timestamp: Int64

    /// Creates a point.
    /// - Parameters:
    ///   - measurement: the measurement.
    ///   - tags: tags.
    ///   - fields: at least one field.
    ///   - timestamp: nanoseconds since the epoch.
    package init(measurement: String, tags: [String: String] = [:], fields: [String: Value], timestamp: Int64) {
        self.measurement = measurement
        self.tags = tags
        self.fields = fields
        self.timestamp = timestamp
    }
}

/// InfluxDB line protocol: writing points, and checking lines other programs wrote.
package enum LineProtocol {
    /// The line for `point`, timestamp in `precision` (truncated), without a newline. Fields
    /// that are not finite numbers are left out (InfluxDB refuses NaN and infinity); nil when
    /// no field is left.
    package static func encode(_ point: Point, precision: TimestampPrecision) -> String? {
        var line = escape(point.measurement, measurement: true)
        for key in point.tags.keys.sorted() {
            guard let value = point.tags[key], !key.isEmpty, !value.isEmpty else { continue }
            line += "," + escape(key) + "=" + escape(value)
        }
        var first = true
        for key in point.fields.keys.sorted() {
            guard let value = point.fields[key] else { continue }
            let text: String
            switch value {
            case .float(let number):
                guard number.isFinite else { continue }
                text = number.rounded() == number && abs(number) < 1e15 ? String(Int64(number)) + ".0" : String(number)
            case .integer(let number): text = String(number) + "i"
            case .bool(let flag): text = flag ? "true" : "false"
            case .string(let string): text = quotedFieldString(string)
            }
            line += (first ? " " : ",") + escape(key) + "=" + text
            first = false
        }
        guard !first else { return nil }
        return line + " " + String(scale(point.timestamp, to: precision))
    }

    /// Nanoseconds in `precision`'s unit.
    package static func scale(_ nanoseconds: Int64, to precision: TimestampPrecision) -> Int64 {
        switch precision {
        case .ns: return nanoseconds
        case .us: return nanoseconds / 1000
        case .ms: return nanoseconds / 1_000_000
        case .s: return nanoseconds / 1_000_000_000
        }
    }

    /// A string field value: in double quotes, with `\` and `"` escaped by a backslash.
    package static func quotedFieldString(_ text: String) -> String {
        var out = "\""
        for character in text {
            if character == "\\" || character == "\"" { out.append("\\") }
            out.append(character)
        }
        out.append("\"")
        return out
    }

    package static func escape(_ text: String, measurement: Bool = false) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case ",", " ": out += "\\" + String(character)
            case "=" where !measurement: out += "\\="
            case "\n", "\r": out += " "  // a line break would end the line
            default: out.append(character)
            }
        }
        return out
    }

    /// Why a tag cannot be used, or nil (config labels become tags on every point).
    package static func tagProblem(key: String, value: String) -> String? {
        if key.isEmpty { return "a tag name must not be empty" }
        if value.isEmpty { return "a tag value must not be empty (InfluxDB drops empty tags)" }
        if key.hasPrefix("_") { return "tag names starting with '_' are reserved by InfluxDB" }
        if (key + value).contains(where: { $0 == "\n" || $0 == "\r" }) { return "a tag must not contain a line break" }
        return nil
    }

    /// Whether `key` is a plain tag key that needs no escaping: ASCII letters, digits, `_`,
    /// `-` and `.`, not starting with `_` (InfluxDB's reserved prefix).
    package static func isPlainTagKey(_ key: String) -> Bool {
        guard let first = key.utf8.first, first != UInt8(ascii: "_") else { return false }
        return key.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."):
                true
            default: false
            }
        }
    }

    /// `line` (valid: `check` found no problem) with its `device` tag set to `device`, whatever
    /// the line said: a `device` tag it carried is dropped, or kept under `keptAs`. The tags
    /// come out sorted by key (InfluxDB's preferred order); the fields and time are untouched.
    /// - Parameters:
    ///   - line: the line, without a newline.
    ///   - device: the board's device ID (escaped here).
    ///   - keptAs: a plain tag key for the line's own `device` value, or nil to drop it.
    package static func settingDeviceTag(_ line: String, to device: String, keptAs: String?) -> String {
        let bytes = Array(line.utf8)
        // The series key: up to the first unescaped space.
        var end = 0
        while end < bytes.count, bytes[end] != UInt8(ascii: " ") {
            if bytes[end] == UInt8(ascii: "\\") { end += 1 }
            end += 1
        }
        end = min(end, bytes.count)
        // Its parts, split at unescaped commas: the measurement, then key=value tags.
        var parts: [ArraySlice<UInt8>] = []
        var start = 0
        var index = 0
        while index < end {
            if bytes[index] == UInt8(ascii: "\\") {
                index += 2
                continue
            }
            if bytes[index] == UInt8(ascii: ",") {
                parts.append(bytes[start..<index])
                start = index + 1
            }
            index += 1
        }
        parts.append(bytes[start..<end])
        var tags: [(key: [UInt8], text: [UInt8])] = []
        var carried: ArraySlice<UInt8>?
        for tag in parts.dropFirst() {
            var equals = tag.startIndex
            while equals < tag.endIndex, tag[equals] != UInt8(ascii: "=") {
                if tag[equals] == UInt8(ascii: "\\") { equals += 1 }
                equals += 1
            }
            let key = Array(tag[tag.startIndex..<min(equals, tag.endIndex)])
            if key == Array("device".utf8) {
                carried = equals < tag.endIndex ? tag[(equals + 1)...] : nil
            } else {
                tags.append((key, Array(tag)))
            }
        }
        // The line's own device, kept under `keptAs`, replaces a tag of that name it had.
        if let keptAs, let carried {
            let key = Array(keptAs.utf8)
            tags.removeAll { $0.key == key }
            tags.append((key, key + [UInt8(ascii: "=")] + carried))
        }
        tags.append((Array("device".utf8), Array(("device=" + escape(device)).utf8)))
        tags.sort { $0.key.lexicographicallyPrecedes($1.key) }
        var out = Array(parts[0])
        for tag in tags {
            out.append(UInt8(ascii: ","))
            out.append(contentsOf: tag.text)
        }
        out.append(contentsOf: bytes[end...])
        return String(decoding: out, as: UTF8.self)
    }

    /// Checks one line of a spool file as InfluxDB would parse it: a measurement, optional
    /// tags, at least one field with a valid value, an optional integer timestamp.
    /// - Returns: nil when the line is valid; otherwise why, with the column.
    package static func problem(in line: Substring) -> String? {
        check(line).problem
    }

    /// `problem(in:)`, and whether the line ends with a timestamp.
    package static func check(_ line: Substring) -> (problem: String?, hasTimestamp: Bool) {
        var hasTimestamp = false
        let problem = check(line, hasTimestamp: &hasTimestamp)
        return (problem, hasTimestamp)
    }

    private static func check(_ line: Substring, hasTimestamp: inout Bool) -> String? {
        let bytes = Array(line.utf8)
        var index = 0
        func fail(_ reason: String) -> String { "column \(index + 1): \(reason)" }
        // Measurement: up to an unescaped ',' or ' '.
        let measurementStart = index
        while index < bytes.count, bytes[index] != UInt8(ascii: ","), bytes[index] != UInt8(ascii: " ") {
            if bytes[index] == UInt8(ascii: "\\") { index += 1 }
            index += 1
        }
        guard index > measurementStart else { return fail("missing measurement") }
        // Tags.
        while index < bytes.count, bytes[index] == UInt8(ascii: ",") {
            index += 1
            guard let keyEnd = scanKey(bytes, from: index), keyEnd > index else { return fail("a tag needs key=value") }
            index = keyEnd + 1
            let valueStart = index
            while index < bytes.count, bytes[index] != UInt8(ascii: ","), bytes[index] != UInt8(ascii: " ") {
                if bytes[index] == UInt8(ascii: "=") { return fail("unescaped '=' in a tag value") }
                if bytes[index] == UInt8(ascii: "\\") { index += 1 }
                index += 1
            }
            guard index > valueStart else { return fail("empty tag value") }
        }
        guard index < bytes.count, bytes[index] == UInt8(ascii: " ") else { return fail("missing fields (a space, then key=value)") }
        index += 1
        // Fields.
        var fields = 0
        while true {
            guard let keyEnd = scanKey(bytes, from: index), keyEnd > index else { return fail("a field needs key=value") }
            index = keyEnd + 1
            guard index < bytes.count else { return fail("missing field value") }
            if bytes[index] == UInt8(ascii: "\"") {
                index += 1
                var closed = false
                while index < bytes.count {
                    if bytes[index] == UInt8(ascii: "\\") {
                        index += 2
                        continue
                    }
                    if bytes[index] == UInt8(ascii: "\"") {
                        closed = true
                        index += 1
                        break
                    }
                    index += 1
                }
                guard closed else { return fail("string field never closed") }
            } else {
                let start = index
                while index < bytes.count, bytes[index] != UInt8(ascii: ","), bytes[index] != UInt8(ascii: " ") { index += 1 }
                let word = String(decoding: bytes[start..<index], as: UTF8.self)
                guard isFieldValue(word) else {
                    index = start
                    return fail("'\(word)' is not a field value (number, 12i, true/false or \"string\")")
                }
            }
            fields += 1
            guard index < bytes.count, bytes[index] == UInt8(ascii: ",") else { break }
            index += 1
        }
        guard fields > 0 else { return fail("no fields") }
        // Timestamp.
        if index < bytes.count {
            guard bytes[index] == UInt8(ascii: " ") else { return fail("expected a space before the timestamp") }
            index += 1
            let start = index
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index += 1 }
            guard index > start, index == bytes.count, Int64(String(decoding: bytes[start..<index], as: UTF8.self)) != nil else {
                index = start
                return fail("the timestamp must be an integer and the last thing on the line")
            }
            hasTimestamp = true
        }
        return nil
    }

    /// The index of the '=' that ends a key starting at `start` (escapes respected).
    private static func scanKey(_ bytes: [UInt8], from start: Int) -> Int? {
        var index = start
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\\"): index += 2
            case UInt8(ascii: "="): return index
            case UInt8(ascii: ","), UInt8(ascii: " "): return nil
            default: index += 1
            }
        }
        return nil
    }

    private static func isFieldValue(_ word: String) -> Bool {
        if ["t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE"].contains(word) { return true }
        if word.hasSuffix("i") || word.hasSuffix("u") { return Int64(word.dropLast()) != nil || UInt64(word.dropLast()) != nil }
        guard let number = Double(word) else { return false }
        return number.isFinite && !word.lowercased().contains("n") && !word.hasPrefix("+")
    }
}
