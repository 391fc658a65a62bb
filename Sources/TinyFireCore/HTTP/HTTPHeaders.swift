import HTTPTypes

/// An order-preserving, case-insensitive collection of header fields, as in Alamofire, stored
/// as swift-http-types' `HTTPFields`.
public struct HTTPHeaders: Sendable, Hashable, ExpressibleByDictionaryLiteral, ExpressibleByArrayLiteral, RandomAccessCollection,
    CustomStringConvertible
{
    /// The underlying fields.
    public var fields: HTTPFields

    /// Creates empty headers.
    public init() {
        fields = HTTPFields()
    }

    /// Wraps existing fields.
    /// - Parameter fields: the fields, in order.
    public init(_ fields: HTTPFields) {
        self.fields = fields
    }

    /// Creates headers from name/value pairs; a name that is not a valid token is skipped.
    /// - Parameter elements: pairs in order.
    public init(dictionaryLiteral elements: (String, String)...) {
        self.init()
        for (name, value) in elements { add(name: name, value: value) }
    }

    /// Creates headers from `HTTPHeader` values, in order.
    /// - Parameter elements: the headers.
    public init(arrayLiteral elements: HTTPHeader...) {
        self.init(elements)
    }

    /// Creates headers from `HTTPHeader` values, in order.
    /// - Parameter headers: the headers.
    public init(_ headers: [HTTPHeader]) {
        self.init()
        for header in headers { add(header) }
    }

    /// Adds a header as Alamofire does: the first field with the same name (any case) is
    /// replaced in place, name and value; otherwise the header is appended.
    /// - Parameter header: the header.
    public mutating func add(_ header: HTTPHeader) {
        add(name: header.name, value: header.value)
    }

    /// Appends a header, keeping earlier ones with the same name (a field sent more than once).
    /// Not in Alamofire, whose `add` never repeats a name.
    /// - Parameter header: the header.
    public mutating func append(_ header: HTTPHeader) {
        append(name: header.name, value: header.value)
    }

    /// Replaces every field with the header's name by the header, or appends it.
    /// - Parameter header: the header.
    public mutating func update(_ header: HTTPHeader) {
        update(name: header.name, value: header.value)
    }

    /// The headers as `HTTPHeader` values, in order.
    public var headers: [HTTPHeader] {
        fields.map { HTTPHeader(name: $0.name.rawName, value: $0.value) }
    }

    /// Creates headers from a dictionary (order is the dictionary's).
    /// - Parameter dictionary: names to values.
    public init(_ dictionary: [String: String]) {
        self.init()
        for (name, value) in dictionary { add(name: name, value: value) }
    }

    /// Adds a field as Alamofire does: the first field with the same name (any case) is replaced
    /// in place, name and value (`add(name: "ACCEPT", …)` on headers holding `Accept` leaves one
    /// field, spelled `ACCEPT`); otherwise the field is appended. An invalid name is ignored.
    /// - Parameters:
    ///   - name: the field name.
    ///   - value: the field value.
    public mutating func add(name: String, value: String) {
        guard let fieldName = HTTPField.Name(name) else { return }
        if let index = fields.firstIndex(where: { $0.name == fieldName }) {
            fields[index] = HTTPField(name: fieldName, value: value)
        } else {
            fields.append(HTTPField(name: fieldName, value: value))
        }
    }

    /// Appends a field, keeping any earlier one with the same name (a field sent more than
    /// once, as curl's repeated `-H` sends it). An invalid name is ignored.
    /// - Parameters:
    ///   - name: the field name.
    ///   - value: the field value.
    public mutating func append(name: String, value: String) {
        guard let fieldName = HTTPField.Name(name) else { return }
        fields.append(HTTPField(name: fieldName, value: value))
    }

    /// Replaces every field named `name` with one field, or appends it.
    /// - Parameters:
    ///   - name: the field name.
    ///   - value: the new value.
    public mutating func update(name: String, value: String) {
        guard let fieldName = HTTPField.Name(name) else { return }
        fields[fieldName] = value
    }

    /// Removes every field named `name`.
    /// - Parameter name: the field name, any case.
    public mutating func remove(name: String) {
        guard let fieldName = HTTPField.Name(name) else { return }
        fields[fieldName] = nil
    }

    /// The first value of `name`, or nil.
    /// - Parameter name: the field name, any case.
    /// - Returns: the value.
    public func value(for name: String) -> String? {
        guard let fieldName = HTTPField.Name(name) else { return nil }
        return fields[fieldName]
    }

    /// The first value of `name`; setting replaces all (nil removes).
    public subscript(_ name: String) -> String? {
        get { value(for: name) }
        set {
            if let newValue { update(name: name, value: newValue) } else { remove(name: name) }
        }
    }

    /// Adds every field of `other` whose name is not already present.
    package func merging(defaults other: HTTPHeaders) -> HTTPHeaders {
        var result = self
        for field in other.fields where !fields.contains(field.name) {
            result.fields.append(field)
        }
        return result
    }

    /// The fields as a dictionary; repeated names are joined with ", ".
    public var dictionary: [String: String] {
        var result: [String: String] = [:]
        for field in fields {
            let name = field.name.rawName
            if let existing = result[name] { result[name] = existing + ", " + field.value } else { result[name] = field.value }
        }
        return result
    }

    /// The first position (0).
    public var startIndex: Int { fields.startIndex }
    /// One past the last position (the number of fields).
    public var endIndex: Int { fields.endIndex }

    /// The header at `position`, in the order the fields were added.
    /// - Parameter position: a position in `startIndex..<endIndex`.
    public subscript(position: Int) -> HTTPHeader {
        let field = fields[position]
        return HTTPHeader(name: field.name.rawName, value: field.value)
    }

    /// Sorts the headers by name, case-insensitively, keeping the order of equal names.
    public mutating func sort() {
        self = sorted()
    }

    /// The headers sorted by name, case-insensitively, keeping the order of equal names.
    /// - Returns: the sorted headers.
    public func sorted() -> HTTPHeaders {
        let order = fields.enumerated().sorted { left, right in
            let (a, b) = (left.element.name.canonicalName, right.element.name.canonicalName)
            return a == b ? left.offset < right.offset : a < b
        }
        var result = HTTPHeaders()
        result.fields = HTTPFields(order.map { $0.element })
        return result
    }

    /// Equal when the fields are, in the same order.
    public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool { lhs.fields == rhs.fields }

    /// Hashes names (case-insensitively) and values in order.
    public func hash(into hasher: inout Hasher) {
        for field in fields {
            hasher.combine(field.name.canonicalName)
            hasher.combine(field.value)
        }
    }

    /// `Name: value` lines.
    public var description: String {
        fields.map { "\($0.name.rawName): \($0.value)" }.joined(separator: "\n")
    }

    /// TinyFire's version, as sent in `User-Agent`.
    public static let tinyFireVersion = "0.1.0"
}

/// One header field, as Alamofire's `HTTPHeader`, with constructors for the common ones.
public struct HTTPHeader: Sendable, Hashable, CustomStringConvertible {
    /// The field name.
    public let name: String
    /// The field value.
    public let value: String

    /// Creates a header.
    /// - Parameters:
    ///   - name: the field name.
    ///   - value: the field value.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// `name: value`.
    public var description: String { "\(name): \(value)" }

    /// `Accept`.
    /// - Parameter value: media ranges.
    /// - Returns: the header.
    public static func accept(_ value: String) -> HTTPHeader { HTTPHeader(name: "Accept", value: value) }

    /// `Accept-Charset`.
    /// - Parameter value: charsets.
    /// - Returns: the header.
    public static func acceptCharset(_ value: String) -> HTTPHeader { HTTPHeader(name: "Accept-Charset", value: value) }

    /// `Accept-Language`.
    /// - Parameter value: language ranges.
    /// - Returns: the header.
    public static func acceptLanguage(_ value: String) -> HTTPHeader { HTTPHeader(name: "Accept-Language", value: value) }

    /// `Accept-Encoding`.
    /// - Parameter value: codings.
    /// - Returns: the header.
    public static func acceptEncoding(_ value: String) -> HTTPHeader { HTTPHeader(name: "Accept-Encoding", value: value) }

    /// `Authorization: Bearer token`.
    /// - Parameter bearerToken: the token.
    /// - Returns: the header.
    public static func authorization(bearerToken: String) -> HTTPHeader { authorization("Bearer \(bearerToken)") }

    /// `Authorization` with any value.
    /// - Parameter value: the credentials.
    /// - Returns: the header.
    public static func authorization(_ value: String) -> HTTPHeader { HTTPHeader(name: "Authorization", value: value) }

    /// `Content-Disposition`.
    /// - Parameter value: the disposition.
    /// - Returns: the header.
    public static func contentDisposition(_ value: String) -> HTTPHeader { HTTPHeader(name: "Content-Disposition", value: value) }

    /// `Content-Encoding`.
    /// - Parameter value: the coding.
    /// - Returns: the header.
    public static func contentEncoding(_ value: String) -> HTTPHeader { HTTPHeader(name: "Content-Encoding", value: value) }

    /// `Content-Type`.
    /// - Parameter value: the media type.
    /// - Returns: the header.
    public static func contentType(_ value: String) -> HTTPHeader { HTTPHeader(name: "Content-Type", value: value) }

    /// `User-Agent`.
    /// - Parameter value: the product tokens.
    /// - Returns: the header.
    public static func userAgent(_ value: String) -> HTTPHeader { HTTPHeader(name: "User-Agent", value: value) }
}
