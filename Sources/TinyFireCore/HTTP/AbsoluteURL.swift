/// A URL split into its RFC 3986 parts as written (percent-encoding kept), with reference
/// resolution (§5.2): what the engine needs to follow a `Location` and the agent to resolve a
/// manifest's image link, without Foundation.
///
/// Bytes that may not appear in a URL at all — controls, space, non-ASCII, and
/// `" < > \ ^ ` { | }` — are percent-encoded while parsing (as Foundation's `URL(string:)` does
/// since it encodes invalid characters), so a request line built from the parts is always valid.
/// Nothing else is normalized: case, percent-encoding and empty components stay as written, and
/// `absoluteString` recomposes them (§5.3).
package struct AbsoluteURL: Sendable, Equatable, CustomStringConvertible {
    /// The text and where each part is in it, in one immutable object: a URL is parsed with
    /// two allocations and copied (every request's spec is, several times) with one retain.
    private let storage: Storage

    private final class Storage: Sendable {
        let text: String
        let parts: Parts
        let port: Int?

        init(text: String, parts: Parts, port: Int?) {
            self.text = text
            self.parts = parts
            self.port = port
        }
    }

    /// The URL as text (RFC 3986 §5.3): what was parsed, invalid bytes percent-encoded.
    package var absoluteString: String { storage.text }
    /// The port, nil when the authority has none (or an empty one).
    package var port: Int? { storage.port }
    private var parts: Parts { storage.parts }

    private struct Parts: Sendable {
        var scheme: Range<String.Index>
        var authority: Range<String.Index>?
        var userinfo: Range<String.Index>?
        var host: Range<String.Index>?
        var path: Range<String.Index>
        var query: Range<String.Index>?
        var fragment: Range<String.Index>?
    }

    /// The scheme as written (compare it lowercased).
    package var scheme: String { String(absoluteString[parts.scheme]) }
    /// `userinfo@host:port` as written; nil when the URL has no `//` part.
    package var authority: String? { parts.authority.map { String(absoluteString[$0]) } }
    /// The userinfo before `@`, as written.
    package var userinfo: String? { parts.userinfo.map { String(absoluteString[$0]) } }
    /// The host as written, without the brackets of an IP literal; nil without an authority.
    package var host: String? { parts.host.map { String(absoluteString[$0]) } }
    /// The path, percent-encoded ("" for none).
    package var path: String { String(absoluteString[parts.path]) }
    /// The query without `?`, percent-encoded; nil when there is no `?`.
    package var query: String? { parts.query.map { String(absoluteString[$0]) } }
    /// The fragment without `#`; nil when there is no `#`.
    package var fragment: String? { parts.fragment.map { String(absoluteString[$0]) } }

    /// Parses an absolute URL (one with a scheme).
    /// - Returns: nil when `text` has no scheme, or its authority's port is not a number (a
    ///   port over 65535 parses; a request to it is refused with a message naming it), or an IP
    ///   literal is not closed.
    package init?(_ text: String) {
        guard let reference = Reference(text), let scheme = reference.scheme, let authority = reference.authorityParts
        else { return nil }
        storage = Storage(
            text: reference.text,
            parts: Parts(
                scheme: scheme, authority: reference.authority, userinfo: authority.userinfo, host: authority.host,
                path: reference.path, query: reference.query, fragment: reference.fragment),
            port: authority.port)
    }

    package static func == (lhs: AbsoluteURL, rhs: AbsoluteURL) -> Bool {
        lhs.storage === rhs.storage || lhs.absoluteString == rhs.absoluteString
    }

    package var description: String { absoluteString }

    /// `reference` resolved against this URL (RFC 3986 §5.2.2, strict: a reference with a
    /// scheme is taken as it is, whatever the scheme).
    /// - Returns: nil when `reference` does not parse (a malformed authority).
    package func resolving(_ text: String) -> AbsoluteURL? {
        guard let reference = Reference(text) else { return nil }
        func part(_ range: Range<String.Index>?) -> Substring? { range.map { reference.text[$0] } }
        var scheme = absoluteString[parts.scheme]
        var authority = parts.authority.map { absoluteString[$0] }
        var path = absoluteString[parts.path]
        var query = parts.query.map { absoluteString[$0] }
        let referencePath = reference.text[reference.path]
        if let referenceScheme = reference.scheme {
            scheme = reference.text[referenceScheme]
            authority = part(reference.authority)
            path = Substring(Self.removingDotSegments(String(referencePath)))
            query = part(reference.query)
        } else if let referenceAuthority = reference.authority {
            authority = reference.text[referenceAuthority]
            path = Substring(Self.removingDotSegments(String(referencePath)))
            query = part(reference.query)
        } else if referencePath.isEmpty {
            if let referenceQuery = reference.query { query = reference.text[referenceQuery] }
        } else {
            if referencePath.hasPrefix("/") {
                path = Substring(Self.removingDotSegments(String(referencePath)))
            } else {
                path = Substring(Self.removingDotSegments(merged(with: String(referencePath))))
            }
            query = part(reference.query)
        }
        var result = String(scheme) + ":"
        if let authority { result += "//" + authority }
        result += path
        if let query { result += "?" + query }
        if let fragment = part(reference.fragment) { result += "#" + fragment }
        return AbsoluteURL(result)
    }

    /// A relative path appended to this URL's directory (§5.2.3).
    private func merged(with relative: String) -> String {
        let path = absoluteString[parts.path]
        if parts.authority != nil && path.isEmpty { return "/" + relative }
        guard let slash = path.utf8.lastIndex(of: 0x2F) else { return relative }
        return String(path[...slash]) + relative
    }

    /// `.` and `..` segments interpreted and removed (§5.2.4).
    package static func removingDotSegments(_ path: String) -> String {
        var input = Substring(path)
        var output: [Substring] = []
        while !input.isEmpty {
            if input.hasPrefix("../") {
                input = input.dropFirst(3)
            } else if input.hasPrefix("./") {
                input = input.dropFirst(2)
            } else if input.hasPrefix("/./") {
                input = input.dropFirst(2)
            } else if input == "/." {
                input = "/"
            } else if input.hasPrefix("/../") {
                input = input.dropFirst(3)
                if !output.isEmpty { output.removeLast() }
            } else if input == "/.." {
                input = "/"
                if !output.isEmpty { output.removeLast() }
            } else if input == "." || input == ".." {
                input = ""
            } else {
                // The first segment, with its leading "/" if any, up to the next "/".
                let start = input.hasPrefix("/") ? input.index(after: input.startIndex) : input.startIndex
                let end = input[start...].firstIndex(of: "/") ?? input.endIndex
                output.append(input[..<end])
                input = input[end...]
            }
        }
        var result = ""
        for segment in output { result += segment }
        return result
    }
}

/// A URI reference split by RFC 3986's grammar (Appendix B), invalid bytes percent-encoded.
private struct Reference {
    /// The reference, invalid bytes percent-encoded; the parts are ranges of it.
    let text: String
    var scheme: Range<String.Index>?
    var authority: Range<String.Index>?
    var path: Range<String.Index>
    var query: Range<String.Index>?
    var fragment: Range<String.Index>?
    /// The authority's userinfo, host and port; nil when the authority is malformed.
    var authorityParts: (userinfo: Range<String.Index>?, host: Range<String.Index>?, port: Int?)?

    /// The parts as byte offsets, found in one pass over the UTF-8 bytes (the delimiters are
    /// ASCII; Character-wise searching costs tens of instructions a byte, and every request
    /// parses its URL).
    private struct Offsets {
        var invalid = false
        var scheme: Range<Int>?
        var authority: Range<Int>?
        var path = 0..<0
        var query: Range<Int>?
        var fragment: Range<Int>?
        var userinfo: Range<Int>?
        var host: Range<Int>?
        var port: Int?
        var malformedAuthority = false
    }

    init?(_ raw: String) {
        var text = raw
        var offsets = Self.scan(text)
        if offsets.invalid {
            text = Self.encodingInvalidBytes(raw)
            offsets = Self.scan(text)
        }
        self.text = text
        let utf8 = text.utf8
        func index(_ offset: Int) -> String.Index { utf8.index(utf8.startIndex, offsetBy: offset) }
        func range(_ offsets: Range<Int>?) -> Range<String.Index>? {
            offsets.map { index($0.lowerBound)..<index($0.upperBound) }
        }
        scheme = range(offsets.scheme)
        authority = range(offsets.authority)
        path = index(offsets.path.lowerBound)..<index(offsets.path.upperBound)
        query = range(offsets.query)
        fragment = range(offsets.fragment)
        authorityParts = offsets.malformedAuthority ? nil : (range(offsets.userinfo), range(offsets.host), offsets.port)
    }

    private static func scan(_ text: String) -> Offsets {
        var text = text
        if let offsets = text.utf8.withContiguousStorageIfAvailable({ scan($0) }) { return offsets }
        text.makeContiguousUTF8()
        return text.utf8.withContiguousStorageIfAvailable { scan($0) } ?? Offsets()
    }

    private static func scan(_ bytes: UnsafeBufferPointer<UInt8>) -> Offsets {
        var offsets = Offsets()
        let count = bytes.count
        var rest = 0
        var end = count
        var firstDelimiter = count
        for i in 0..<count {
            let byte = bytes[i]
            if isInvalid(byte) {
                offsets.invalid = true
                return offsets
            }
            if firstDelimiter == count && (byte == 0x3A || byte == 0x2F || byte == 0x3F || byte == 0x23) { firstDelimiter = i }
        }
        // The scheme: what comes before the first ":" when no "/", "?" or "#" comes first.
        if firstDelimiter < count && bytes[firstDelimiter] == 0x3A && isScheme(bytes, 0..<firstDelimiter) {
            offsets.scheme = 0..<firstDelimiter
            rest = firstDelimiter + 1
        }
        if let hash = firstIndex(of: 0x23, in: bytes, rest..<count) {
            offsets.fragment = hash + 1..<count
            end = hash
        }
        if let mark = firstIndex(of: 0x3F, in: bytes, rest..<end) {
            offsets.query = mark + 1..<end
            end = mark
        }
        if end - rest >= 2 && bytes[rest] == 0x2F && bytes[rest + 1] == 0x2F {
            let authorityEnd = firstIndex(of: 0x2F, in: bytes, rest + 2..<end) ?? end
            offsets.authority = rest + 2..<authorityEnd
            splitAuthority(bytes, rest + 2..<authorityEnd, into: &offsets)
            rest = authorityEnd
        }
        offsets.path = rest..<end
        return offsets
    }

    /// `userinfo@host:port`, the host without the brackets of an IP literal.
    private static func splitAuthority(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, into offsets: inout Offsets) {
        var hostStart = range.lowerBound
        if let at = lastIndex(of: 0x40, in: bytes, range) {
            offsets.userinfo = range.lowerBound..<at
            hostStart = at + 1
        }
        var portStart: Int?
        if hostStart < range.upperBound && bytes[hostStart] == 0x5B {
            guard let close = firstIndex(of: 0x5D, in: bytes, hostStart..<range.upperBound) else {
                offsets.malformedAuthority = true
                return
            }
            offsets.host = hostStart + 1..<close
            if close + 1 < range.upperBound {
                guard bytes[close + 1] == 0x3A else {
                    offsets.malformedAuthority = true
                    return
                }
                portStart = close + 2
            }
        } else if let colon = lastIndex(of: 0x3A, in: bytes, hostStart..<range.upperBound) {
            offsets.host = hostStart..<colon
            portStart = colon + 1
        } else {
            offsets.host = hostStart..<range.upperBound
        }
        if let portStart, portStart < range.upperBound {
            var value = 0
            for i in portStart..<range.upperBound {
                let byte = bytes[i]
                guard byte >= 0x30 && byte <= 0x39, value <= Int(Int32.max) / 10 else {
                    offsets.malformedAuthority = true
                    return
                }
                value = value * 10 + Int(byte - 0x30)
            }
            offsets.port = value
        }
    }

    private static func firstIndex(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Int? {
        for i in range where bytes[i] == byte { return i }
        return nil
    }

    private static func lastIndex(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Int? {
        for i in range.reversed() where bytes[i] == byte { return i }
        return nil
    }

    /// ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
    private static func isScheme(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        guard !range.isEmpty, isLetter(bytes[range.lowerBound]) else { return false }
        for i in range {
            let byte = bytes[i]
            guard isLetter(byte) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2B || byte == 0x2D || byte == 0x2E else {
                return false
            }
        }
        return true
    }

    private static func isLetter(_ byte: UInt8) -> Bool { (byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x7A }

    /// Bytes no URL may hold (controls, space, DEL, non-ASCII, `" < > \ ^ ` { | }`) as `%XX`.
    static func encodingInvalidBytes(_ text: String) -> String {
        let digits: [UInt8] = Array("0123456789ABCDEF".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count + 16)
        for byte in text.utf8 {
            if isInvalid(byte) {
                bytes.append(0x25)
                bytes.append(digits[Int(byte >> 4)])
                bytes.append(digits[Int(byte & 15)])
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func isInvalid(_ byte: UInt8) -> Bool {
        switch byte {
        case 0...0x20, 0x7F...0xFF: return true
        case 0x22, 0x3C, 0x3E, 0x5C, 0x5E, 0x60, 0x7B, 0x7C, 0x7D: return true
        default: return false
        }
    }
}
