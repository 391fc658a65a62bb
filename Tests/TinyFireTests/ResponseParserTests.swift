import Testing

@testable import TinyFire

/// What a parser produced from a whole input.
struct ParsedResponse: Equatable {
    var informational: [Int] = []
    var head: ResponseHead?
    var body: [UInt8] = []
    var trailers: [RawHeaderField] = []
    var complete = false
    var leftover = 0
}

/// Feeds `input` in pieces of `split` bytes, then signals end of input if `eof`.
func parseAll(
    _ input: String, split: Int = Int.max, isHead: Bool = false, eof: Bool = true,
    limits: ResponseParser.Limits = .init()
) throws(HTTPParseError) -> ParsedResponse {
    try parseAll(Array(input.utf8), split: split, isHead: isHead, eof: eof, limits: limits)
}

func parseAll(
    _ bytes: [UInt8], split: Int = Int.max, isHead: Bool = false, eof: Bool = true,
    limits: ResponseParser.Limits = .init()
) throws(HTTPParseError) -> ParsedResponse {
    var parser = ResponseParser(isHeadRequest: isHead, limits: limits)
    var result = ParsedResponse()
    var start = 0
    outer: while start < bytes.count {
        let end = min(bytes.count, start + max(1, split))
        let piece = Array(bytes[start..<end])
        var offset = 0
        let raw = UnsafeMutableRawBufferPointer.allocate(byteCount: piece.count, alignment: 1)
        defer { raw.deallocate() }
        raw.copyBytes(from: piece)
        let done: Bool = try { () throws(HTTPParseError) -> Bool in
            let raw = UnsafeRawBufferPointer(raw)
            while true {
                let (consumed, event) = try parser.parse(UnsafeRawBufferPointer(rebasing: raw[offset...]))
                let base = offset
                offset += consumed
                switch event {
                case .needMore: return false
                case .informational(let head): result.informational.append(head.status)
                case .head(let head): result.head = head
                case .body(let range): result.body += raw[(base + range.lowerBound)..<(base + range.upperBound)]
                case .end(let trailers):
                    result.trailers = trailers
                    result.complete = true
                    return true
                }
            }
        }()
        if done {
            result.leftover = bytes.count - (start + offset)
            break outer
        }
        start = end
    }
    if !result.complete && eof {
        if case .end(let trailers) = try parser.inputEnded() {
            result.trailers = trailers
            result.complete = true
        }
    }
    return result
}

let splits = [1, 2, 3, 7, 64, Int.max]

@Suite("ResponseParser")
struct ResponseParserTests {
    @Test("Content-Length body is delimited exactly", arguments: splits)
    func contentLengthBody(split: Int) throws {
        let parsed = try parseAll("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhelloEXTRA", split: split, eof: false)
        #expect(parsed.head?.status == 200)
        #expect(parsed.head?.reason == "OK")
        #expect(parsed.head?.framing == .contentLength(5))
        #expect(parsed.head?.keepAlive == true)
        #expect(parsed.head?.firstValue("x-a") == "b")
        #expect(String(decoding: parsed.body, as: UTF8.self) == "hello")
        #expect(parsed.complete)
        #expect(parsed.leftover == 5)
    }

    @Test("chunked body with extensions and trailers", arguments: splits)
    func chunkedWithExtensionsAndTrailers(split: Int) throws {
        let input =
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "5;name=value\r\nhello\r\n1A ; x\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Checksum: 42\r\nX-Other: y\r\n\r\n"
        let parsed = try parseAll(input, split: split, eof: false)
        #expect(parsed.head?.framing == .chunked)
        #expect(String(decoding: parsed.body, as: UTF8.self) == "helloabcdefghijklmnopqrstuvwxyz")
        #expect(parsed.trailers == [RawHeaderField(name: "X-Checksum", value: "42"), RawHeaderField(name: "X-Other", value: "y")])
        #expect(parsed.complete)
    }

    @Test("read-until-close body ends at end of input and is not kept alive", arguments: splits)
    func untilClose(split: Int) throws {
        let parsed = try parseAll("HTTP/1.1 200 OK\r\n\r\nall of it", split: split)
        #expect(parsed.head?.framing == .untilClose)
        #expect(parsed.head?.keepAlive == false)
        #expect(String(decoding: parsed.body, as: UTF8.self) == "all of it")
        #expect(parsed.complete)
    }

    @Test("100 Continue precedes the final head", arguments: splits)
    func informationalThenFinal(split: Int) throws {
        let parsed = try parseAll("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", split: split)
        #expect(parsed.informational == [100])
        #expect(parsed.head?.status == 201)
        #expect(parsed.body == Array("ok".utf8))
    }

    @Test("HEAD, 204 and 304 carry no body even with Content-Length")
    func bodilessResponses() throws {
        let head = try parseAll("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", isHead: true, eof: false)
        #expect(head.complete && head.body.isEmpty && head.head?.framing == BodyFraming.none)
        let noContent = try parseAll("HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", eof: false)
        #expect(noContent.complete && noContent.body.isEmpty)
        let notModified = try parseAll("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", eof: false)
        #expect(notModified.complete && notModified.body.isEmpty)
    }

    @Test("HTTP/1.0 is kept alive only with Connection: keep-alive; Connection: close ends it")
    func persistence() throws {
        #expect(try parseAll("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").head?.keepAlive == false)
        #expect(try parseAll("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n").head?.keepAlive == true)
        #expect(try parseAll("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").head?.keepAlive == false)
    }

    @Test("identical repeated Content-Length values are accepted")
    func repeatedContentLength() throws {
        let parsed = try parseAll("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3, 3\r\n\r\nabc")
        #expect(parsed.head?.framing == .contentLength(3))
    }

    @Test("bare LF line endings and obs-fold are tolerated")
    func lenientLineEndings() throws {
        let parsed = try parseAll("HTTP/1.1 200 OK\nX-Long: one\n  two\nContent-Length: 1\n\nz")
        #expect(parsed.head?.firstValue("X-Long") == "one two")
        #expect(parsed.body == [UInt8(ascii: "z")])
    }

    @Test("obs-fold in a framing field is refused: the framing and the value an application reads could differ")
    func foldedFramingFields() throws {
        #expect(throws: HTTPParseError.foldedFramingField("Content-Length")) {
            try parseAll("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n 6\r\n\r\nhello")
        }
        #expect(throws: HTTPParseError.foldedFramingField("Transfer-Encoding")) {
            try parseAll("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip,\r\n\tchunked\r\n\r\n0\r\n\r\n")
        }
        // A fold in another field is still joined with a space.
        #expect(try parseAll("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nX-A: b\r\n c\r\n\r\nz").head?.firstValue("X-A") == "b c")
    }

    @Test("interim (1xx) responses are bounded in number", arguments: [1, 7])
    func informationalResponsesBounded(split: Int) throws {
        let interim = String(repeating: "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", count: 16)
        let final = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        let parsed = try parseAll(interim + final, split: split)
        #expect(parsed.informational.count == 16 && parsed.body == Array("ok".utf8))
        #expect(throws: HTTPParseError.tooManyInformationalResponses(limit: 16)) {
            try parseAll("HTTP/1.1 100 Continue\r\n\r\n" + interim + final, split: split)
        }
        #expect(throws: HTTPParseError.tooManyInformationalResponses(limit: 2)) {
            try parseAll(interim + final, split: split, limits: .init(maxInformationalResponses: 2))
        }
    }

    @Test("empty lines before the status line are skipped", arguments: splits)
    func leadingEmptyLines(split: Int) throws {
        let parsed = try parseAll("\r\n\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", split: split)
        #expect(parsed.head?.status == 200)
        #expect(parsed.body == Array("ok".utf8))
    }

    @Test("empty reason phrase")
    func emptyReason() throws {
        let parsed = try parseAll("HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n")
        #expect(parsed.head?.status == 404)
        #expect(parsed.head?.reason == "")
    }

    // MARK: - Malformed input: each one a precise error

    @Test("conflicting Content-Length is rejected")
    func conflictingContentLength() {
        #expect(throws: HTTPParseError.conflictingContentLength(["5", "6"])) {
            try parseAll("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello")
        }
    }

    @Test("Content-Length with Transfer-Encoding is rejected (RFC 9112 §6.3)")
    func contentLengthWithTransferEncoding() {
        #expect(throws: HTTPParseError.contentLengthWithTransferEncoding) {
            try parseAll("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        }
    }

    @Test("invalid Content-Length values are rejected", arguments: ["-1", "1x", "", "0x10", "99999999999999999999"])
    func invalidContentLength(value: String) {
        #expect(throws: HTTPParseError.invalidContentLength(value)) {
            try parseAll("HTTP/1.1 200 OK\r\nContent-Length: \(value)\r\n\r\n")
        }
    }

    @Test("unsupported or doubled transfer codings are rejected")
    func badTransferCoding() {
        #expect(throws: HTTPParseError.unsupportedTransferCoding("gzip")) {
            try parseAll("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
        }
        #expect(throws: HTTPParseError.unsupportedTransferCoding("chunked, chunked")) {
            try parseAll("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n")
        }
    }

    @Test("bad chunk sizes are rejected", arguments: ["zz", "", "-5", " 5", "5 x", "11111111111111111"])
    func badChunkSize(line: String) {
        #expect(throws: HTTPParseError.invalidChunkSize(line)) {
            try parseAll("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\(line)\r\nhello\r\n0\r\n\r\n")
        }
    }

    @Test("chunk data must end with CRLF")
    func missingChunkTerminator() {
        #expect(throws: HTTPParseError.missingChunkTerminator) {
            try parseAll("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n")
        }
    }

    @Test("an over-long chunk line is rejected at the limit")
    func chunkLineTooLong() {
        let ext = String(repeating: "a", count: 5000)
        #expect(throws: HTTPParseError.chunkLineTooLong(limit: 4096)) {
            try parseAll("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;\(ext)\r\nhello\r\n0\r\n\r\n")
        }
    }

    @Test("a header block over the limit is rejected", arguments: [1, 4096])
    func headerFlood(split: Int) {
        var input = "HTTP/1.1 200 OK\r\n"
        for index in 0..<2000 { input += "X-Flood-\(index): \(String(repeating: "v", count: 40))\r\n" }
        #expect(throws: HTTPParseError.headerBlockTooLarge(limit: 65536)) {
            try parseAll(input + "\r\n", split: split)
        }
        #expect(throws: HTTPParseError.headerBlockTooLarge(limit: 100)) {
            try parseAll("HTTP/1.1 200 OK\r\nX: \(String(repeating: "v", count: 200))\r\n\r\n", limits: .init(maxHeaderBlockBytes: 100))
        }
    }

    @Test("trailers over the limit are rejected")
    func trailerFlood() {
        let input = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: \(String(repeating: "v", count: 200))\r\n\r\n"
        #expect(throws: HTTPParseError.trailersTooLarge(limit: 100)) {
            try parseAll(input, limits: .init(maxHeaderBlockBytes: 100))
        }
    }

    @Test(
        "malformed status lines are rejected",
        arguments: [
            "HTTP/2 200 OK", "HTTP/1.1 20 OK", "ICY 200 OK", "HTTP/1.1 200OK", "HTTP/1.1 099 Low", "HTTP/1.1 200 O\u{1}K",
        ])
    func badStatusLine(line: String) {
        #expect(throws: HTTPParseError.invalidStatusLine(line)) {
            try parseAll("\(line)\r\nContent-Length: 0\r\n\r\n")
        }
    }

    @Test(
        "malformed header lines are rejected",
        arguments: [
            "No-Colon", "Bad Name: x", "Space-Before-Colon : x", ": empty-name", "X-Nul: a\u{0}b", "X-CR: a\rb",
        ])
    func badHeaderLine(line: String) {
        #expect(throws: HTTPParseError.invalidHeaderLine(line)) {
            try parseAll("HTTP/1.1 200 OK\r\n\(line)\r\nContent-Length: 0\r\n\r\n")
        }
    }

    @Test("truncation is reported with byte counts")
    func truncation() {
        #expect(throws: HTTPParseError.truncatedHead(receivedBytes: 0)) { try parseAll("") }
        #expect(throws: HTTPParseError.truncatedHead(receivedBytes: 17)) { try parseAll("HTTP/1.1 200 OK\r\n") }
        #expect(throws: HTTPParseError.truncatedBody(expected: 100, received: 10)) {
            try parseAll("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        }
        #expect(throws: HTTPParseError.truncatedChunkedBody(received: 3)) {
            try parseAll("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel")
        }
    }

    @Test("error messages name the problem")
    func messages() {
        #expect(
            HTTPParseError.truncatedBody(expected: 100, received: 10).description
                == "connection closed after 10 of 100 body bytes (Content-Length)")
        #expect(
            HTTPParseError.headerBlockTooLarge(limit: 65536).description
                == "response head exceeds the header block limit of 65536 bytes")
        #expect(HTTPParseError.invalidChunkSize("z\rz").description == "invalid chunk size line \"z\\rz\"")
    }
}
