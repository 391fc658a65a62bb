#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A parsed JSON5 document: the config file before it is read into typed sections.
enum JSONValue: Sendable, Equatable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case array([JSONValue])
    case object([String: JSONValue])
    case null

    /// What the value is, for error messages ("a string", "an object").
    var kindDescription: String {
        switch self {
        case .string: return "a string"
        case .number: return "a number"
        case .bool: return "a boolean"
        case .array: return "an array"
        case .object: return "an object"
        case .null: return "null"
        }
    }

    /// Parses JSON5 (comments, trailing commas, unquoted keys, single quotes, hex numbers) with
    /// FoundationEssentials' `JSONDecoder`; a syntax error is located (line and column) by
    /// `JSON5Locator`, since the decoder does not say where.
    /// - Parameter data: the document.
    /// - Throws: `ConfigError` with the position and what was expected.
    static func parse(_ data: Data, file: String) throws(ConfigError) -> JSONValue {
        // The locator also refuses what the decoder lets pass: a key given twice.
        if let problem = JSON5Locator.firstError(in: Array(data)) {
            throw ConfigError(file: file, problems: [ConfigProblem(path: "", reason: problem)])
        }
        let decoder = JSONDecoder()
        decoder.allowsJSON5 = true
        do {
            return try decoder.decode(JSONValue.self, from: data)
        } catch {
            let position = JSON5Locator.firstError(in: Array(data))
            throw ConfigError(
                file: file,
                problems: [
                    ConfigProblem(path: "", reason: position ?? "not valid JSON5 (\(error))")
                ])
        }
    }
}

extension JSONValue: Decodable {
    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }
}

/// Finds where a JSON5 document first goes wrong, as "line L, column C: reason". Only for
/// error messages: values are read by `JSONDecoder`.
struct JSON5Locator {
    private let bytes: [UInt8]
    private var index = 0
    private var line = 1
    private var lineStart = 0

    private struct Failure: Error {
        let message: String
    }

    /// The first syntax error, or nil when the locator finds none.
    static func firstError(in bytes: [UInt8]) -> String? {
        var locator = JSON5Locator(bytes: bytes)
        do throws(Failure) {
            try locator.skipSpace()
            try locator.value(depth: 0)
            try locator.skipSpace()
            if locator.index < bytes.count { throw locator.failure("unexpected text after the document") }
            return nil
        } catch {
            return error.message
        }
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private func failure(_ reason: String) -> Failure {
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

    private mutating func skipSpace() throws(Failure) {
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

    private mutating func value(depth: Int) throws(Failure) {
        guard depth < 64 else { throw failure("nested more than 64 levels") }
        guard let byte = current else { throw failure("a value is missing at the end of the file") }
        switch byte {
        case UInt8(ascii: "{"): try object(depth: depth)
        case UInt8(ascii: "["): try array(depth: depth)
        case UInt8(ascii: "\""), UInt8(ascii: "'"): try string()
        default:
            let start = index
            while let next = current, Self.isWordByte(next) { advance() }
            guard index > start else { throw failure("unexpected '\(Character(UnicodeScalar(byte)))'") }
            let word = String(decoding: bytes[start..<index], as: UTF8.self)
            if ["true", "false", "null", "Infinity", "-Infinity", "+Infinity", "NaN"].contains(word) { return }
            if Double(word) != nil || Self.isHex(word) { return }
            index = start
            throw failure("'\(word)' is not a value (strings need quotes)")
        }
    }

    private mutating func object(depth: Int) throws(Failure) {
        let open = failure("'{' never closed")
        var keys: Set<String> = []
        advance()
        while true {
            try skipSpace()
            guard let byte = current else { throw open }
            if byte == UInt8(ascii: "}") {
                advance()
                return
            }
            let keyStart = index
            let keyFailure = failure("")
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                try string()
            } else {
                while let next = current, Self.isIdentifierByte(next) { advance() }
                guard index > keyStart else { throw failure("expected a key") }
            }
            // Compared as the decoder reads them: `"i\u0064"` and `id` are one key.
            let key = Self.unescapedKey(bytes[keyStart..<index])
            guard keys.insert(key).inserted else {
                throw Failure(message: keyFailure.message.replacing(": ", with: "") + ": the key \"\(key)\" appears twice in this object")
            }
            try skipSpace()
            guard current == UInt8(ascii: ":") else { throw failure("expected ':' after the key") }
            advance()
            try skipSpace()
            try value(depth: depth + 1)
            try skipSpace()
            guard let after = current else { throw open }
            if after == UInt8(ascii: ",") {
                advance()
            } else if after != UInt8(ascii: "}") {
                throw failure("expected ',' or '}'")
            }
        }
    }

    private mutating func array(depth: Int) throws(Failure) {
        let open = failure("'[' never closed")
        advance()
        while true {
            try skipSpace()
            guard let byte = current else { throw open }
            if byte == UInt8(ascii: "]") {
                advance()
                return
            }
            if byte == UInt8(ascii: ",") { throw failure("an empty element (two commas)") }
            try value(depth: depth + 1)
            try skipSpace()
            guard let after = current else { throw open }
            if after == UInt8(ascii: ",") {
                advance()
            } else if after != UInt8(ascii: "]") {
                throw failure("expected ',' or ']'")
            }
        }
    }

    private mutating func string() throws(Failure) {
        let quote = bytes[index]
        let open = failure("string never closed")
        advance()
        while let byte = current {
            if byte == quote {
                advance()
                return
            }
            if byte == UInt8(ascii: "\\") {
                advance()
                guard current != nil else { throw open }
            } else if byte == 0x0A {
                throw failure("a line break inside a string (end the line with '\\' to continue it)")
            }
            advance()
        }
        throw open
    }

    /// A key as text: quotes removed, JSON5 escapes (`\uXXXX` with surrogate pairs, `\xHH`,
    /// `\n` and the other single-letter ones, a backslash before a line break) replaced.
    static func unescapedKey(_ raw: ArraySlice<UInt8>) -> String {
        var body = raw
        if let first = body.first, first == UInt8(ascii: "\"") || first == UInt8(ascii: "'"), body.count >= 2 {
            body = body.dropFirst().dropLast()
        }
        var scalars = String.UnicodeScalarView()
        var bytes = Array(body)[...]
        func hex(_ count: Int) -> UInt32? {
            guard bytes.count >= count, let value = UInt32(String(decoding: bytes.prefix(count), as: UTF8.self), radix: 16) else {
                return nil
            }
            bytes = bytes.dropFirst(count)
            return value
        }
        var run: [UInt8] = []
        func flush() {
            scalars.append(contentsOf: String(decoding: run, as: UTF8.self).unicodeScalars)
            run.removeAll()
        }
        while let byte = bytes.popFirst() {
            guard byte == UInt8(ascii: "\\"), let escape = bytes.popFirst() else {
                run.append(byte)
                continue
            }
            flush()
            switch escape {
            case UInt8(ascii: "n"): scalars.append("\n")
            case UInt8(ascii: "t"): scalars.append("\t")
            case UInt8(ascii: "r"): scalars.append("\r")
            case UInt8(ascii: "b"): scalars.append("\u{08}")
            case UInt8(ascii: "f"): scalars.append("\u{0C}")
            case UInt8(ascii: "v"): scalars.append("\u{0B}")
            case UInt8(ascii: "0"): scalars.append("\u{00}")
            case 0x0A: break
            case UInt8(ascii: "x"):
                if let value = hex(2), let scalar = Unicode.Scalar(value) { scalars.append(scalar) }
            case UInt8(ascii: "u"):
                guard var value = hex(4) else { break }
                if (0xD800...0xDBFF).contains(value), bytes.starts(with: [UInt8(ascii: "\\"), UInt8(ascii: "u")]) {
                    let saved = bytes
                    bytes = bytes.dropFirst(2)
                    if let low = hex(4), (0xDC00...0xDFFF).contains(low) {
                        value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
                    } else {
                        bytes = saved
                    }
                }
                scalars.append(Unicode.Scalar(value) ?? "\u{FFFD}")
            default: run.append(escape)
            }
        }
        flush()
        return String(scalars)
    }

    private static func isWordByte(_ byte: UInt8) -> Bool {
        isIdentifierByte(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-")
    }

    private static func isIdentifierByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "$")
            || byte >= 0x80
    }

    private static func isHex(_ word: String) -> Bool {
        var body = Substring(word)
        if body.hasPrefix("-") || body.hasPrefix("+") { body = body.dropFirst() }
        guard body.lowercased().hasPrefix("0x"), body.count > 2 else { return false }
        return body.dropFirst(2).allSatisfy(\.isHexDigit)
    }
}
