/// A JSON document read exactly as RFC 8259 writes it, for what a signature covers: a firmware
/// manifest. Whatever two readers could read differently is refused, so the agent sees what
/// every other tool (Python's `json`, `jq`, the vendor's signing tool) sees in the same bytes:
///
/// - UTF-8 only, no byte order mark; no comments, trailing commas, single quotes, unquoted keys,
///   hexadecimal, `NaN`/`Infinity`, leading `+` or zeros (the JSON5 the config file accepts);
/// - a key given twice in one object is refused, compared after unescaping
///   (`"versio\u006e"` is `"version"`);
/// - an escaped lone surrogate (`"\ud800"`) is refused: it is no character, and readers differ;
/// - a number written without fraction or exponent is an `integer` (a whole number must be
///   written as one: `1e3` and `1.0` are not integers); one outside Int64 is refused.
///
/// Bounded: nesting at most `Rules.maximumDepth` levels; the caller bounds the document's length
/// (`FirmwareManifest.maximumBytes`, a session's `maximumBodySize`), and the value takes memory
/// in proportion to it. Foundation-free, so fuzz/run.sh compiles it alone.
///
/// `Rules.responses` reads what servers send to `responseJSON` as Foundation's
/// `JSONSerialization` does: a repeated key keeps its last value, a whole number outside Int64
/// is `unsigned` when `UInt64` holds it and a `number` beyond, a UTF-8 byte order mark is
/// skipped, nesting up to 512 levels.
package enum StrictJSON: Equatable, Sendable {
    case string(String)
    /// A number written as a whole number: `-?(0|[1-9][0-9]*)`.
    case integer(Int64)
    /// A whole number above `Int64.max` that `UInt64` holds, under rules that do not refuse
    /// large integers (a counter written as `UInt64` reads back exactly).
    case unsigned(UInt64)
    /// Any other number (with a fraction or an exponent, or whole but outside both).
    case number(Double)
    case bool(Bool)
    case null
    case array([StrictJSON])
    case object([String: StrictJSON])

    /// How strictly a document is read.
    package struct Rules: Sendable {
        /// The deepest nesting read.
        package var maximumDepth: Int
        /// Whether a key given twice in one object is refused (else the last one counts).
        package var refusesRepeatedKeys: Bool
        /// Whether a whole number outside Int64 is refused (else it is `unsigned` or a `number`).
        package var refusesLargeIntegers: Bool
        /// Whether a UTF-8 byte order mark is refused (else skipped).
        package var refusesByteOrderMark: Bool

        /// For what a signature covers (manifests): nothing two readers could read differently,
        /// 32 levels.
        package static let signed = Rules(
            maximumDepth: 32, refusesRepeatedKeys: true, refusesLargeIntegers: true, refusesByteOrderMark: true)
        /// For response bodies: what `JSONSerialization` reads, 512 levels.
        package static let responses = Rules(
            maximumDepth: 512, refusesRepeatedKeys: false, refusesLargeIntegers: false, refusesByteOrderMark: false)
    }

    /// The deepest nesting read under `Rules.signed`.
    package static let maximumDepth = Rules.signed.maximumDepth

    /// What is wrong and where: "line L, column C: reason".
    package struct SyntaxError: Error, Equatable, CustomStringConvertible {
        package let line: Int
        package let column: Int
        package let reason: String

        package init(line: Int, column: Int, reason: String) {
            self.line = line
            self.column = column
            self.reason = reason
        }

        package var description: String { "line \(line), column \(column): \(reason)" }
    }

    /// Reads one document.
    /// - Parameters:
    ///   - bytes: the document.
    ///   - rules: how strictly; default `.signed`.
    /// - Throws: `SyntaxError` at the first byte that is not RFC 8259 JSON (or, under `.signed`,
    ///   that is, but could be read two ways).
    package static func parse(_ bytes: [UInt8], rules: Rules = .signed) throws(SyntaxError) -> StrictJSON {
        var reader = Reader(bytes: bytes, rules: rules)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            if rules.refusesByteOrderMark { throw reader.failure("a byte order mark (JSON has none)") }
            reader.index = 3
            reader.lineStart = 3
        }
        reader.skipSpace()
        let value = try reader.value(depth: 0)
        reader.skipSpace()
        if reader.index < bytes.count { throw reader.failure("text after the document") }
        return value
    }

    private struct Reader {
        package let bytes: [UInt8]
        package let rules: Rules
        package var index = 0
        package var line = 1
        package var lineStart = 0

        package func failure(_ reason: String) -> SyntaxError {
            SyntaxError(line: line, column: index - lineStart + 1, reason: reason)
        }

        package var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        package mutating func skipSpace() {
            while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D {
                if byte == 0x0A {
                    line += 1
                    lineStart = index + 1
                }
                index += 1
            }
        }

        package mutating func value(depth: Int) throws(SyntaxError) -> StrictJSON {
            guard depth < rules.maximumDepth else { throw failure("nested more than \(rules.maximumDepth) levels") }
            guard let byte = current else { throw failure("a value is missing at the end") }
            switch byte {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"):
                try literal("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try literal("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try literal("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
            default: throw failure(Self.json5Hint(byte) ?? "unexpected \(Self.show(byte)) where a value should be")
            }
        }

        package mutating func literal(_ word: StaticString) throws(SyntaxError) {
            let expected = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
            guard bytes.count - index >= expected.count, bytes[index..<index + expected.count].elementsEqual(expected) else {
                throw failure("not a value (true, false, null, a number, a \"string\", [ or {)")
            }
            index += expected.count
        }

        package mutating func object(depth: Int) throws(SyntaxError) -> StrictJSON {
            let open = failure("'{' never closed")
            index += 1
            var fields: [String: StrictJSON] = [:]
            skipSpace()
            if current == UInt8(ascii: "}") {
                index += 1
                return .object(fields)
            }
            while true {
                guard let byte = current else { throw open }
                guard byte == UInt8(ascii: "\"") else {
                    throw failure(
                        byte == UInt8(ascii: "}") ? "a trailing comma" : Self.json5Hint(byte) ?? "expected a key in double quotes")
                }
                let keyFailure = failure("")
                let key = try string()
                guard fields[key] == nil || !rules.refusesRepeatedKeys else {
                    throw SyntaxError(
                        line: keyFailure.line, column: keyFailure.column, reason: "the key \"\(key)\" appears twice in this object")
                }
                skipSpace()
                guard current == UInt8(ascii: ":") else { throw failure("expected ':' after the key") }
                index += 1
                skipSpace()
                fields[key] = try value(depth: depth + 1)
                skipSpace()
                guard let after = current else { throw open }
                index += 1
                if after == UInt8(ascii: "}") { return .object(fields) }
                guard after == UInt8(ascii: ",") else {
                    index -= 1
                    throw failure(Self.json5Hint(after) ?? "expected ',' or '}'")
                }
                skipSpace()
            }
        }

        package mutating func array(depth: Int) throws(SyntaxError) -> StrictJSON {
            let open = failure("'[' never closed")
            index += 1
            var items: [StrictJSON] = []
            skipSpace()
            if current == UInt8(ascii: "]") {
                index += 1
                return .array(items)
            }
            while true {
                guard current != nil else { throw open }
                if current == UInt8(ascii: "]") { throw failure("a trailing comma") }
                items.append(try value(depth: depth + 1))
                skipSpace()
                guard let after = current else { throw open }
                index += 1
                if after == UInt8(ascii: "]") { return .array(items) }
                guard after == UInt8(ascii: ",") else {
                    index -= 1
                    throw failure(Self.json5Hint(after) ?? "expected ',' or ']'")
                }
                skipSpace()
            }
        }

        /// A string at `"`, unescaped and checked to be UTF-8.
        package mutating func string() throws(SyntaxError) -> String {
            let open = failure("string never closed")
            index += 1
            var scalars = String.UnicodeScalarView()
            var runStart = index
            func flush(_ end: Int) throws(SyntaxError) {
                guard runStart < end else { return }
                guard let text = String(validating: bytes[runStart..<end], as: UTF8.self) else {
                    throw SyntaxError(line: line, column: runStart - lineStart + 1, reason: "a string that is not UTF-8")
                }
                scalars.append(contentsOf: text.unicodeScalars)
            }
            while let byte = current {
                if byte == UInt8(ascii: "\"") {
                    try flush(index)
                    index += 1
                    return String(scalars)
                }
                if byte < 0x20 { throw failure("a control character inside a string (escape it)") }
                if byte != UInt8(ascii: "\\") {
                    index += 1
                    continue
                }
                try flush(index)
                index += 1
                guard let escape = current else { throw open }
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append("\"")
                case UInt8(ascii: "\\"): scalars.append("\\")
                case UInt8(ascii: "/"): scalars.append("/")
                case UInt8(ascii: "b"): scalars.append("\u{08}")
                case UInt8(ascii: "f"): scalars.append("\u{0C}")
                case UInt8(ascii: "n"): scalars.append("\n")
                case UInt8(ascii: "r"): scalars.append("\r")
                case UInt8(ascii: "t"): scalars.append("\t")
                case UInt8(ascii: "u"):
                    let high = try hex4()
                    var code = UInt32(high)
                    if (0xDC00...0xDFFF).contains(high) {
                        throw failure("an escaped lone low surrogate \\u\(String(high, radix: 16))")
                    }
                    if (0xD800...0xDBFF).contains(high) {
                        guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
                        else { throw failure("an escaped lone high surrogate \\u\(String(high, radix: 16))") }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else {
                            throw failure("an escaped high surrogate not followed by a low one")
                        }
                        code = 0x10000 + ((UInt32(high) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw failure("\\u escape of no character") }
                    scalars.append(scalar)
                default:
                    index -= 1
                    throw failure("an unknown escape \\\(Self.show(escape)) (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)")
                }
                runStart = index
            }
            throw open
        }

        package mutating func hex4() throws(SyntaxError) -> UInt16 {
            guard bytes.count - index >= 4 else { throw failure("\\u needs four hexadecimal digits") }
            var value: UInt16 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: throw failure("\\u needs four hexadecimal digits")
                }
                value = value << 4 | UInt16(digit)
                index += 1
            }
            return value
        }

        /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, nothing else.
        package mutating func number() throws(SyntaxError) -> StrictJSON {
            let start = index
            if current == UInt8(ascii: "-") { index += 1 }
            func digits() -> Int {
                let first = index
                while let byte = current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { index += 1 }
                return index - first
            }
            let integerStart = index
            let integerDigits = digits()
            guard integerDigits > 0 else { throw failure("a number needs a digit after '-'") }
            if integerDigits > 1, bytes[integerStart] == UInt8(ascii: "0") {
                index = integerStart
                throw failure("a number with a leading zero")
            }
            var whole = true
            if current == UInt8(ascii: ".") {
                whole = false
                index += 1
                guard digits() > 0 else { throw failure("a number needs a digit after '.'") }
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                whole = false
                index += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
                guard digits() > 0 else { throw failure("a number needs a digit in its exponent") }
            }
            if let byte = current, Self.isWordByte(byte) {
                throw failure("unexpected \(Self.show(byte)) in a number")
            }
            let text = String(decoding: bytes[start..<index], as: UTF8.self)
            if whole, let value = Int64(text) {
                return .integer(value)
            }
            if whole, !rules.refusesLargeIntegers, let value = UInt64(text) {
                return .unsigned(value)
            }
            if whole, rules.refusesLargeIntegers {
                index = start
                throw failure("the whole number \(text) is outside -2^63...2^63-1")
            }
            guard let value = Double(text), value.isFinite else {
                index = start
                throw failure("the number \(text) is too large")
            }
            return .number(value)
        }

        package static func isWordByte(_ byte: UInt8) -> Bool {
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_")
        }

        /// What JSON5 (the config file's syntax) means by `byte` where JSON has none of it.
        package static func json5Hint(_ byte: UInt8) -> String? {
            switch byte {
            case UInt8(ascii: "/"): return "a comment (JSON has none)"
            case UInt8(ascii: "'"): return "a single-quoted string (JSON strings use \")"
            default: return nil
            }
        }

        /// A byte for a message: printable ASCII as itself in quotes, anything else in hex.
        package static func show(_ byte: UInt8) -> String {
            if byte > 0x20, byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
            let digits = String(byte, radix: 16, uppercase: true)
            return "byte 0x" + (digits.count == 1 ? "0" + digits : digits)
        }
    }
}
