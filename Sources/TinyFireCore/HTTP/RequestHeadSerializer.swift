import HTTPTypes

/// How a request body is framed on the wire.
package enum RequestBodyFraming: Sendable, Equatable {
    /// No body, and no `Content-Length` (GET, HEAD, …).
    case none
    /// `Content-Length: n`.
    case contentLength(UInt64)
    /// `Transfer-Encoding: chunked` (length unknown up front).
    case chunked
}

/// A request head that cannot be written safely.
package enum RequestHeadError: Error, Equatable {
    case invalidMethod(String)
    case invalidTarget(String)
    case invalidHeader(String)
    case tooLarge(limit: Int)
}

/// What a request head leaves out or adds on the way to the wire.
package struct RequestHeadOptions: Sendable, Equatable {
    /// `Authorization`, `Cookie` and `Proxy-Authorization` stay home (a redirect to another
    /// origin).
    package var stripsCredentials = false
    /// The default `Accept-Encoding` is not sent (automatic decompression is off).
    package var dropsDefaultAcceptEncoding = false
    /// `Expect: 100-continue` is added.
    package var expectsContinue = false
    /// The caller's `Proxy-Authorization` is not sent: the head goes to an origin, or to a
    /// proxy whose configured credentials replace it.
    package var dropsProxyAuthorization = false

    package init(dropsDefaultAcceptEncoding: Bool = false) {
        self.dropsDefaultAcceptEncoding = dropsDefaultAcceptEncoding
    }

    /// Whether a credential field stays home.
    package func dropsCredential(_ name: HTTPField.Name) -> Bool {
        if name == .proxyAuthorization { return stripsCredentials || dropsProxyAuthorization }
        return stripsCredentials && (name == .authorization || name == .cookie)
    }

    /// Whether a session default goes out beside the request's own `fields`: the request does
    /// not set it, and it is not the `Accept-Encoding` automatic decompression would need.
    package func sendsDefault(_ name: HTTPField.Name, over fields: HTTPFields) -> Bool {
        !fields.contains(name) && !(dropsDefaultAcceptEncoding && name == .acceptEncoding)
    }
}

/// Writes an HTTP/1.1 request head (request line and header section) as bytes, straight from
/// the request's fields and the session's defaults (no merged copy is built).
///
/// `Host` comes from the authority and is written first; then the request's fields, then each
/// default the request does not set, then `Expect` when asked, then `Content-Length` or
/// `Transfer-Encoding` from the body framing. Caller-supplied `Host`, `Content-Length`,
/// `Transfer-Encoding` and `Connection` are dropped, so the framing can never disagree with what
/// is sent and the connection's persistence is the engine's.
package enum RequestHeadSerializer {
    /// Serializes a head.
    /// - Parameters:
    ///   - method: the method (a token).
    ///   - target: the request target (path and query).
    ///   - authority: `host[:port]` for `Host`.
    ///   - fields: the request's own fields, in order.
    ///   - defaults: the session's default fields, and their lines written once.
    ///   - options: what is left out or added.
    ///   - framing: how the body that follows is delimited.
    ///   - limit: bound on the head's size, in bytes (the header block limit).
    ///   - buffer: receives the bytes (cleared first, capacity kept).
    /// - Throws: `RequestHeadError` for a method, target or field that would corrupt the
    ///   message (CR, LF, NUL) or a head above `limit`.
    /// - Parameter proxyAuthorization: a `Proxy-Authorization` value to add (a request in
    ///   absolute form to a proxy with credentials); kept out of `options`, so the head the app
    ///   sees (`SentRequestHead`) never holds it.
    package static func serialize(
        method: String, target: String, authority: String, fields: HTTPFields, defaults: DefaultHeaderLines, options: RequestHeadOptions,
        proxyAuthorization: String? = nil, framing: RequestBodyFraming, limit: Int, into buffer: inout [UInt8]
    ) throws(RequestHeadError) {
        buffer.removeAll(keepingCapacity: true)
        buffer.reserveCapacity(512)
        guard !method.isEmpty, method.utf8.allSatisfy(isTokenByte) else { throw .invalidMethod(method) }
        guard !target.isEmpty, target.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F }) else {
            throw .invalidTarget(target)
        }
        buffer.append(contentsOf: method.utf8)
        buffer.append(0x20)
        buffer.append(contentsOf: target.utf8)
        buffer.append(contentsOf: " HTTP/1.1\r\n".utf8)
        guard authority.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F }) else { throw .invalidHeader("Host") }
        append(name: "Host", value: authority, to: &buffer)
        for field in fields where !isDropped(field.name, options) {
            append(field, to: &buffer)
        }
        if !options.stripsCredentials && !(options.dropsProxyAuthorization && defaults.hasProxyAuthorization)
            && (fields.isEmpty || !defaults.fields.contains(where: { fields.contains($0.name) }))
        {
            // The usual case: every default goes out as the session wrote it once.
            buffer.append(contentsOf: defaults.lines)
        } else {
            for field in defaults.fields where !isDropped(field.name, options) && options.sendsDefault(field.name, over: fields) {
                append(field, to: &buffer)
            }
        }
        if let proxyAuthorization { append(name: "Proxy-Authorization", value: proxyAuthorization, to: &buffer) }
        if options.expectsContinue { append(name: "Expect", value: "100-continue", to: &buffer) }
        switch framing {
        case .none: break
        case .contentLength(let length): append(name: "Content-Length", value: String(length), to: &buffer)
        case .chunked: append(name: "Transfer-Encoding", value: "chunked", to: &buffer)
        }
        buffer.append(0x0D)
        buffer.append(0x0A)
        guard buffer.count <= limit else { throw .tooLarge(limit: limit) }
    }

    /// The fields the head never carries from the caller, and credentials when stripped.
    package static func isDropped(_ name: HTTPField.Name, _ options: RequestHeadOptions) -> Bool {
        if name == .contentLength || name == .transferEncoding || name == .connection || name.canonicalName == "host" {
            return true
        }
        return options.dropsCredential(name)
    }

    /// Writes a field line. Its bytes need no check: swift-http-types turns CR, LF and NUL in a
    /// value into spaces when the field is made, and a name is a validated token.
    package static func append(_ field: HTTPField, to buffer: inout [UInt8]) {
        append(name: field.name.rawName, value: field.value, to: &buffer)
    }

    private static func append(name: String, value: String, to buffer: inout [UInt8]) {
        buffer.append(contentsOf: name.utf8)
        buffer.append(0x3A)
        buffer.append(0x20)
        buffer.append(contentsOf: value.utf8)
        buffer.append(0x0D)
        buffer.append(0x0A)
    }
}

/// A session's default header fields, with their lines serialized once: a request that sets
/// none of them and keeps its credentials gets the bytes as they are.
package struct DefaultHeaderLines: Sendable {
    package let fields: HTTPFields
    /// The lines of every default that is sent.
    package let lines: [UInt8]
    /// A default `Proxy-Authorization` is among them (dropped when the head goes to an origin).
    package let hasProxyAuthorization: Bool

    /// - Parameters:
    ///   - fields: the session's default fields.
    ///   - dropsAcceptEncoding: automatic decompression is off: no default `Accept-Encoding`.
    package init(_ fields: HTTPFields, dropsAcceptEncoding: Bool) {
        self.fields = fields
        var bytes: [UInt8] = []
        let options = RequestHeadOptions(dropsDefaultAcceptEncoding: dropsAcceptEncoding)
        for field in fields
        where !RequestHeadSerializer.isDropped(field.name, options) && options.sendsDefault(field.name, over: HTTPFields()) {
            RequestHeadSerializer.append(field, to: &bytes)
        }
        lines = bytes
        hasProxyAuthorization = fields.contains(.proxyAuthorization)
    }
}

/// A request head as it went to the wire, kept as its parts: `httpRequest` builds the
/// `HTTPRequest` (the request's fields, the defaults it did not set, `Expect`) only when asked
/// for, so the engine builds one request shape per hop, the bytes.
package struct SentRequestHead: Sendable {
    package var method: HTTPMethod
    package var scheme: String
    package var authority: String
    package var path: String
    package var fields: HTTPFields
    package var defaults: HTTPFields
    package var options: RequestHeadOptions

    package init(
        method: HTTPMethod, scheme: String, authority: String, path: String, fields: HTTPFields, defaults: HTTPFields,
        options: RequestHeadOptions
    ) {
        self.method = method
        self.scheme = scheme
        self.authority = authority
        self.path = path
        self.fields = fields
        self.defaults = defaults
        self.options = options
    }

    /// The head as swift-http-types' request.
    package var httpRequest: HTTPRequest {
        var merged = HTTPFields()
        for field in fields where !isDropped(field.name) { merged.append(field) }
        for field in defaults where !isDropped(field.name) && options.sendsDefault(field.name, over: fields) {
            merged.append(field)
        }
        if options.expectsContinue { merged[.expect] = "100-continue" }
        return HTTPRequest(
            method: HTTPRequest.Method(method.rawValue) ?? .get, scheme: scheme, authority: authority, path: path,
            headerFields: merged)
    }

    /// What `httpRequest` leaves out: `Connection` and stripped credentials (the framing fields
    /// stay, as the caller set them; the bytes carry the engine's).
    private func isDropped(_ name: HTTPField.Name) -> Bool {
        name == .connection || options.dropsCredential(name)
    }
}
