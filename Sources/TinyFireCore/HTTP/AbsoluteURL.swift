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
    /// The scheme as written (compare it lowercased).
    package private(set) var scheme: String
    /// `userinfo@host:port` as written; nil when the URL has no `//` part.
    package private(set) var authority: String?
    /// The path, percent-encoded ("" for none).
    package private(set) var path: String
    /// The query without `?`, percent-encoded; nil when there is no `?`.
    package private(set) var query: String?
    /// The fragment without `#`; nil when there is no `#`.
    package private(set) var fragment: String?
    /// The host as written, without the brackets of an IP literal; nil without an authority.
    package private(set) var host: String?
    /// The port, nil when the authority has none (or an empty one).
    package private(set) var port: Int?
    /// The userinfo before `@`, as written.
    package private(set) var userinfo: String?

    /// Parses an absolute URL (one with a scheme).
    /// - Returns: nil when `text` has no scheme, or its authority's port is not a number (a
    ///   port over 65535 parses; a request to it is refused with a message naming it), or an IP
    ///   literal is not closed.
    package init?(_ text: String) {
        guard let reference = Reference(text), let scheme = reference.scheme else { return nil }
        self.init(scheme: scheme, reference: reference)
    }

    private init?(scheme: String, reference: Reference) {
        self.scheme = scheme
        authority = reference.authority
        path = reference.path
        query = reference.query
        fragment = reference.fragment
        guard splitAuthority() else { return nil }
    }

    /// Splits `authority` into userinfo, host and port; false when it is malformed.
    private mutating func splitAuthority() -> Bool {
        userinfo = nil
        host = nil
        port = nil
        guard let authority else { return true }
        var rest = Substring(authority)
        if let at = rest.lastIndex(of: "@") {
            userinfo = String(rest[..<at])
            rest = rest[rest.index(after: at)...]
        }
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return false }
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return false }
                portText = after.dropFirst()
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            portText = rest[rest.index(after: colon)...]
        } else {
            host = String(rest)
        }
        if let portText, !portText.isEmpty {
            var value = 0
            for byte in portText.utf8 {
                guard byte >= 0x30 && byte <= 0x39 else { return false }
                value = value * 10 + Int(byte - 0x30)
                guard value <= Int(Int32.max) else { return false }
            }
            port = value
        }
        return true
    }

    /// The URL as text (RFC 3986 §5.3).
    package var absoluteString: String {
        var text = scheme + ":"
        if let authority { text += "//" + authority }
        text += path
        if let query { text += "?" + query }
        if let fragment { text += "#" + fragment }
        return text
    }

    package var description: String { absoluteString }

    /// `reference` resolved against this URL (RFC 3986 §5.2.2, strict: a reference with a
    /// scheme is taken as it is, whatever the scheme).
    /// - Returns: nil when `reference` does not parse (a malformed authority).
    package func resolving(_ text: String) -> AbsoluteURL? {
        guard let reference = Reference(text) else { return nil }
        var target = self
        target.fragment = reference.fragment
        if let scheme = reference.scheme {
            target.scheme = scheme
            target.authority = reference.authority
            target.path = Self.removingDotSegments(reference.path)
            target.query = reference.query
        } else if let authority = reference.authority {
            target.authority = authority
            target.path = Self.removingDotSegments(reference.path)
            target.query = reference.query
        } else if reference.path.isEmpty {
            if let query = reference.query { target.query = query }
        } else {
            if reference.path.hasPrefix("/") {
                target.path = Self.removingDotSegments(reference.path)
            } else {
                target.path = Self.removingDotSegments(merged(with: reference.path))
            }
            target.query = reference.query
        }
        guard target.splitAuthority() else { return nil }
        return target
    }

    /// A relative path appended to this URL's directory (§5.2.3).
    private func merged(with relative: String) -> String {
        if authority != nil && path.isEmpty { return "/" + relative }
        guard let slash = path.lastIndex(of: "/") else { return relative }
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
    var scheme: String?
    var authority: String?
    var path: String
    var query: String?
    var fragment: String?

    init?(_ raw: String) {
        let text = Self.encodingInvalidBytes(raw)
        var rest = Substring(text)
        if let colon = rest.firstIndex(of: ":"), Self.isScheme(rest[..<colon]) {
            scheme = String(rest[..<colon])
            rest = rest[rest.index(after: colon)...]
        }
        if let hash = rest.firstIndex(of: "#") {
            fragment = String(rest[rest.index(after: hash)...])
            rest = rest[..<hash]
        }
        if let mark = rest.firstIndex(of: "?") {
            query = String(rest[rest.index(after: mark)...])
            rest = rest[..<mark]
        }
        if rest.hasPrefix("//") {
            rest = rest.dropFirst(2)
            let end = rest.firstIndex(of: "/") ?? rest.endIndex
            authority = String(rest[..<end])
            rest = rest[end...]
        }
        path = String(rest)
    }

    /// ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
    private static func isScheme(_ text: Substring) -> Bool {
        guard let first = text.utf8.first, isLetter(first) else { return false }
        for byte in text.utf8 {
            guard isLetter(byte) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2B || byte == 0x2D || byte == 0x2E else {
                return false
            }
        }
        return true
    }

    private static func isLetter(_ byte: UInt8) -> Bool { (byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x7A }

    /// Bytes no URL may hold (controls, space, DEL, non-ASCII, `" < > \ ^ ` { | }`) as `%XX`.
    static func encodingInvalidBytes(_ text: String) -> String {
        guard text.utf8.contains(where: isInvalid) else { return text }
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
