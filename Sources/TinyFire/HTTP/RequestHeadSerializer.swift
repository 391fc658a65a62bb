import HTTPTypes

/// How a request body is framed on the wire.
enum RequestBodyFraming: Sendable, Equatable {
    /// No body, and no `Content-Length` (GET, HEAD, …).
    case none
    /// `Content-Length: n`.
    case contentLength(UInt64)
    /// `Transfer-Encoding: chunked` (length unknown up front).
    case chunked
}

/// A request head that cannot be written safely.
enum RequestHeadError: Error, Equatable {
    case invalidMethod(String)
    case invalidTarget(String)
    case invalidHeader(String)
    case tooLarge(limit: Int)
}

/// Writes an HTTP/1.1 request head (request line and header section) as bytes.
///
/// `Host` comes from the request's authority and is written first; `Content-Length` or
/// `Transfer-Encoding` from the body framing; any caller-supplied copies of those three fields
/// are dropped so the framing can never disagree with what is sent.
enum RequestHeadSerializer {
    /// Serializes a head.
    /// - Parameters:
    ///   - request: method, authority, path and header fields.
    ///   - framing: how the body that follows is delimited.
    ///   - limit: bound on the head's size, in bytes (the header block limit).
    ///   - buffer: receives the bytes (cleared first, capacity kept).
    /// - Throws: `RequestHeadError` for a method, target or field that would corrupt the
    ///   message (CR, LF, NUL) or a head above `limit`.
    static func serialize(
        _ request: HTTPRequest, framing: RequestBodyFraming, limit: Int, into buffer: inout [UInt8]
    ) throws(RequestHeadError) {
        buffer.removeAll(keepingCapacity: true)
        let method = request.method.rawValue
        guard !method.isEmpty, method.utf8.allSatisfy(isTokenByte) else { throw .invalidMethod(method) }
        let target = request.path ?? "/"
        guard !target.isEmpty, target.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F }) else {
            throw .invalidTarget(target)
        }
        buffer.append(contentsOf: method.utf8)
        buffer.append(0x20)
        buffer.append(contentsOf: target.utf8)
        buffer.append(contentsOf: " HTTP/1.1\r\n".utf8)
        if let authority = request.authority {
            guard authority.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F }) else { throw .invalidHeader("Host") }
            append(name: "Host", value: authority, to: &buffer)
        }
        for field in request.headerFields {
            let name = field.name
            if name == .contentLength || name == .transferEncoding || name.canonicalName == "host" {
                continue
            }
            let value = field.value
            guard !value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) else {
                throw .invalidHeader(name.rawName)
            }
            append(name: name.rawName, value: value, to: &buffer)
        }
        switch framing {
        case .none: break
        case .contentLength(let length): append(name: "Content-Length", value: String(length), to: &buffer)
        case .chunked: append(name: "Transfer-Encoding", value: "chunked", to: &buffer)
        }
        buffer.append(0x0D)
        buffer.append(0x0A)
        guard buffer.count <= limit else { throw .tooLarge(limit: limit) }
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
