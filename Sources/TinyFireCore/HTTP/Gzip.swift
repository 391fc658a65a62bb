import CZlib

/// gzip (RFC 1952), for bodies sent with `Content-Encoding: gzip` (InfluxDB writes, log
/// shippers). Memory: zlib's deflate state (about 256 KiB at level 6) and the output.
public enum Gzip {
    /// zlib refused to compress (`DeflateRequestCompressor.CompressionError` in TinyFire).
    public struct CompressionError: Error, Sendable, CustomStringConvertible {
        /// zlib's return code.
        public let code: Int32
        /// What went wrong.
        public var description: String { "zlib compression failed with code \(code)" }

        /// The error for zlib's return `code`.
        public init(code: Int32) { self.code = code }
    }

    /// Compresses `bytes` into one gzip member.
    /// - Parameters:
    ///   - bytes: the input.
    ///   - level: 1 (fastest) … 9 (smallest); default 6.
    /// - Returns: the gzip data.
    /// - Throws: `CompressionError` with zlib's status.
    public static func compress(_ bytes: [UInt8], level: Int32 = 6) throws(CompressionError) -> [UInt8] {
        var stream = z_stream()
        // 15 window bits + 16: a gzip header and trailer instead of zlib's.
        let initialized = deflateInit2_(
            &stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY, zlibVersion(), Int32(MemoryLayout<z_stream>.size))
        guard initialized == Z_OK else { throw .init(code: initialized) }
        defer { deflateEnd(&stream) }
        var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, uLong(bytes.count))) + 32)
        var input = bytes
        let status = input.withUnsafeMutableBufferPointer { inBuffer in
            output.withUnsafeMutableBufferPointer { outBuffer in
                stream.next_in = inBuffer.baseAddress
                stream.avail_in = uInt(inBuffer.count)
                stream.next_out = outBuffer.baseAddress
                stream.avail_out = uInt(outBuffer.count)
                return deflate(&stream, Z_FINISH)
            }
        }
        guard status == Z_STREAM_END else { throw .init(code: status) }
        output.removeLast(Int(stream.avail_out))
        return output
    }
}

extension Gzip {
    /// Why gzip data could not be decompressed.
    public struct DecompressionError: Error, Sendable, CustomStringConvertible {
        /// What went wrong.
        public let description: String
    }

    /// Decompresses gzip data (one or more members), refusing output beyond `limit` bytes.
    /// - Parameters:
    ///   - bytes: the gzip data.
    ///   - limit: the most output accepted.
    /// - Returns: the decompressed bytes.
    /// - Throws: `DecompressionError` for corrupt, truncated or oversized data.
    public static func decompress(_ bytes: [UInt8], limit: Int) throws(DecompressionError) -> [UInt8] {
        var stream = z_stream()
        let initialized = inflateInit2_(&stream, 15 + 32, zlibVersion(), Int32(MemoryLayout<z_stream>.size))
        guard initialized == Z_OK else { throw DecompressionError(description: "zlib inflateInit2 failed with \(initialized)") }
        defer { inflateEnd(&stream) }
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        var input = bytes
        var failure: DecompressionError?
        input.withUnsafeMutableBufferPointer { inBuffer in
            stream.next_in = inBuffer.baseAddress
            stream.avail_in = uInt(inBuffer.count)
            while true {
                let status = chunk.withUnsafeMutableBufferPointer { outBuffer -> Int32 in
                    stream.next_out = outBuffer.baseAddress
                    stream.avail_out = uInt(outBuffer.count)
                    return inflate(&stream, Z_NO_FLUSH)
                }
                output.append(contentsOf: chunk[0..<(chunk.count - Int(stream.avail_out))])
                if output.count > limit {
                    failure = DecompressionError(description: "more than \(limit) bytes once decompressed")
                    return
                }
                if status == Z_STREAM_END {
                    // Another member may follow (concatenated gzip).
                    guard stream.avail_in > 0 else { return }
                    inflateReset(&stream)
                    continue
                }
                guard status == Z_OK else {
                    failure = DecompressionError(description: "corrupt gzip data (zlib \(status))")
                    return
                }
                if stream.avail_in == 0 && stream.avail_out > 0 {
                    failure = DecompressionError(description: "gzip data ends before its end marker")
                    return
                }
            }
        }
        if let failure { throw failure }
        return output
    }
}
