#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// An incremental HTTP/1.1 response parser: a sans-I/O state machine.
///
/// Feed it whatever bytes arrived with `parse(_:)`; it returns how many it consumed and one
/// event. Body bytes are never copied: a `.body` event names a range of the caller's buffer.
/// Only the head and chunk-size lines are copied, into buffers bounded by `Limits`.
///
/// ```
/// var parser = ResponseParser(isHeadRequest: false)
/// var offset = 0
/// loop: while true {
///     let (consumed, event) = try parser.parse(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
///     offset += consumed
///     switch event {
///     case .needMore: break loop          // read more from the socket
///     case .head(let head): …             // final (non-1xx) head
///     case .informational(let head): …    // 100 Continue and friends
///     case .body(let range): …            // bytes[range] is body
///     case .end(let trailers): …          // response complete
///     }
/// }
/// ```
/// On end of input call `inputEnded()`: it completes a read-until-close body or reports what
/// was truncated.
public struct ResponseParser: Sendable {
    /// Bounds on what the parser buffers.
    public struct Limits: Sendable, Equatable {
        /// Largest status line plus header section (and, separately, trailer section), in bytes.
        /// Default `ResponseParser.Limits.defaultMaxHeaderBlockBytes` (64 KiB).
        public var maxHeaderBlockBytes: Int
        /// Largest chunk-size line including extensions, in bytes. Default 4 KiB.
        public var maxChunkLineBytes: Int
        /// Most interim (1xx) responses before the final one. Default
        /// `ResponseParser.Limits.defaultMaxInformationalResponses` (16).
        public var maxInformationalResponses: Int

        /// 64 KiB, the default header block limit.
        public static let defaultMaxHeaderBlockBytes = 64 * 1024
        /// 4 KiB, the default chunk-size line limit.
        public static let defaultMaxChunkLineBytes = 4 * 1024
        /// 16, the default bound on interim responses: a server answers 100 Continue or 103
        /// Early Hints once or twice; one that sends 1xx heads forever would hold the request
        /// without ever tripping a byte limit.
        public static let defaultMaxInformationalResponses = 16

        /// Creates limits.
        /// - Parameters:
        ///   - maxHeaderBlockBytes: bound on the head and on the trailers, in bytes.
        ///   - maxChunkLineBytes: bound on one chunk-size line, in bytes.
        ///   - maxInformationalResponses: bound on the count of 1xx heads before the final one.
        public init(
            maxHeaderBlockBytes: Int = Limits.defaultMaxHeaderBlockBytes,
            maxChunkLineBytes: Int = Limits.defaultMaxChunkLineBytes,
            maxInformationalResponses: Int = Limits.defaultMaxInformationalResponses
        ) {
            self.maxHeaderBlockBytes = maxHeaderBlockBytes
            self.maxChunkLineBytes = maxChunkLineBytes
            self.maxInformationalResponses = maxInformationalResponses
        }
    }

    /// What one call to `parse(_:)` found.
    public enum Event: Sendable, Equatable {
        /// All input was consumed (or none could be); more bytes are needed.
        case needMore
        /// An interim 1xx response (not 101); another head follows.
        case informational(ResponseHead)
        /// The final response head.
        case head(ResponseHead)
        /// Body bytes: this range of the buffer passed to `parse(_:)`.
        case body(Range<Int>)
        /// The response is complete; trailer fields of a chunked body, if any.
        case end(trailers: [RawHeaderField])
    }

    /// The parser's named states.
    package enum State: Sendable {
        case head
        case contentBody(remaining: UInt64)
        case chunkSizeLine
        case chunkData(remaining: UInt64)
        case chunkDataCR
        case chunkDataLF
        case trailers
        case untilClose
        case complete
    }

    private let isHeadRequest: Bool
    private let limits: Limits
    package private(set) var state: State = .head
    /// Bytes of the head (or trailers, or chunk line) gathered so far.
    private var lineBuffer: [UInt8] = []
    /// Length of the line being scanned in `lineBuffer`, without its CR.
    private var currentLineLength = 0
    /// Body bytes delivered so far (after de-chunking, before content decoding).
    public private(set) var bodyBytesReceived: UInt64 = 0
    /// Bytes consumed so far, of any kind.
    public private(set) var totalBytesConsumed: Int = 0
    private var expectedLength: UInt64 = 0
    /// Interim (1xx) heads seen so far.
    private var informationalCount = 0

    /// Creates a parser for one response.
    /// - Parameters:
    ///   - isHeadRequest: true when the request was HEAD: the response then has no body.
    ///   - limits: bounds on the buffered head, trailers and chunk lines.
    public init(isHeadRequest: Bool, limits: Limits = Limits()) {
        self.isHeadRequest = isHeadRequest
        self.limits = limits
    }

    /// Whether the response is complete.
    public var isComplete: Bool {
        if case .complete = state { return true }
        return false
    }

    /// Whether any byte of the response has been consumed.
    public var hasReceivedBytes: Bool { totalBytesConsumed > 0 }

    /// Consumes bytes and reports the next event.
    /// - Parameter input: the bytes not yet consumed.
    /// - Returns: how many bytes were consumed, and the event found.
    /// - Throws: `HTTPParseError` naming what in the input is wrong.
    public mutating func parse(_ input: UnsafeRawBufferPointer) throws(HTTPParseError) -> (
        consumed: Int, event: Event
    ) {
        var consumed = 0
        while true {
            let rest = UnsafeRawBufferPointer(rebasing: input[consumed...])
            let (n, event) = try step(rest)
            consumed += n
            totalBytesConsumed += n
            guard var event else { continue }
            if case .body(let range) = event {
                event = .body(range.lowerBound + consumed - n..<range.upperBound + consumed - n)
            }
            return (consumed, event)
        }
    }

    /// One transition. A nil event means progress without anything to report: keep going.
    private mutating func step(_ input: UnsafeRawBufferPointer) throws(HTTPParseError) -> (
        consumed: Int, event: Event?
    ) {
        switch state {
        case .head:
            guard let end = try scanBlock(input, limit: limits.maxHeaderBlockBytes, isTrailer: false)
            else {
                return (input.count, .needMore)
            }
            let head = try parseHead()
            lineBuffer.removeAll(keepingCapacity: true)
            if head.status >= 100 && head.status < 200 && head.status != 101 {
                informationalCount += 1
                guard informationalCount <= limits.maxInformationalResponses else {
                    throw .tooManyInformationalResponses(limit: limits.maxInformationalResponses)
                }
                return (end, .informational(head))
            }
            switch head.framing {
            case .none: state = .complete
            case .contentLength(let n):
                expectedLength = n
                state = n == 0 ? .complete : .contentBody(remaining: n)
            case .chunked: state = .chunkSizeLine
            case .untilClose: state = .untilClose
            }
            return (end, .head(head))

        case .contentBody(let remaining):
            guard !input.isEmpty else { return (0, .needMore) }
            let n = Int(min(UInt64(input.count), remaining))
            bodyBytesReceived += UInt64(n)
            state = remaining == UInt64(n) ? .complete : .contentBody(remaining: remaining - UInt64(n))
            return (n, .body(0..<n))

        case .untilClose:
            guard !input.isEmpty else { return (0, .needMore) }
            bodyBytesReceived += UInt64(input.count)
            return (input.count, .body(0..<input.count))

        case .chunkSizeLine:
            var index = 0
            while index < input.count {
                let byte = input[index]
                index += 1
                if byte == 0x0A {
                    let size = try parseChunkSizeLine()
                    lineBuffer.removeAll(keepingCapacity: true)
                    if size == 0 {
                        currentLineLength = 0
                        state = .trailers
                    } else {
                        state = .chunkData(remaining: size)
                    }
                    return (index, nil)
                }
                if lineBuffer.count >= limits.maxChunkLineBytes {
                    throw .chunkLineTooLong(limit: limits.maxChunkLineBytes)
                }
                lineBuffer.append(byte)
            }
            return (index, .needMore)

        case .chunkData(let remaining):
            guard !input.isEmpty else { return (0, .needMore) }
            let n = Int(min(UInt64(input.count), remaining))
            bodyBytesReceived += UInt64(n)
            state = remaining == UInt64(n) ? .chunkDataCR : .chunkData(remaining: remaining - UInt64(n))
            return (n, .body(0..<n))

        case .chunkDataCR:
            guard !input.isEmpty else { return (0, .needMore) }
            switch input[0] {
            case 0x0D:
                state = .chunkDataLF
                return (1, nil)
            case 0x0A:  // a bare LF ends the line too (RFC 9112 §2.2)
                state = .chunkSizeLine
                return (1, nil)
            default: throw .missingChunkTerminator
            }

        case .chunkDataLF:
            guard !input.isEmpty else { return (0, .needMore) }
            guard input[0] == 0x0A else { throw .missingChunkTerminator }
            state = .chunkSizeLine
            return (1, nil)

        case .trailers:
            guard let end = try scanBlock(input, limit: limits.maxHeaderBlockBytes, isTrailer: true)
            else {
                return (input.count, .needMore)
            }
            var ignored = FramingFields()
            let trailers = try parseFieldLines(startingAt: 0, framingFields: &ignored)
            lineBuffer.removeAll(keepingCapacity: true)
            state = .complete
            return (end, .end(trailers: trailers))

        case .complete:
            return (0, .end(trailers: []))
        }
    }

    /// Reports the end of input (the peer closed the connection).
    /// - Parameter authenticated: whether the close itself is authenticated (plain TCP: true;
    ///   TLS: only when the peer sent close_notify). A read-until-close body ends only at an
    ///   authenticated close.
    /// - Returns: `.end` when the response is complete (read-until-close bodies end here).
    /// - Throws: `HTTPParseError` naming what was cut short.
    public mutating func inputEnded(authenticated: Bool = true) throws(HTTPParseError) -> Event {
        switch state {
        case .complete:
            return .end(trailers: [])
        case .untilClose:
            guard authenticated else { throw .closeDelimitedBodyWithoutCloseNotify(received: bodyBytesReceived) }
            state = .complete
            return .end(trailers: [])
        case .head:
            throw .truncatedHead(receivedBytes: lineBuffer.count)
        case .contentBody:
            throw .truncatedBody(expected: expectedLength, received: bodyBytesReceived)
        case .chunkSizeLine, .chunkData, .chunkDataCR, .chunkDataLF, .trailers:
            throw .truncatedChunkedBody(received: bodyBytesReceived)
        }
    }

    // MARK: - Head

    /// Copies bytes into `lineBuffer` until an empty line ends the block. Scans for LF with
    /// memchr and copies whole lines, not byte by byte.
    /// - Returns: the number of input bytes up to and including the block's final LF, or nil
    ///   when the block is not complete yet (all input copied).
    private mutating func scanBlock(
        _ input: UnsafeRawBufferPointer, limit: Int, isTrailer: Bool
    ) throws(HTTPParseError) -> Int? {
        guard let base = input.baseAddress else { return nil }
        var index = 0
        while index < input.count {
            let remaining = input.count - index
            guard let found = memchr(base + index, 0x0A, remaining) else {
                // No line end yet: keep the partial line.
                try appendToBlock(UnsafeRawBufferPointer(start: base + index, count: remaining), limit: limit, isTrailer: isTrailer)
                currentLineLength += remaining
                return nil
            }
            let lf = base.distance(to: UnsafeRawPointer(found))
            let segment = UnsafeRawBufferPointer(start: base + index, count: lf - index)
            let partial = currentLineLength
            let lineLength = partial + segment.count
            // Empty means nothing but an optional CR before the LF.
            let lastByte: UInt8? = segment.last ?? (currentLineLength > 0 ? lineBuffer.last : nil)
            let isEmpty = lineLength == 0 || (lineLength == 1 && lastByte == 0x0D)
            currentLineLength = 0
            if isEmpty && !isTrailer && lineBuffer.count == partial {
                // Empty lines before a status line are tolerated (RFC 9112 §2.2).
                lineBuffer.removeAll(keepingCapacity: true)
                index = lf + 1
                continue
            }
            try appendToBlock(UnsafeRawBufferPointer(start: base + index, count: lf + 1 - index), limit: limit, isTrailer: isTrailer)
            index = lf + 1
            if isEmpty { return index }
        }
        return nil
    }

    private mutating func appendToBlock(_ bytes: UnsafeRawBufferPointer, limit: Int, isTrailer: Bool) throws(HTTPParseError) {
        guard lineBuffer.count + bytes.count <= limit else {
            throw isTrailer ? .trailersTooLarge(limit: limit) : .headerBlockTooLarge(limit: limit)
        }
        lineBuffer.append(contentsOf: bytes)
    }

    private func parseHead() throws(HTTPParseError) -> ResponseHead {
        let buffer = lineBuffer
        guard let firstLF = buffer.firstIndex(of: 0x0A) else {
            throw .invalidStatusLine(String(decoding: buffer, as: UTF8.self))
        }
        var lineEnd = firstLF
        if lineEnd > 0 && buffer[lineEnd - 1] == 0x0D { lineEnd -= 1 }
        let statusLine = buffer[0..<lineEnd]
        let (minor, status, reason) = try parseStatusLine(statusLine)
        var framingFields = FramingFields()
        let fields = try parseFieldLines(startingAt: firstLF + 1, framingFields: &framingFields)
        var head = ResponseHead(
            minorVersion: minor, status: status, reason: reason, fields: fields,
            framing: .none, keepAlive: true)
        head.keepAlive = Self.isPersistent(minorVersion: minor, framingFields)
        head.framing = try framing(status: status, framingFields)
        if case .untilClose = head.framing { head.keepAlive = false }
        return head
    }

    private func parseStatusLine(_ line: ArraySlice<UInt8>) throws(HTTPParseError) -> (Int, Int, String) {
        // HTTP-version SP status-code SP [ reason-phrase ]
        let bytes = Array(line)
        func fail() -> HTTPParseError { .invalidStatusLine(String(decoding: bytes, as: UTF8.self)) }
        guard bytes.count >= 12,
            bytes[0] == 0x48, bytes[1] == 0x54, bytes[2] == 0x54, bytes[3] == 0x50,  // HTTP
            bytes[4] == 0x2F, bytes[5] == 0x31, bytes[6] == 0x2E,  // /1.
            isDigit(bytes[7]), bytes[8] == 0x20,
            isDigit(bytes[9]), isDigit(bytes[10]), isDigit(bytes[11])
        else { throw fail() }
        let minor = Int(bytes[7] - 0x30)
        let status = Int(bytes[9] - 0x30) * 100 + Int(bytes[10] - 0x30) * 10 + Int(bytes[11] - 0x30)
        guard status >= 100 else { throw fail() }
        var reason = ""
        if bytes.count > 12 {
            guard bytes[12] == 0x20 else { throw fail() }
            for byte in bytes[13...] where byte != 0x09 && (byte < 0x20 || byte == 0x7F) {
                throw fail()
            }
            reason = String(decoding: bytes[13...], as: UTF8.self)
        }
        return (minor, status, reason)
    }

    /// The values of the fields that decide framing and persistence, gathered while parsing so
    /// that no field list is searched again.
    package struct FramingFields {
        package var contentLengths: [String] = []
        package var transferCodings: [String] = []
        package var connectionClose = false
        package var connectionKeepAlive = false
    }

    /// Parses `field-line CRLF` lines from `lineBuffer[start...]` up to the empty line.
    private func parseFieldLines(
        startingAt start: Int, framingFields: inout FramingFields
    ) throws(HTTPParseError) -> [RawHeaderField] {
        var fields: [RawHeaderField] = []
        fields.reserveCapacity(16)
        /// The last field is Content-Length or Transfer-Encoding.
        var lastFieldFrames = false
        let buffer = lineBuffer
        var lineStart = start
        while lineStart < buffer.count {
            guard let lf = buffer[lineStart...].firstIndex(of: 0x0A) else { break }
            var lineEnd = lf
            if lineEnd > lineStart && buffer[lineEnd - 1] == 0x0D { lineEnd -= 1 }
            defer { lineStart = lf + 1 }
            if lineEnd == lineStart { break }  // the empty line
            let line = buffer[lineStart..<lineEnd]
            func fail() -> HTTPParseError { .invalidHeaderLine(String(decoding: line, as: UTF8.self)) }
            if line.first == 0x20 || line.first == 0x09 {
                // obs-fold: a user agent replaces it with a space (RFC 9112 §5.2) — except in a
                // field that frames the message, where the value the framing used and the one
                // the application sees would differ.
                guard !fields.isEmpty, let moreBytes = fieldValueBytes(line[...]) else { throw fail() }
                if lastFieldFrames { throw .foldedFramingField(fields[fields.count - 1].name) }
                let more = String(decoding: moreBytes, as: UTF8.self)
                let previous = fields[fields.count - 1].value
                fields[fields.count - 1].value = previous.isEmpty ? more : previous + " " + more
                continue
            }
            guard let colon = line.firstIndex(of: 0x3A), colon > line.startIndex else { throw fail() }
            for byte in line[line.startIndex..<colon] where !isTokenByte(byte) {
                throw fail()  // includes whitespace before the colon (RFC 9112 §5.1)
            }
            let nameBytes = line[line.startIndex..<colon]
            let name = String(decoding: nameBytes, as: UTF8.self)
            guard let valueBytes = fieldValueBytes(line[(colon + 1)...]) else { throw fail() }
            fields.append(RawHeaderField(name: name, value: String(decoding: valueBytes, as: UTF8.self)))
            lastFieldFrames = false
            if equalsLowercased(nameBytes, "content-length") {
                lastFieldFrames = true
                forEachListElement(valueBytes, keepEmpty: true) {
                    framingFields.contentLengths.append(String(decoding: $0, as: UTF8.self))
                }
            } else if equalsLowercased(nameBytes, "transfer-encoding") {
                lastFieldFrames = true
                forEachListElement(valueBytes, keepEmpty: false) {
                    framingFields.transferCodings.append(String(decoding: $0, as: UTF8.self))
                }
            } else if equalsLowercased(nameBytes, "connection") {
                forEachListElement(valueBytes, keepEmpty: false) { option in
                    if equalsLowercased(option, "close") { framingFields.connectionClose = true }
                    if equalsLowercased(option, "keep-alive") { framingFields.connectionKeepAlive = true }
                }
            }
        }
        return fields
    }

    /// The trimmed value bytes, or nil when they hold NUL, CR or LF.
    private func fieldValueBytes(_ raw: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        var start = raw.startIndex
        var end = raw.endIndex
        while start < end && (raw[start] == 0x20 || raw[start] == 0x09) { start += 1 }
        while end > start && (raw[end - 1] == 0x20 || raw[end - 1] == 0x09) { end -= 1 }
        for byte in raw[start..<end] where byte == 0 || byte == 0x0D || byte == 0x0A {
            return nil
        }
        return raw[start..<end]
    }

    private static func isPersistent(minorVersion: Int, _ fields: FramingFields) -> Bool {
        if fields.connectionClose { return false }
        return minorVersion == 0 ? fields.connectionKeepAlive : true
    }

    /// Message body length, RFC 9112 §6.3, for a response.
    private func framing(status: Int, _ fields: FramingFields) throws(HTTPParseError) -> BodyFraming {
        if isHeadRequest || status < 200 || status == 204 || status == 304 {
            return .none
        }
        let codings = fields.transferCodings
        let values = fields.contentLengths
        if !codings.isEmpty {
            if !values.isEmpty { throw .contentLengthWithTransferEncoding }
            // Only `chunked` is supported as a transfer coding; it must be final and appear once.
            let chunkedCount = codings.filter { $0.caseInsensitiveEquals("chunked") }.count
            for coding in codings where !coding.caseInsensitiveEquals("chunked") {
                throw .unsupportedTransferCoding(coding)
            }
            if chunkedCount > 1 { throw .unsupportedTransferCoding(codings.joined(separator: ", ")) }
            return .chunked
        }
        if let first = values.first {
            for value in values where value != first {
                throw .conflictingContentLength(values)
            }
            guard let length = parseDecimal(first) else { throw .invalidContentLength(first) }
            return .contentLength(length)
        }
        return .untilClose
    }

    // MARK: - Chunks

    private func parseChunkSizeLine() throws(HTTPParseError) -> UInt64 {
        var line = lineBuffer[...]
        if line.last == 0x0D { line = line.dropLast() }
        func fail() -> HTTPParseError { .invalidChunkSize(String(decoding: line, as: UTF8.self)) }
        var size: UInt64 = 0
        var digits = 0
        var index = line.startIndex
        while index < line.endIndex, let value = hexValue(line[index]) {
            guard digits < 16 else { throw fail() }  // would overflow 64 bits
            size = size << 4 | UInt64(value)
            digits += 1
            index += 1
        }
        guard digits > 0 else { throw fail() }
        // chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] ); extensions are ignored.
        while index < line.endIndex && (line[index] == 0x20 || line[index] == 0x09) { index += 1 }
        if index < line.endIndex {
            guard line[index] == 0x3B else { throw fail() }
            for byte in line[index...] where byte == 0x0D || byte == 0 || byte == 0x0A {
                throw fail()
            }
        }
        return size
    }
}

/// Whether `bytes` equal `lowercase` (which must be lowercase ASCII) ignoring ASCII case.
@inline(__always)
package func equalsLowercased(_ bytes: ArraySlice<UInt8>, _ lowercase: StaticString) -> Bool {
    guard bytes.count == lowercase.utf8CodeUnitCount else { return false }
    let expected = lowercase.utf8Start
    var index = 0
    for byte in bytes {
        guard asciiLower(byte) == expected[index] else { return false }
        index += 1
    }
    return true
}

@inline(__always)
package func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

@inline(__always)
package func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case 0x30...0x39: return byte - 0x30
    case 0x41...0x46: return byte - 0x41 + 10
    case 0x61...0x66: return byte - 0x61 + 10
    default: return nil
    }
}

/// RFC 9110 token characters (field names, methods).
@inline(__always)
package func isTokenByte(_ byte: UInt8) -> Bool {
    switch byte {
    case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true
    case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E:
        return true
    default: return false
    }
}

/// A non-negative decimal number of at most 19 digits, or nil.
package func parseDecimal<S: StringProtocol>(_ text: S) -> UInt64? {
    guard !text.isEmpty, text.utf8.count <= 19 else { return nil }
    var value: UInt64 = 0
    for byte in text.utf8 {
        guard isDigit(byte) else { return nil }
        value = value * 10 + UInt64(byte - 0x30)
    }
    return value
}
