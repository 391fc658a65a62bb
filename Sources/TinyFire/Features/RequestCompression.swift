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
    public typealias CompressionError = Gzip.CompressionError

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
