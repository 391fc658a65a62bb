import HTTPTypes

/// An order-preserving, case-insensitive collection of header fields, as in Alamofire, stored
/// as swift-http-types' `HTTPFields`.
public struct HTTPHeaders: Sendable, Equatable, ExpressibleByDictionaryLiteral, Sequence, CustomStringConvertible {
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

    /// Creates headers from a dictionary (order is the dictionary's).
    /// - Parameter dictionary: names to values.
    public init(_ dictionary: [String: String]) {
        self.init()
        for (name, value) in dictionary { add(name: name, value: value) }
    }

    /// Appends a field, keeping any earlier one with the same name. An invalid name is ignored.
    /// - Parameters:
    ///   - name: the field name.
    ///   - value: the field value.
    public mutating func add(name: String, value: String) {
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
    func merging(defaults other: HTTPHeaders) -> HTTPHeaders {
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

    /// Iterates the fields in order.
    public func makeIterator() -> HTTPFields.Iterator { fields.makeIterator() }

    /// `Name: value` lines.
    public var description: String {
        fields.map { "\($0.name.rawName): \($0.value)" }.joined(separator: "\n")
    }

    /// TinyFire's version, as sent in `User-Agent`.
    public static let tinyFireVersion = "0.1.0"

    /// `Accept-Encoding: gzip, deflate`, `User-Agent: TinyFire/<version> (Linux; <arch>)`.
    public static let defaultHeaders: HTTPHeaders = [
        "Accept-Encoding": "gzip, deflate",
        "User-Agent": "TinyFire/\(tinyFireVersion) (Linux; \(machineArchitecture))",
    ]

    static var machineArchitecture: String {
        #if arch(x86_64)
            return "x86_64"
        #elseif arch(arm64)
            return "aarch64"
        #elseif arch(arm)
            return "armv7"
        #else
            return "unknown"
        #endif
    }
}
