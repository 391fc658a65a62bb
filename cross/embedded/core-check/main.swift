// Runs TinyFireCore's pieces once on the machine (or emulator) it was built for, and says whether
// each gave the known answer: a chunked, gzip-encoded response through ResponseParser and
// ContentDecoder, SHA-256 over mbedTLS, the strict JSON reader, the monotonic clock, and errno
// through open(2). Exit status 0 only when every check passed. Built in Embedded Swift by
// cross/embedded/build.sh for x86_64, armv7 and aarch64, and run under qemu by cross/embedded/check.sh.
import Glibc
import TinyFireCore

var failures = 0
func check(_ name: String, _ ok: Bool, _ detail: String) {
    print("\(ok ? "ok  " : "FAIL") \(name): \(detail)")
    if !ok { failures += 1 }
}

func hex(_ bytes: [UInt8]) -> String {
    let digits: [Character] = Array("0123456789abcdef")
    var text = ""
    for byte in bytes {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 15)])
    }
    return text
}

// "hello, TinyFire\n" × 64, gzip-compressed, sent in three chunks with a trailer.
let response: [UInt8] = [
    72, 84, 84, 80, 47, 49, 46, 49, 32, 50, 48, 48, 32, 79, 75, 13, 10, 67, 111, 110, 116, 101, 110, 116, 45, 84, 121,
    112, 101, 58, 32, 116, 101, 120, 116, 47, 112, 108, 97, 105, 110, 13, 10, 67, 111, 110, 116, 101, 110, 116, 45, 69,
    110, 99, 111, 100, 105, 110, 103, 58, 32, 103, 122, 105, 112, 13, 10, 84, 114, 97, 110, 115, 102, 101, 114, 45, 69,
    110, 99, 111, 100, 105, 110, 103, 58, 32, 99, 104, 117, 110, 107, 101, 100, 13, 10, 13, 10, 97, 13, 10, 31, 139, 8,
    0, 0, 0, 0, 0, 2, 3, 13, 10, 49, 101, 13, 10, 203, 72, 205, 201, 201, 215, 81, 8, 201, 204, 171, 116, 203, 44, 74,
    229, 202, 24, 229, 143, 242, 71, 249, 35, 134, 15, 0, 249, 87, 124, 13, 10, 53, 13, 10, 66, 0, 4, 0, 0, 13, 10, 48,
    13, 10, 88, 45, 84, 114, 97, 105, 108, 101, 114, 58, 32, 100, 111, 110, 101, 13, 10, 13, 10,
]
let expectedBodySHA256 = "86a500edb8880e4fb1fd3295db8ee515780cf1a357d64a8426ffb46688c4bac3"

struct CheckError: Error { var text: String }

func parseResponse() throws(CheckError) -> (status: Int, body: [UInt8], trailer: String) {
    var parser = ResponseParser(isHeadRequest: false)
    var decoder: ContentDecoder?
    var status = 0
    var body: [UInt8] = []
    var trailer = ""
    // Fed 7 bytes at a time, as a slow link would deliver it.
    var offset = 0
    var end = 0
    while !parser.isComplete {
        if offset == end {
            guard end < response.count else { throw CheckError(text: "input ended before the response did") }
            end = min(response.count, end + 7)
        }
        let result: (Int, ResponseParser.Event)
        do {
            result = try response[offset..<end].withBytes { bytes throws(HTTPParseError) in try parser.parse(bytes) }
        } catch {
            throw CheckError(text: "parse error: \(error.description)")
        }
        let (consumed, event) = result
        switch event {
        case .needMore:
            offset = end
            continue
        case .informational:
            break
        case .head(let head):
            status = head.status
            do {
                if let coding = try ContentCoding.from(headerValues: head.listValues("Content-Encoding")) {
                    decoder = try ContentDecoder(coding: coding, outputCapacity: 256)
                }
            } catch {
                throw CheckError(text: "content coding: \(error.description)")
            }
        case .body(let range):
            guard let decoder else { throw CheckError(text: "a body before a decoder") }
            let base = offset
            try response[(base + range.lowerBound)..<(base + range.upperBound)].withBytes { bytes throws(CheckError) in
                try decoder.decode(bytes, corrupt: { CheckError(text: "gzip: \($0.description)") }) { decoded throws(CheckError) in
                    body.append(contentsOf: decoded)
                }
            }
        case .end(let trailers):
            trailer = trailers.first.map { "\($0.name): \($0.value)" } ?? ""
        }
        offset += consumed
    }
    do { try decoder?.finish() } catch { throw CheckError(text: "gzip end: \(error.description)") }
    return (status, body, trailer)
}

do throws(CheckError) {
    let (status, body, trailer) = try parseResponse()
    check("HTTP/1.1 chunked + gzip", status == 200 && body.count == 1024, "status \(status), \(body.count) bytes decoded")
    check("trailer", trailer == "X-Trailer: done", trailer)
    let digest = hex(SHA256.digest(of: body))
    check("SHA-256 (mbedTLS)", digest == expectedBodySHA256, digest)
} catch {
    check("HTTP/1.1 chunked + gzip", false, error.text)
}

do throws(StrictJSON.SyntaxError) {
    let document = try StrictJSON.parse(Array("{\"name\": \"fire-agent\", \"port\": 8443, \"tags\": [\"edge\", \"arm\"]}".utf8))
    var port: Int64?
    if case .object(let fields) = document, case .integer(let value) = fields["port"] { port = value }
    check("strict JSON", port == 8443, "port \(port.map { String($0) } ?? "missing")")
    _ = try StrictJSON.parse(Array("{\"a\": 1,}".utf8))
    check("strict JSON refuses a trailing comma", false, "accepted")
} catch {
    check("strict JSON refuses a trailing comma", error.description.hasPrefix("line 1, column "), error.description)
}

let before = Instant.now()
let after = Instant.now()
check("monotonic clock", after.nanoseconds >= before.nanoseconds && before.nanoseconds > 0, "\(before.nanoseconds) ns")

let fd = open("/nonexistent/tinyfire-core-check", O_RDONLY)
let code = errno
check("open + errno", fd == -1 && code == ENOENT, "fd \(fd), \(errnoMessage(code))")

check("word size", MemoryLayout<Int>.size == MemoryLayout<UnsafeRawPointer>.size, "Int is \(MemoryLayout<Int>.size * 8)-bit")
print(failures == 0 ? "core-check: all passed" : "core-check: \(failures) failed")
exit(failures == 0 ? 0 : 1)
