/// A response that does not follow HTTP/1.1 (RFC 9112), as found by `ResponseParser`.
///
/// Each case carries what is needed to say exactly what was wrong; `description` is the message.
public enum HTTPParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The status line and header fields did not end within the configured limit.
    case headerBlockTooLarge(limit: Int)
    /// The status line is not `HTTP/1.x NNN reason`.
    case invalidStatusLine(String)
    /// A header line is malformed: no colon, a bad name, whitespace before the colon, or a
    /// forbidden character in the value.
    case invalidHeaderLine(String)
    /// A `Content-Length` value is not a decimal number.
    case invalidContentLength(String)
    /// `Content-Length` appears more than once with different values.
    case conflictingContentLength([String])
    /// Both `Transfer-Encoding` and `Content-Length` are present (request smuggling risk).
    case contentLengthWithTransferEncoding
    /// A transfer coding other than `chunked` (or `chunked` applied twice).
    case unsupportedTransferCoding(String)
    /// A chunk-size line is not hexadecimal, or overflows 64 bits.
    case invalidChunkSize(String)
    /// A chunk-size line (size plus extensions) exceeds the limit.
    case chunkLineTooLong(limit: Int)
    /// A chunk's data was not followed by CRLF.
    case missingChunkTerminator
    /// The trailer section after the last chunk exceeded the limit.
    case trailersTooLarge(limit: Int)
    /// The connection closed before the head was complete.
    case truncatedHead(receivedBytes: Int)
    /// The connection closed before `Content-Length` bytes arrived.
    case truncatedBody(expected: UInt64, received: UInt64)
    /// The connection closed in the middle of a chunked body.
    case truncatedChunkedBody(received: UInt64)
    /// A body delimited only by the connection's close (no Content-Length, not chunked) ended
    /// with a TCP close but no TLS close_notify: an attacker on the path can cut it there, so
    /// it is not complete (RFC 9112 §9.8).
    case closeDelimitedBodyWithoutCloseNotify(received: UInt64)
    /// More interim (1xx) responses than the limit came before a final one.
    case tooManyInformationalResponses(limit: Int)
    /// A Content-Length or Transfer-Encoding field continued on a folded line (obs-fold):
    /// the framing and the value an application reads could differ, so it is refused.
    case foldedFramingField(String)

    /// One line naming what was wrong with the response.
    public var description: String {
        switch self {
        case .headerBlockTooLarge(let limit):
            return "response head exceeds the header block limit of \(limit) bytes"
        case .invalidStatusLine(let line):
            return "invalid status line \(quoted(line))"
        case .invalidHeaderLine(let line):
            return "invalid header line \(quoted(line))"
        case .invalidContentLength(let value):
            return "invalid Content-Length \(quoted(value))"
        case .conflictingContentLength(let values):
            return "conflicting Content-Length values \(values.map(quoted).joined(separator: ", "))"
        case .contentLengthWithTransferEncoding:
            return "response has both Transfer-Encoding and Content-Length (ambiguous framing)"
        case .unsupportedTransferCoding(let coding):
            return "unsupported Transfer-Encoding \(quoted(coding))"
        case .invalidChunkSize(let line):
            return "invalid chunk size line \(quoted(line))"
        case .chunkLineTooLong(let limit):
            return "chunk size line exceeds \(limit) bytes"
        case .missingChunkTerminator:
            return "chunk data not followed by CRLF"
        case .trailersTooLarge(let limit):
            return "chunked trailers exceed the header block limit of \(limit) bytes"
        case .truncatedHead(let received):
            return received == 0
                ? "connection closed before any response byte"
                : "connection closed after \(received) bytes of an incomplete response head"
        case .truncatedBody(let expected, let received):
            return "connection closed after \(received) of \(expected) body bytes (Content-Length)"
        case .truncatedChunkedBody(let received):
            return "connection closed inside a chunked body after \(received) bytes"
        case .closeDelimitedBodyWithoutCloseNotify(let received):
            return
                "TLS connection closed without close_notify after \(received) bytes of a body that only the close delimits (possibly truncated)"
        case .tooManyInformationalResponses(let limit):
            return "more than \(limit) interim (1xx) responses before a final one"
        case .foldedFramingField(let name):
            return "\(name) continued on a folded line (obs-fold), which would make the framing ambiguous"
        }
    }
}
