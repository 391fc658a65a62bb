#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Encodes `Encodable` values as `application/x-www-form-urlencoded` text, with Alamofire's
/// options for arrays, booleans, data, dates, keys, key paths, nil and spaces.
///
/// The root value must be keyed (a struct, class or dictionary). Nested values become key
/// paths (`parent[child]`); arrays repeat the key (`foo[]=1&foo[]=2`). With
/// `alphabetizeKeyValuePairs` (the default) the pairs at every level are sorted, so equal
/// values always give equal bytes.
public final class URLEncodedFormEncoder: Sendable {
    /// How array elements are keyed.
    public enum ArrayEncoding: Sendable {
        /// `key[]` (the default).
        case brackets
        /// `key`.
        case noBrackets
        /// `key[0]`, `key[1]`, …
        case indexInBrackets
        /// Your closure, given the key and the element's index.
        case custom(@Sendable (_ key: String, _ index: Int) -> String)

        func encode(_ key: String, atIndex index: Int) -> String {
            switch self {
            case .brackets: return "\(key)[]"
            case .noBrackets: return key
            case .indexInBrackets: return "\(key)[\(index)]"
            case .custom(let encoding): return encoding(key, index)
            }
        }
    }

    /// How `Bool` values are written.
    public enum BoolEncoding: Sendable {
        /// `1` and `0` (the default).
        case numeric
        /// `true` and `false`.
        case literal

        func encode(_ value: Bool) -> String {
            switch self {
            case .numeric: return value ? "1" : "0"
            case .literal: return value ? "true" : "false"
            }
        }
    }

    /// How `Data` values are written.
    public enum DataEncoding: Sendable {
        /// `Data`'s own `Encodable` form (an array of bytes).
        case deferredToData
        /// Base 64 (the default).
        case base64
        /// Your closure.
        case custom(@Sendable (Data) throws -> String)
    }

    /// How `Date` values are written.
    public enum DateEncoding: Sendable {
        /// `Date`'s own `Encodable` form: seconds since 2001-01-01 (the default).
        case deferredToDate
        /// Seconds since 1970-01-01 UTC.
        case secondsSince1970
        /// Milliseconds since 1970-01-01 UTC.
        case millisecondsSince1970
        /// ISO 8601 / RFC 3339, `2001-01-01T00:02:03Z`.
        case iso8601
        /// A format style. Alamofire takes a `DateFormatter`, which needs ICU; on TinyFire use a
        /// `Date.ISO8601FormatStyle` or any other `FormatStyle` from `Date` to `String`.
        case formatted(any FormatStyle & Sendable)
        /// Your closure.
        case custom(@Sendable (Date) throws -> String)
    }

    /// How coding keys are rewritten before they are written.
    public enum KeyEncoding: Sendable {
        /// As declared (the default).
        case useDefaultKeys
        /// `oneTwoThree` → `one_two_three`.
        case convertToSnakeCase
        /// `oneTwoThree` → `one-two-three`.
        case convertToKebabCase
        /// `oneTwoThree` → `OneTwoThree`.
        case capitalized
        /// `oneTwoThree` → `ONETWOTHREE`.
        case uppercased
        /// `oneTwoThree` → `onetwothree`.
        case lowercased
        /// Your closure.
        case custom(@Sendable (String) -> String)

        func encode(_ key: String) -> String {
            switch self {
            case .useDefaultKeys: return key
            case .convertToSnakeCase: return Self.splitCamelCase(key, separator: "_")
            case .convertToKebabCase: return Self.splitCamelCase(key, separator: "-")
            case .capitalized: return key.prefix(1).uppercased() + key.dropFirst()
            case .uppercased: return key.uppercased()
            case .lowercased: return key.lowercased()
            case .custom(let encoding): return encoding(key)
            }
        }

        /// Splits at lower→upper transitions and before the last capital of a run of capitals
        /// that a lowercase letter follows (`URLValue` → `url_value`), then lowercases.
        static func splitCamelCase(_ key: String, separator: Character) -> String {
            let characters = Array(key)
            guard !characters.isEmpty else { return key }
            var result = ""
            for (index, character) in characters.enumerated() {
                if index > 0 && character.isUppercase {
                    let previous = characters[index - 1]
                    let nextIsLower = index + 1 < characters.count && characters[index + 1].isLowercase
                    if previous.isLowercase || previous.isNumber || (previous.isUppercase && nextIsLower) {
                        result.append(separator)
                    }
                }
                result.append(contentsOf: character.lowercased())
            }
            return result
        }
    }

    /// How nested keys are appended to their parent's key.
    public struct KeyPathEncoding: Sendable {
        /// `parent[child]` (the default).
        public static let brackets = KeyPathEncoding { "[\($0)]" }
        /// `parent.child`.
        public static let dots = KeyPathEncoding { ".\($0)" }

        private let encoding: @Sendable (String) -> String

        /// Creates an encoding from a closure that turns a sub-key into what follows the parent.
        /// - Parameter encoding: e.g. `{ "-\($0)" }` for `parent-child`.
        public init(encoding: @escaping @Sendable (_ subkey: String) -> String) {
            self.encoding = encoding
        }

        func encodeKeyPath(_ subkey: String) -> String { encoding(subkey) }
    }

    /// How nil values are written.
    public struct NilEncoding: Sendable {
        /// Left out entirely (the default): `otherValue=2`.
        public static let dropKey = NilEncoding { nil }
        /// The key with an empty value: `nilValue=&otherValue=2`.
        public static let dropValue = NilEncoding { "" }
        /// The string `null`: `nilValue=null&otherValue=2`.
        public static let null = NilEncoding { "null" }

        private let encoding: @Sendable () -> String?

        /// Creates an encoding from a closure giving the text for nil (nil drops the key).
        /// - Parameter encoding: the replacement.
        public init(encoding: @escaping @Sendable () -> String?) {
            self.encoding = encoding
        }

        func encodeNil() -> String? { encoding() }
    }

    /// How spaces are written.
    public enum SpaceEncoding: Sendable {
        /// `%20` (the default).
        case percentEscaped
        /// `+`.
        case plusReplaced
    }

    /// Why a value could not be encoded.
    public enum Error: Swift.Error, Sendable, CustomStringConvertible {
        /// The root was a single value or an array; forms need keys.
        case invalidRootObject(String)

        /// What went wrong.
        public var description: String {
            switch self {
            case .invalidRootObject(let kind):
                return "URLEncodedFormEncoder needs a keyed root value (a struct or dictionary), got \(kind)"
            }
        }
    }

    /// Whether pairs are sorted at every level (default true).
    public let alphabetizeKeyValuePairs: Bool
    /// Array keys.
    public let arrayEncoding: ArrayEncoding
    /// Booleans.
    public let boolEncoding: BoolEncoding
    /// Data.
    public let dataEncoding: DataEncoding
    /// Dates.
    public let dateEncoding: DateEncoding
    /// Coding keys.
    public let keyEncoding: KeyEncoding
    /// Nested keys.
    public let keyPathEncoding: KeyPathEncoding
    /// Nil values.
    public let nilEncoding: NilEncoding
    /// Spaces.
    public let spaceEncoding: SpaceEncoding
    /// Bytes written as themselves; every other byte is percent-escaped. Default
    /// `URLEncodedFormEncoder.defaultAllowedBytes`: letters, digits, `-._~`, `/` and `?`.
    public let allowedBytes: Set<UInt8>

    /// Letters, digits, `-._~/?` (RFC 3986's query characters without the delimiters that
    /// would break a form apart: `:#[]@!$&'()*+,;=`).
    public static let defaultAllowedBytes: Set<UInt8> = {
        var bytes = Set<UInt8>()
        for range in [UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9")] {
            bytes.formUnion(range)
        }
        bytes.formUnion("-._~/?".utf8)
        return bytes
    }()

    /// Creates an encoder; every option defaults to Alamofire's default.
    /// - Parameters:
    ///   - alphabetizeKeyValuePairs: sort pairs; default true.
    ///   - arrayEncoding: default `.brackets`.
    ///   - boolEncoding: default `.numeric`.
    ///   - dataEncoding: default `.base64`.
    ///   - dateEncoding: default `.deferredToDate`.
    ///   - keyEncoding: default `.useDefaultKeys`.
    ///   - keyPathEncoding: default `.brackets`.
    ///   - nilEncoding: default `.dropKey`.
    ///   - spaceEncoding: default `.percentEscaped`.
    ///   - allowedBytes: default `defaultAllowedBytes`.
    public init(
        alphabetizeKeyValuePairs: Bool = true,
        arrayEncoding: ArrayEncoding = .brackets,
        boolEncoding: BoolEncoding = .numeric,
        dataEncoding: DataEncoding = .base64,
        dateEncoding: DateEncoding = .deferredToDate,
        keyEncoding: KeyEncoding = .useDefaultKeys,
        keyPathEncoding: KeyPathEncoding = .brackets,
        nilEncoding: NilEncoding = .dropKey,
        spaceEncoding: SpaceEncoding = .percentEscaped,
        allowedBytes: Set<UInt8> = URLEncodedFormEncoder.defaultAllowedBytes
    ) {
        self.alphabetizeKeyValuePairs = alphabetizeKeyValuePairs
        self.arrayEncoding = arrayEncoding
        self.boolEncoding = boolEncoding
        self.dataEncoding = dataEncoding
        self.dateEncoding = dateEncoding
        self.keyEncoding = keyEncoding
        self.keyPathEncoding = keyPathEncoding
        self.nilEncoding = nilEncoding
        self.spaceEncoding = spaceEncoding
        self.allowedBytes = allowedBytes
    }

    /// Encodes `value` as form text.
    /// - Parameter value: a keyed value.
    /// - Returns: `key=value&…`, escaped.
    /// - Throws: `URLEncodedFormEncoder.Error.invalidRootObject`, or what a custom encoding or
    ///   the value's `encode(to:)` throws.
    public func encode(_ value: some Encodable) throws -> String {
        let component: FormComponent
        switch try encodeComponent(value) {
        case .object(let object): component = .object(object)
        case .array: throw Error.invalidRootObject("an array")
        case .string: throw Error.invalidRootObject("a single value")
        }
        guard case .object(let object) = component else { return "" }
        return serialize(object: object, prefix: nil)
    }

    /// Encodes `value` as form text in UTF-8.
    /// - Parameter value: a keyed value.
    /// - Returns: the bytes.
    /// - Throws: as `encode(_:) -> String`.
    public func encode(_ value: some Encodable) throws -> Data {
        Data((try encode(value) as String).utf8)
    }

    func encodeComponent(_ value: some Encodable) throws -> FormComponent {
        let context = FormEncodingContext()
        let encoder = FormValueEncoder(context: context, codingPath: [], options: self)
        try encoder.encodeValue(value)
        return context.root
    }

    // MARK: - Serialization

    private func serialize(object: [(key: String, value: FormComponent)], prefix: String?) -> String {
        var segments: [String] = []
        for (key, value) in object {
            let path = prefix.map { $0 + keyPathEncoding.encodeKeyPath(key) } ?? key
            let segment = serialize(value, key: path)
            if !segment.isEmpty { segments.append(segment) }
        }
        if alphabetizeKeyValuePairs { segments.sort() }
        return segments.joined(separator: "&")
    }

    private func serialize(_ component: FormComponent, key: String) -> String {
        switch component {
        case .string(let value):
            return escape(key) + "=" + escape(value)
        case .object(let object):
            return serialize(object: object, prefix: key)
        case .array(let elements):
            var segments: [String] = []
            for (index, element) in elements.enumerated() {
                let segment = serialize(element, key: arrayEncoding.encode(key, atIndex: index))
                if !segment.isEmpty { segments.append(segment) }
            }
            if alphabetizeKeyValuePairs { segments.sort() }
            return segments.joined(separator: "&")
        }
    }

    /// Percent-escapes every byte outside `allowedBytes` (spaces per `spaceEncoding`).
    func escape(_ text: String) -> String {
        Self.percentEscaped(text, allowed: allowedBytes, plusForSpace: spaceEncoding == .plusReplaced)
    }

    /// `text` with every byte outside `allowed` written `%XX` (a space as `+` when asked).
    static func percentEscaped(_ text: String, allowed allowedBytes: Set<UInt8>, plusForSpace: Bool) -> String {
        let hex: [UInt8] = Array("0123456789ABCDEF".utf8)
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            if allowedBytes.contains(byte) {
                output.append(byte)
            } else if byte == UInt8(ascii: " ") && plusForSpace {
                output.append(UInt8(ascii: "+"))
            } else {
                output.append(UInt8(ascii: "%"))
                output.append(hex[Int(byte >> 4)])
                output.append(hex[Int(byte & 0xF)])
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    // MARK: - Leaf values

    func string(for date: Date, encoder: FormValueEncoder) throws -> String? {
        switch dateEncoding {
        case .deferredToDate:
            return nil
        case .secondsSince1970:
            return String(date.timeIntervalSince1970)
        case .millisecondsSince1970:
            return String(date.timeIntervalSince1970 * 1000)
        case .iso8601:
            return date.formatted(Date.ISO8601FormatStyle())
        case .formatted(let style):
            return try Self.format(date, with: style)
        case .custom(let encoding):
            return try encoding(date)
        }
    }

    private static func format<Style: FormatStyle>(_ date: Date, with style: Style) throws -> String {
        guard let input = date as? Style.FormatInput, let output = style.format(input) as? String else {
            throw EncodingError.invalidValue(
                date, EncodingError.Context(codingPath: [], debugDescription: "the format style does not format a Date into a String"))
        }
        return output
    }

    func string(for data: Data) throws -> String? {
        switch dataEncoding {
        case .deferredToData: return nil
        case .base64: return data.base64EncodedString()
        case .custom(let encoding): return try encoding(data)
        }
    }
}

/// The tree a value encodes into before it is serialized.
indirect enum FormComponent {
    case string(String)
    case array([FormComponent])
    case object([(key: String, value: FormComponent)])

    /// Sets `value` at `path`, creating or converting containers on the way.
    mutating func set(_ value: FormComponent, at path: ArraySlice<FormPathElement>) {
        guard let first = path.first else {
            self = value
            return
        }
        let rest = path.dropFirst()
        switch first {
        case .index(let index):
            var elements: [FormComponent]
            if case .array(let existing) = self { elements = existing } else { elements = [] }
            if index < elements.count {
                elements[index].set(value, at: rest)
            } else {
                var child = FormComponent.object([])
                child.set(value, at: rest)
                elements.append(child)
            }
            self = .array(elements)
        case .key(let key):
            var object: [(key: String, value: FormComponent)]
            if case .object(let existing) = self { object = existing } else { object = [] }
            if let position = object.firstIndex(where: { $0.key == key }) {
                object[position].value.set(value, at: rest)
            } else {
                var child = FormComponent.object([])
                child.set(value, at: rest)
                object.append((key, child))
            }
            self = .object(object)
        }
    }
}

enum FormPathElement {
    case key(String)
    case index(Int)
}

final class FormEncodingContext {
    var root = FormComponent.object([])
}

/// A key as it appears in the coding path the encoder hands to values.
struct FormCodingKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(stringValue: String) { self.stringValue = stringValue }
    init(intValue: Int) {
        self.stringValue = "\(intValue)"
        self.intValue = intValue
    }
}

/// The `Encoder` handed to values; containers write into the shared context at their path.
struct FormValueEncoder: Encoder {
    let context: FormEncodingContext
    let codingPath: [any CodingKey]
    let path: [FormPathElement]
    let options: URLEncodedFormEncoder
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(context: FormEncodingContext, codingPath: [any CodingKey], options: URLEncodedFormEncoder, path: [FormPathElement] = []) {
        self.context = context
        self.codingPath = codingPath
        self.options = options
        self.path = path
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(FormKeyedContainer<Key>(encoder: self))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        FormUnkeyedContainer(encoder: self)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        FormSingleValueContainer(encoder: self)
    }

    func child(key: any CodingKey, element: FormPathElement) -> FormValueEncoder {
        FormValueEncoder(context: context, codingPath: codingPath + [key], options: options, path: path + [element])
    }

    func set(_ value: FormComponent) {
        context.root.set(value, at: path[...])
    }

    func setString(_ value: String) { set(.string(value)) }

    /// What already sits at this encoder's path, if anything (so a second container on the
    /// same path merges instead of erasing); an empty root counts as nothing.
    func existingComponent() -> FormComponent? {
        var current = context.root
        for element in path {
            switch (element, current) {
            case (.key(let key), .object(let object)):
                guard let next = object.first(where: { $0.key == key })?.value else { return nil }
                current = next
            case (.index(let index), .array(let elements)):
                guard index < elements.count else { return nil }
                current = elements[index]
            default:
                return nil
            }
        }
        if path.isEmpty, case .object(let object) = current, object.isEmpty { return nil }
        return current
    }

    func encodeNilValue() {
        if let text = options.nilEncoding.encodeNil() { setString(text) }
    }

    /// Encodes any value at this encoder's path, with the special cases for Date, Data,
    /// Decimal and URL.
    func encodeValue<T: Encodable>(_ value: T) throws {
        switch value {
        case let date as Date:
            if let text = try options.string(for: date, encoder: self) {
                setString(text)
            } else {
                try date.encode(to: self)
            }
        case let data as Data:
            if let text = try options.string(for: data) {
                setString(text)
            } else {
                try data.encode(to: self)
            }
        case let decimal as Decimal:
            setString(decimal.description)
        case let url as URL:
            setString(url.absoluteString)
        default:
            try value.encode(to: self)
        }
    }
}

struct FormKeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let encoder: FormValueEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }

    init(encoder: FormValueEncoder) {
        self.encoder = encoder
        if case .none = encoder.existingComponent() { encoder.set(.object([])) }
    }

    private func child(_ key: Key) -> FormValueEncoder {
        encoder.child(key: key, element: .key(encoder.options.keyEncoding.encode(key.stringValue)))
    }

    mutating func encodeNil(forKey key: Key) throws { child(key).encodeNilValue() }
    mutating func encode(_ value: Bool, forKey key: Key) throws { child(key).setString(encoder.options.boolEncoding.encode(value)) }
    mutating func encode(_ value: String, forKey key: Key) throws { child(key).setString(value) }
    mutating func encode(_ value: Double, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: Float, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: Int, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { child(key).setString(String(value)) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { try child(key).encodeValue(value) }

    // Synthesized `Encodable` skips nil optionals with `encodeIfPresent`; route them through
    // the nil encoding so `.dropValue` and `.null` apply to optional properties too.
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Float?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Int8?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Int16?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: UInt?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: UInt8?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: UInt16?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }
    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws { try encodeOptional(value, forKey: key) }

    private mutating func encodeOptional<T: Encodable>(_ value: T?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { try encodeNil(forKey: key) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<
        NestedKey
    > {
        child(key).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        child(key).unkeyedContainer()
    }

    /// The superclass encodes into this same container's place, as Alamofire's encoder does
    /// (no `super` key).
    mutating func superEncoder() -> any Encoder { encoder }

    mutating func superEncoder(forKey key: Key) -> any Encoder { child(key) }
}

struct FormUnkeyedContainer: UnkeyedEncodingContainer {
    let encoder: FormValueEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }
    private(set) var count = 0

    init(encoder: FormValueEncoder) {
        self.encoder = encoder
        if case .none = encoder.existingComponent() { encoder.set(.array([])) }
    }

    private mutating func next() -> FormValueEncoder {
        defer { count += 1 }
        return encoder.child(key: FormCodingKey(intValue: count), element: .index(count))
    }

    mutating func encodeNil() throws { next().encodeNilValue() }
    mutating func encode(_ value: Bool) throws { next().setString(encoder.options.boolEncoding.encode(value)) }
    mutating func encode(_ value: String) throws { next().setString(value) }
    mutating func encode(_ value: Double) throws { next().setString(String(value)) }
    mutating func encode(_ value: Float) throws { next().setString(String(value)) }
    mutating func encode(_ value: Int) throws { next().setString(String(value)) }
    mutating func encode(_ value: Int8) throws { next().setString(String(value)) }
    mutating func encode(_ value: Int16) throws { next().setString(String(value)) }
    mutating func encode(_ value: Int32) throws { next().setString(String(value)) }
    mutating func encode(_ value: Int64) throws { next().setString(String(value)) }
    mutating func encode(_ value: UInt) throws { next().setString(String(value)) }
    mutating func encode(_ value: UInt8) throws { next().setString(String(value)) }
    mutating func encode(_ value: UInt16) throws { next().setString(String(value)) }
    mutating func encode(_ value: UInt32) throws { next().setString(String(value)) }
    mutating func encode(_ value: UInt64) throws { next().setString(String(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws { try next().encodeValue(value) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        next().container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        next().unkeyedContainer()
    }

    /// The superclass encodes at this container's own path, taking a place in the count, as
    /// Alamofire's encoder does.
    mutating func superEncoder() -> any Encoder {
        count += 1
        return encoder
    }
}

struct FormSingleValueContainer: SingleValueEncodingContainer {
    let encoder: FormValueEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }

    mutating func encodeNil() throws { encoder.encodeNilValue() }
    mutating func encode(_ value: Bool) throws { encoder.setString(encoder.options.boolEncoding.encode(value)) }
    mutating func encode(_ value: String) throws { encoder.setString(value) }
    mutating func encode(_ value: Double) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: Float) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: Int) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: Int8) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: Int16) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: Int32) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: Int64) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: UInt) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: UInt8) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: UInt16) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: UInt32) throws { encoder.setString(String(value)) }
    mutating func encode(_ value: UInt64) throws { encoder.setString(String(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws { try encoder.encodeValue(value) }
}
