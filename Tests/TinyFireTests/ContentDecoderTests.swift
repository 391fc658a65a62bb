import CZlib
import Foundation
import Testing

@testable import TinyFire

/// Compresses with zlib: windowBits 31 = gzip, 15 = zlib, -15 = raw deflate.
func compress(_ data: Data, windowBits: Int32) -> Data {
    var stream = z_stream()
    precondition(tinyfire_deflate_init2(&stream, 6, windowBits) == Z_OK)
    defer { deflateEnd(&stream) }
    var output = Data()
    var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    var input = [UInt8](data)
    input.withUnsafeMutableBufferPointer { inputBuffer in
        stream.next_in = inputBuffer.baseAddress
        stream.avail_in = UInt32(inputBuffer.count)
        var status: Int32 = Z_OK
        repeat {
            buffer.withUnsafeMutableBufferPointer { out in
                stream.next_out = out.baseAddress
                stream.avail_out = UInt32(out.count)
                status = deflate(&stream, Z_FINISH)
                output.append(out.baseAddress!, count: out.count - Int(stream.avail_out))
            }
        } while status == Z_OK
    }
    return output
}

func decodeAll(_ coding: ContentCoding, _ input: Data, split: Int = Int.max, limit: Int = Int.max) throws -> Data {
    let decoder = try ContentDecoder(coding: coding, outputCapacity: 4096)
    var output = Data()
    var start = 0
    let bytes = [UInt8](input)
    while start < bytes.count {
        let end = min(bytes.count, start + split)
        try bytes[start..<end].withUnsafeBytes { raw in
            try decoder.decode(raw) { piece in
                guard output.count + piece.count <= limit else { throw SinkError.limitExceeded(limit: limit) }
                output.append(contentsOf: piece)
            }
        }
        start = end
    }
    try decoder.finish()
    return output
}

@Suite("ContentDecoder")
struct ContentDecoderTests {
    let original = Data(String(repeating: "fixed buffers, flat memory. ", count: 2000).utf8)

    @Test("gzip, zlib-wrapped deflate and raw deflate decode", arguments: [1, 100, Int.max])
    func roundTrip(split: Int) throws {
        #expect(try decodeAll(.gzip, compress(original, windowBits: 31), split: split) == original)
        #expect(try decodeAll(.deflate, compress(original, windowBits: 15), split: split) == original)
        #expect(try decodeAll(.deflate, compress(original, windowBits: -15), split: split) == original)
    }

    @Test("concatenated gzip members decode as one body")
    func gzipMembers() throws {
        let two = compress(Data("first ".utf8), windowBits: 31) + compress(Data("second".utf8), windowBits: 31)
        #expect(try decodeAll(.gzip, two) == Data("first second".utf8))
    }

    @Test("a gzip bomb stops at the sink's limit, not in memory")
    func gzipBomb() throws {
        let bomb = compress(Data(count: 64 << 20), windowBits: 31)  // 64 MiB of zeros, ~64 KiB compressed
        #expect(bomb.count < 200_000)
        #expect(throws: SinkError.self) {
            _ = try decodeAll(.gzip, bomb, limit: 1 << 20)
        }
    }

    @Test("corrupt and truncated streams are errors")
    func corruptAndTruncated() throws {
        var corrupt = compress(original, windowBits: 31)
        corrupt[20] ^= 0xFF
        corrupt[21] ^= 0xFF
        #expect(throws: ContentDecodingError.self) { _ = try decodeAll(.gzip, corrupt) }
        let truncated = compress(original, windowBits: 31).prefix(50)
        #expect(throws: ContentDecodingError.truncated(coding: .gzip)) { _ = try decodeAll(.gzip, Data(truncated)) }
        #expect(throws: ContentDecodingError.self) { _ = try decodeAll(.gzip, Data("not gzip at all".utf8)) }
    }

    @Test("Content-Encoding values map to codings")
    func codingNames() throws {
        #expect(try ContentCoding.from(headerValues: ["gzip"]) == .gzip)
        #expect(try ContentCoding.from(headerValues: ["X-GZIP"]) == .gzip)
        #expect(try ContentCoding.from(headerValues: ["deflate"]) == .deflate)
        #expect(try ContentCoding.from(headerValues: ["identity"]) == nil)
        #expect(try ContentCoding.from(headerValues: []) == nil)
        #expect(throws: ContentDecodingError.unsupported("br")) { try ContentCoding.from(headerValues: ["br"]) }
        #expect(throws: ContentDecodingError.unsupported("gzip, gzip")) { try ContentCoding.from(headerValues: ["gzip", "gzip"]) }
    }
}
