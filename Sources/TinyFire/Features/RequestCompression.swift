import CZlib

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Compresses request bodies with zlib's deflate and sets `Content-Encoding: deflate`, as
/// Alamofire's `DeflateRequestCompressor`. The body is the zlib format (RFC 1950: header,
/// deflate data, Adler-32), which is what HTTP's `deflate` coding means.
///
/// Applies to bodies in memory (`Data`: `upload(_ data:)`, encoded parameters): the compressed
/// copy is at most zlib's `compressBound` of the body. File, stream and multipart uploads are
/// not in the `URLRequest` an adapter sees, so they go out as they are, without
/// `Content-Encoding` (compressing them would need the whole body in memory, or a chunked body
/// of unknown length): compress such files before uploading them. Only the server can decompress it; most do not unless
/// configured to, so use it only with servers that do.
public struct DeflateRequestCompressor: RequestInterceptor {
    /// What to do when the request already has a `Content-Encoding`.
    public enum DuplicateHeaderBehavior: Sendable {
        /// Fail the request with `DuplicateHeaderError`.
        case error
        /// Compress anyway and replace the header.
        case replace
        /// Leave the request alone.
        case skip
    }

    /// The request already had a `Content-Encoding` header.
    public struct DuplicateHeaderError: Error, CustomStringConvertible {
        /// What went wrong.
        public var description: String { "the request already has a Content-Encoding header; not compressing it twice" }
    }

    /// zlib failed.
    public struct CompressionError: Error, CustomStringConvertible {
        /// zlib's return code.
        public let code: Int32
        /// What went wrong.
        public var description: String { "zlib compression failed with code \(code)" }
    }

    /// The behaviour for an existing `Content-Encoding`.
    public let duplicateHeaderBehavior: DuplicateHeaderBehavior
    /// Decides per body whether to compress (e.g. only above a size).
    public let shouldCompressBodyData: @Sendable (_ bodyData: Data) -> Bool

    /// Creates the compressor.
    /// - Parameters:
    ///   - duplicateHeaderBehavior: default `.error`.
    ///   - shouldCompressBodyData: default always.
    public init(
        duplicateHeaderBehavior: DuplicateHeaderBehavior = .error,
        shouldCompressBodyData: @escaping @Sendable (_ bodyData: Data) -> Bool = { _ in true }
    ) {
        self.duplicateHeaderBehavior = duplicateHeaderBehavior
        self.shouldCompressBodyData = shouldCompressBodyData
    }

    /// Compresses the body, if any and if wanted.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - session: the session.
    ///   - completion: the compressed request, or `DuplicateHeaderError`/`CompressionError`.
    public func adapt(
        _ urlRequest: URLRequest, for session: Session, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
    ) {
        guard let body = urlRequest.httpBody, !body.isEmpty, shouldCompressBodyData(body) else {
            completion(.success(urlRequest))
            return
        }
        if urlRequest.headers["Content-Encoding"] != nil {
            switch duplicateHeaderBehavior {
            case .error:
                completion(.failure(DuplicateHeaderError()))
                return
            case .skip:
                completion(.success(urlRequest))
                return
            case .replace:
                break
            }
        }
        do {
            var compressed = urlRequest
            compressed.httpBody = try Self.deflate(body)
            compressed.headers.update(.contentEncoding("deflate"))
            completion(.success(compressed))
        } catch {
            completion(.failure(error))
        }
    }

    /// `data` in the zlib format at the default level.
    static func deflate(_ data: Data) throws(CompressionError) -> Data {
        var output = Data(count: Int(compressBound(uLong(data.count))))
        var length = uLongf(output.count)
        let status = output.withUnsafeMutableBytes { out in
            data.withUnsafeBytes { input in
                compress2(
                    out.baseAddress?.assumingMemoryBound(to: Bytef.self), &length,
                    input.baseAddress?.assumingMemoryBound(to: Bytef.self), uLong(input.count), Z_DEFAULT_COMPRESSION)
            }
        }
        guard status == Z_OK else { throw CompressionError(code: status) }
        output.count = Int(length)
        return output
    }
}

extension RequestInterceptor where Self == DeflateRequestCompressor {
    /// A `DeflateRequestCompressor` with the defaults.
    public static var deflateCompressor: DeflateRequestCompressor { DeflateRequestCompressor() }

    /// A `DeflateRequestCompressor`.
    /// - Parameters:
    ///   - duplicateHeaderBehavior: default `.error`.
    ///   - shouldCompressBodyData: default always.
    /// - Returns: the compressor.
    public static func deflateCompressor(
        duplicateHeaderBehavior: DeflateRequestCompressor.DuplicateHeaderBehavior = .error,
        shouldCompressBodyData: @escaping @Sendable (_ bodyData: Data) -> Bool = { _ in true }
    ) -> DeflateRequestCompressor {
        DeflateRequestCompressor(duplicateHeaderBehavior: duplicateHeaderBehavior, shouldCompressBodyData: shouldCompressBodyData)
    }
}

/// gzip (RFC 1952), for bodies sent with `Content-Encoding: gzip` (InfluxDB writes, log
/// shippers). Memory: zlib's deflate state (about 256 KiB at level 6) and the output.
public enum Gzip {
    /// Compresses `bytes` into one gzip member.
    /// - Parameters:
    ///   - bytes: the input.
    ///   - level: 1 (fastest) … 9 (smallest); default 6.
    /// - Returns: the gzip data.
    /// - Throws: `DeflateRequestCompressor.CompressionError` with zlib's status.
    public static func compress(_ bytes: [UInt8], level: Int32 = 6) throws(DeflateRequestCompressor.CompressionError) -> [UInt8] {
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
