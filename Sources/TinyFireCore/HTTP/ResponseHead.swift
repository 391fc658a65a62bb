/// One header field as it arrived on the wire: the name as sent (case preserved) and the value
/// with leading and trailing whitespace removed.
public struct RawHeaderField: Sendable, Equatable {
    /// The field name as the peer spelled it.
    public var name: String
    /// The field value, trimmed of optional whitespace.
    public var value: String

    /// Creates a field.
    /// - Parameters:
    ///   - name: the field name.
    ///   - value: the field value.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

/// How the body of a response is delimited (RFC 9112 §6.3).
public enum BodyFraming: Sendable, Equatable {
    /// No body at all: HEAD responses, 1xx, 204 and 304.
    case none
    /// Exactly this many bytes follow the head.
    case contentLength(UInt64)
    /// `Transfer-Encoding: chunked`.
    case chunked
    /// The body runs until the server closes the connection.
    case untilClose
}

/// The parsed head of an HTTP/1.x response: status line and header fields, plus the framing and
/// persistence decisions derived from them.
public struct ResponseHead: Sendable, Equatable {
    /// The minor HTTP version (`1` for HTTP/1.1, `0` for HTTP/1.0).
    public var minorVersion: Int
    /// The three-digit status code.
    public var status: Int
    /// The reason phrase, possibly empty.
    public var reason: String
    /// Header fields in arrival order.
    public var fields: [RawHeaderField]
    /// How the body is delimited.
    public var framing: BodyFraming
    /// Whether the connection may carry another request after this response.
    public var keepAlive: Bool

    /// The first value of a field, compared case-insensitively, or nil.
    /// - Parameter name: the field name, in any case.
    /// - Returns: the value of the first field with that name.
    public func firstValue(_ name: String) -> String? {
        fields.first { $0.name.caseInsensitiveEquals(name) }?.value
    }

    /// All values of a field, split on commas, trimmed, empty elements removed.
    /// - Parameter name: the field name, in any case.
    /// - Returns: the comma-separated elements of every field with that name, in order.
    public func listValues(_ name: String) -> [String] {
        var result: [String] = []
        for field in fields where field.name.caseInsensitiveEquals(name) {
            for element in field.value.split(separator: ",") {
                let trimmed = element.trimmingHTTPWhitespace()
                if !trimmed.isEmpty { result.append(trimmed) }
            }
        }
        return result
    }
}

extension String {
    /// ASCII case-insensitive comparison, as HTTP field names and tokens require.
    package func caseInsensitiveEquals(_ other: String) -> Bool {
        var a = self
        var b = other
        guard a.utf8.count == b.utf8.count else { return false }
        return a.withUTF8 { x in
            b.withUTF8 { y in
                for index in 0..<x.count where x[index] != y[index] {
                    guard asciiLower(x[index]) == asciiLower(y[index]) else { return false }
                }
                return true
            }
        }
    }
}

extension StringProtocol {
    /// The string without leading and trailing spaces and horizontal tabs (bytes, not
    /// grapheme clusters: HTTP whitespace is ASCII).
    package func trimmingHTTPWhitespace() -> String {
        let bytes = utf8
        var start: UTF8View.Index?
        var end = bytes.startIndex
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let next = bytes.index(after: index)
            if bytes[index] != 0x20 && bytes[index] != 0x09 {
                if start == nil { start = index }
                end = next
            }
            index = next
        }
        guard let start else { return "" }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }
}

/// Calls `body` with each comma-separated element of a field value, trimmed of spaces and
/// tabs (RFC 9110 §5.6.1 lists), as bytes.
@inline(__always)
package func forEachListElement(_ value: ArraySlice<UInt8>, keepEmpty: Bool, _ body: (ArraySlice<UInt8>) -> Void) {
    var start = value.startIndex
    while true {
        let end = value[start...].firstIndex(of: 0x2C) ?? value.endIndex
        var a = start
        var b = end
        while a < b && (value[a] == 0x20 || value[a] == 0x09) { a += 1 }
        while b > a && (value[b - 1] == 0x20 || value[b - 1] == 0x09) { b -= 1 }
        if keepEmpty || a < b { body(value[a..<b]) }
        guard end < value.endIndex else { return }
        start = end + 1
    }
}

@inline(__always)
package func asciiLower(_ byte: UInt8) -> UInt8 {
    (byte >= 0x41 && byte <= 0x5A) ? byte | 0x20 : byte
}
