/// A parsed JSON5 document: the config file before it is read into typed sections.
package enum JSONValue: Sendable, Equatable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case array([JSONValue])
    case object([String: JSONValue])
    case null

    /// What the value is, for error messages ("a string", "an object").
    package var kindDescription: String {
        switch self {
        case .string: return "a string"
        case .number: return "a number"
        case .bool: return "a boolean"
        case .array: return "an array"
        case .object: return "an object"
        case .null: return "null"
        }
    }

    /// Parses JSON5 (comments, trailing commas, unquoted keys, single quotes, hexadecimal,
    /// `Infinity` and `NaN`, a leading `+` or a bare `.` in numbers). A key given twice in one
    /// object is refused, compared after unescaping. Bounded: nesting at most 64 levels; the
    /// value takes memory in proportion to the document.
    /// - Parameters:
    ///   - bytes: the document.
    ///   - file: its name, for the error.
    /// - Throws: `ConfigError` with the line, the column and what was expected.
    package static func parse(_ bytes: [UInt8], file: String) throws(ConfigError) -> JSONValue {
        var parser = JSON5Parser(bytes: bytes)
        do throws(JSON5Parser.Failure) {
            try parser.skipSpace()
            let value = try parser.value(depth: 0)
            try parser.skipSpace()
            if parser.index < bytes.count { throw parser.failure("unexpected text after the document") }
            return value
        } catch {
            throw ConfigError(file: file, problems: [ConfigProblem(path: "", reason: error.message)])
        }
    }
}

/// Reads a JSON5 document into a `JSONValue`, saying where it first goes wrong as
/// "line L, column C: reason".
struct JSON5Parser {
    private let bytes: [UInt8]
    private(set) var index = 0
    private var line = 1
    private var lineStart = 0

    struct Failure: Error {
        let message: String
    }

    init(bytes: [UInt8]) { self.bytes = bytes }

    func failure(_ reason: String) -> Failure {
        Failure(message: "line \(line), column \(index - lineStart + 1): \(reason)")
    }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func advance() {
        if bytes[index] == 0x0A {
            line += 1
            lineStart = index + 1
        }
        index += 1
    }

    mutating func skipSpace() throws(Failure) {
        while let byte = current {
            if byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D {
                advance()
            } else if byte == UInt8(ascii: "/"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "/") {
                while let next = current, next != 0x0A { advance() }
            } else if byte == UInt8(ascii: "/"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "*") {
                let start = failure("comment never closed")
                advance()
                advance()
                while true {
                    guard let next = current else { throw start }
                    if next == UInt8(ascii: "*"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "/") {
                        advance()
                        advance()
                        break
                    }
                    advance()
                }
            } else {
                return
            }
        }
    }

    mutating func value(depth: Int) throws(Failure) -> JSONValue {
        guard depth < 64 else { throw failure("nested more than 64 levels") }
        guard let byte = current else { throw failure("a value is missing at the end of the file") }
        switch byte {
        case UInt8(ascii: "{"): return try object(depth: depth)
        case UInt8(ascii: "["): return try array(depth: depth)
        case UInt8(ascii: "\""), UInt8(ascii: "'"): return .string(try string())
        default:
            let start = index
            while let next = current, Self.isWordByte(next) { advance() }
            guard index > start else { throw failure("unexpected '\(Character(Unicode.Scalar(byte)))'") }
            let word = String(decoding: bytes[start..<index], as: UTF8.self)
            if let value = Self.literal(word) {
                if case .number(let number) = value, number.isInfinite, !word.hasSuffix("Infinity") {
                    index = start
                    throw failure("the number \(word) is too large")
                }
                return value
            }
            index = start
            if Self.hasLeadingZero(word) { throw failure("'\(word)': a number with a leading zero") }
            throw failure("'\(word)' is not a value (strings need quotes)")
        }
    }

    private mutating func object(depth: Int) throws(Failure) -> JSONValue {
        let open = failure("'{' never closed")
        var values: [String: JSONValue] = [:]
        advance()
        while true {
            try skipSpace()
            guard let byte = current else { throw open }
            if byte == UInt8(ascii: "}") {
                advance()
                return .object(values)
            }
            let keyStart = index
            let keyPlace = failure("")
            let key: String
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                key = try string()
            } else {
                while let next = current, Self.isIdentifierByte(next) { advance() }
                guard index > keyStart else { throw failure("expected a key") }
                key = String(decoding: bytes[keyStart..<index], as: UTF8.self)
            }
            // Compared after unescaping: `"i\u0064"` and `id` are one key.
            guard values[key] == nil else { throw Self.at(keyPlace, "the key \"\(key)\" appears twice in this object") }
            try skipSpace()
            guard current == UInt8(ascii: ":") else { throw failure("expected ':' after the key") }
            advance()
            try skipSpace()
            values[key] = try value(depth: depth + 1)
            try skipSpace()
            guard let after = current else { throw open }
            if after == UInt8(ascii: ",") {
                advance()
            } else if after != UInt8(ascii: "}") {
                throw failure("expected ',' or '}'")
            }
        }
    }

    private mutating func array(depth: Int) throws(Failure) -> JSONValue {
        let open = failure("'[' never closed")
        var items: [JSONValue] = []
        advance()
        while true {
            try skipSpace()
            guard let byte = current else { throw open }
            if byte == UInt8(ascii: "]") {
                advance()
                return .array(items)
            }
            if byte == UInt8(ascii: ",") { throw failure("an empty element (two commas)") }
            items.append(try value(depth: depth + 1))
            try skipSpace()
            guard let after = current else { throw open }
            if after == UInt8(ascii: ",") {
                advance()
            } else if after != UInt8(ascii: "]") {
                throw failure("expected ',' or ']'")
            }
        }
    }

    /// A quoted string (either quote), unescaped: `\"`, `\'`, `\\`, `\/`, `\b`, `\f`, `\n`,
    /// `\r`, `\t`, `\xHH`, `\uXXXX` (a surrogate pair joined), and a backslash before a line
    /// break, which keeps the break. Refused as the library's former reader (Foundation's JSON5)
    /// refused them: any other escape, a lone surrogate, a NUL, a raw control character.
    private mutating func string() throws(Failure) -> String {
        let quote = bytes[index]
        let open = failure("string never closed")
        advance()
        var out: [UInt8] = []
        while let byte = current {
            if byte == quote {
                advance()
                return String(decoding: out, as: UTF8.self)
            }
            if byte == 0x0A { throw failure("a line break inside a string (end the line with '\\' to continue it)") }
            if byte < 0x20 { throw failure("a control character (\(Self.show(byte))) inside a string: write it as an escape") }
            guard byte == UInt8(ascii: "\\") else {
                out.append(byte)
                advance()
                continue
            }
            let escapeFailure = failure("")
            advance()
            guard let escape = current else { throw open }
            advance()
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "'"), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case 0x0A: out.append(0x0A)
            case 0x0D:
                out.append(0x0D)
                if current == 0x0A {
                    out.append(0x0A)
                    advance()
                }
            case UInt8(ascii: "x"):
                guard let value = hex(2) else { throw Self.at(escapeFailure, "\\x needs two hexadecimal digits") }
                try append(value, to: &out, at: escapeFailure)
            case UInt8(ascii: "u"):
                guard var value = hex(4) else { throw Self.at(escapeFailure, "\\u needs four hexadecimal digits") }
                if (0xDC00...0xDFFF).contains(value) {
                    throw Self.at(escapeFailure, "a lone low surrogate (\\u without the one before it)")
                }
                if (0xD800...0xDBFF).contains(value) {
                    guard current == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else {
                        throw Self.at(escapeFailure, "a lone high surrogate (\\u without the one after it)")
                    }
                    advance()
                    advance()
                    guard let low = hex(4), (0xDC00...0xDFFF).contains(low) else {
                        throw Self.at(escapeFailure, "a lone high surrogate (\\u without the one after it)")
                    }
                    value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
                }
                try append(value, to: &out, at: escapeFailure)
            default:
                throw Self.at(escapeFailure, "unknown escape '\\\(Character(Unicode.Scalar(escape)))'")
            }
        }
        throw open
    }

    /// `count` hexadecimal digits as a number, consumed; nil (nothing consumed) when fewer.
    private mutating func hex(_ count: Int) -> UInt32? {
        guard index + count <= bytes.count else { return nil }
        var value: UInt32 = 0
        for byte in bytes[index..<(index + count)] {
            guard let digit = Self.hexDigit(byte) else { return nil }
            value = value << 4 | digit
        }
        for _ in 0..<count { advance() }
        return value
    }

    /// Appends the character `value` (from an escape at `place`) as UTF-8; NUL is refused.
    private func append(_ value: UInt32, to out: inout [UInt8], at place: Failure) throws(Failure) {
        guard value != 0, let scalar = Unicode.Scalar(value) else { throw Self.at(place, "a NUL character in a string") }
        UTF8.encode(scalar) { out.append($0) }
    }

    /// `reason` at the place `place` was made.
    private static func at(_ place: Failure, _ reason: String) -> Failure { Failure(message: place.message + reason) }

    /// A byte for a message: "byte 0x09".
    private static func show(_ byte: UInt8) -> String {
        let digits = String(byte, radix: 16, uppercase: true)
        return "byte 0x" + (digits.utf8.count == 1 ? "0" + digits : digits)
    }

    /// A word that is a value: `true`, `false`, `null`, `Infinity`, `NaN` (signed or not), a
    /// hexadecimal integer, or a decimal number (`+1`, `.5`, `5.`, `1e3`); nil for anything else.
    static func literal(_ word: String) -> JSONValue? {
        switch word {
        case "true": return .bool(true)
        case "false": return .bool(false)
        case "null": return .null
        case "Infinity", "+Infinity": return .number(.infinity)
        case "-Infinity": return .number(-.infinity)
        case "NaN", "+NaN", "-NaN": return .number(.nan)
        default: break
        }
        var body = Array(word.utf8)[...]
        var negative = false
        if let sign = body.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") {
            negative = sign == UInt8(ascii: "-")
            body = body.dropFirst()
        }
        if body.count > 2, body[body.startIndex] == UInt8(ascii: "0"),
            body[body.startIndex + 1] == UInt8(ascii: "x") || body[body.startIndex + 1] == UInt8(ascii: "X")
        {
            var value: Double = 0
            for byte in body.dropFirst(2) {
                guard let digit = hexDigit(byte) else { return nil }
                value = value * 16 + Double(digit)
            }
            return .number(negative ? -value : value)
        }
        if hasLeadingZero(word) { return nil }
        // Digits with at most one '.', at least one digit, then an optional exponent.
        var digits = 0
        var dot = false
        var position = body.startIndex
        while position < body.endIndex {
            let byte = body[position]
            if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                digits += 1
            } else if byte == UInt8(ascii: "."), !dot {
                dot = true
            } else {
                break
            }
            position += 1
        }
        guard digits > 0 else { return nil }
        if position < body.endIndex {
            guard body[position] == UInt8(ascii: "e") || body[position] == UInt8(ascii: "E") else { return nil }
            position += 1
            if position < body.endIndex, body[position] == UInt8(ascii: "+") || body[position] == UInt8(ascii: "-") { position += 1 }
            guard position < body.endIndex else { return nil }
            while position < body.endIndex {
                guard body[position] >= UInt8(ascii: "0") && body[position] <= UInt8(ascii: "9") else { return nil }
                position += 1
            }
        }
        // "5." and ".5" are JSON5 numbers; strtod reads them as they are.
        guard let value = Double(String(decoding: body, as: UTF8.self)) else { return nil }
        return .number(negative ? -value : value)
    }

    /// Whether `word` is a decimal number written with a leading zero (`01`, `-00.5`), which
    /// JSON5 refuses.
    private static func hasLeadingZero(_ word: String) -> Bool {
        var body = Array(word.utf8)[...]
        if let sign = body.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") { body = body.dropFirst() }
        guard body.count >= 2, body[body.startIndex] == UInt8(ascii: "0") else { return false }
        let next = body[body.startIndex + 1]
        return next >= UInt8(ascii: "0") && next <= UInt8(ascii: "9")
    }

    private static func hexDigit(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return UInt32(byte - UInt8(ascii: "A") + 10)
        default: return nil
        }
    }

    private static func isWordByte(_ byte: UInt8) -> Bool {
        isIdentifierByte(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-")
    }

    private static func isIdentifierByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "$")
            || byte >= 0x80
    }
}
