#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Writes and reads untyped JSON values (`[String: Any]`, `[Any]`, strings, numbers, booleans,
/// null), as Foundation's `JSONSerialization` does, for `JSONEncoding` and `responseJSON`.
/// FoundationEssentials has no `JSONSerialization`; this is TinyFire's own, bounded like every
/// other parser here: nesting at most `maximumDepth` levels each way, and the reader works on a
/// body the session already bounded (`maximumBodySize`).
enum JSONObject {
    /// The deepest nesting written or read.
    static let maximumDepth = StrictJSON.Rules.responses.maximumDepth

    /// How a value is written.
    struct WritingOptions {
        var prettyPrinted = false
        var escapesSlashes = true
        var fragmentsAllowed = false
    }

    /// The JSON text of `value`. Object keys are written sorted, so equal values always give
    /// equal bytes (`JSONSerialization` writes them in the dictionary's order unless told to
    /// sort).
    /// - Throws: `JSONEncoding.Error` naming the value that is not JSON and where it is.
    static func write(_ value: Any, options: WritingOptions) throws(JSONEncoding.Error) -> Data {
        var writer = Writer(options: options)
        if !options.fragmentsAllowed {
            let top = unwrapped(value)
            guard top is [String: Any] || top is [Any] else {
                throw .invalidTopLevelValue(type: top.map { "\(type(of: $0))" } ?? "null")
            }
        }
        try writer.write(value, path: "$", depth: 0)
        return Data(writer.bytes)
    }

    /// The value inside an `Optional` (any depth), or the value itself.
    /// Whether `value` is a boolean: a Swift `Bool`, or Foundation's boolean `NSNumber`
    /// (`__NSCFBoolean`). A numeric `NSNumber` 0 or 1 also casts to `Bool` on Linux and is a
    /// number all the same.
    static func isBoolean(_ value: Any) -> Bool {
        let type = type(of: value)
        if type == Bool.self { return true }
        guard value is Bool else { return false }
        return "\(type)".hasSuffix("CFBoolean")
    }

    static func unwrapped(_ value: Any) -> Any? {
        guard let optional = value as? any OptionalValue else { return value }
        return optional.wrappedAny.flatMap { unwrapped($0) }
    }

    private struct Writer {
        let options: WritingOptions
        var bytes: [UInt8] = []

        mutating func write(_ value: Any, path: String, depth: Int) throws(JSONEncoding.Error) {
            guard depth < JSONObject.maximumDepth else { throw .nestingTooDeep(path: path, limit: JSONObject.maximumDepth) }
            guard let value = JSONObject.unwrapped(value) else {
                bytes += Array("null".utf8)
                return
            }
            switch value {
            case let text as String: string(text)
            case let text as Substring: string(String(text))
            case let flag as Bool where JSONObject.isBoolean(value): bytes += Array((flag ? "true" : "false").utf8)
            case let integer as any BinaryInteger: bytes += Array("\(integer)".utf8)
            case let number as Double:
                guard number.isFinite else { throw .nonFiniteNumber(path: path) }
                bytes += Array(JSONObject.text(of: number).utf8)
            case let number as Float:
                guard number.isFinite else { throw .nonFiniteNumber(path: path) }
                bytes += Array((number == number.rounded() && abs(number) < 1e7 ? "\(Int(number))" : "\(number)").utf8)
            case let number as Decimal: bytes += Array("\(number)".utf8)
            case let object as [String: Any]: try self.object(object, path: path, depth: depth)
            case let array as [Any]: try self.array(array, path: path, depth: depth)
            default:
                let typeName = "\(type(of: value))"
                // Foundation's null, when the caller's module has Foundation: written as null
                // without TinyFire linking it.
                guard typeName == "NSNull" else { throw .unsupportedValue(path: path, type: typeName) }
                bytes += Array("null".utf8)
            }
        }

        mutating func object(_ object: [String: Any], path: String, depth: Int) throws(JSONEncoding.Error) {
            bytes.append(UInt8(ascii: "{"))
            let keys = object.keys.sorted()
            for (index, key) in keys.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                newline(depth + 1)
                string(key)
                bytes += Array((options.prettyPrinted ? " : " : ":").utf8)
                try write(object[key] as Any, path: "\(path).\(key)", depth: depth + 1)
            }
            if !keys.isEmpty { newline(depth) }
            bytes.append(UInt8(ascii: "}"))
        }

        mutating func array(_ array: [Any], path: String, depth: Int) throws(JSONEncoding.Error) {
            bytes.append(UInt8(ascii: "["))
            for (index, item) in array.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                newline(depth + 1)
                try write(item, path: "\(path)[\(index)]", depth: depth + 1)
            }
            if !array.isEmpty { newline(depth) }
            bytes.append(UInt8(ascii: "]"))
        }

        mutating func newline(_ depth: Int) {
            guard options.prettyPrinted else { return }
            bytes.append(UInt8(ascii: "\n"))
            bytes += [UInt8](repeating: UInt8(ascii: " "), count: 2 * depth)
        }

        mutating func string(_ text: String) {
            bytes.append(UInt8(ascii: "\""))
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "\""): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
                case UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
                case UInt8(ascii: "/") where options.escapesSlashes: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "/")]
                case 0x08: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
                case 0x0C: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
                case 0x0A: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
                case 0x0D: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
                case 0x09: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
                case 0..<0x20:
                    let hex = Array("0123456789abcdef".utf8)
                    bytes += Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
                default: bytes.append(byte)
                }
            }
            bytes.append(UInt8(ascii: "\""))
        }
    }

    /// A double as JSON writes it: whole values below 2^53 without a fraction (`1`, not `1.0`),
    /// others as Swift's shortest round-tripping text.
    static func text(of number: Double) -> String {
        if number == number.rounded(), abs(number) < 9_007_199_254_740_992 { return "\(Int64(number))" }
        return "\(number)"
    }

    /// Reads a JSON document into untyped values: objects are `[String: any Sendable]`, arrays
    /// `[any Sendable]`, whole numbers that fit `Int`, other numbers `Double`, `true`/`false`
    /// `Bool`, and `null` an `Optional<any Sendable>.none` (FoundationEssentials has no `NSNull`).
    /// - Parameters:
    ///   - data: the document.
    ///   - fragmentsAllowed: whether a top-level value other than an object or array is accepted.
    /// - Throws: `StrictJSON.SyntaxError` with the line, column and what is wrong.
    static func read(_ data: Data, fragmentsAllowed: Bool) throws(StrictJSON.SyntaxError) -> any Sendable {
        let document = try StrictJSON.parse(Array(data), rules: .responses)
        if !fragmentsAllowed {
            switch document {
            case .object, .array: break
            default: throw StrictJSON.SyntaxError(line: 1, column: 1, reason: "the top-level value is not an object or an array")
            }
        }
        return document.untypedValue
    }
}

/// `Optional` seen through `Any`, so nested optionals in `[String: Any]` are written as null.
protocol OptionalValue {
    var wrappedAny: Any? { get }
}

extension Optional: OptionalValue {
    var wrappedAny: Any? { self.map { $0 as Any } }
}

extension StrictJSON {
    /// The document as untyped values (see `JSONObject.read`).
    var untypedValue: any Sendable {
        switch self {
        case .string(let text): return text
        case .integer(let value): return Int(exactly: value).map { $0 as any Sendable } ?? Double(value)
        case .number(let value): return value
        // A Double, as a number beyond Int64 always was here.
        case .unsigned(let value): return Double(value)
        case .bool(let value): return value
        case .null: return Optional<any Sendable>.none as any Sendable
        case .array(let items): return items.map(\.untypedValue)
        case .object(let fields): return fields.mapValues(\.untypedValue)
        }
    }
}
