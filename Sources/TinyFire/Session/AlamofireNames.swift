#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Alamofire's names for TinyFire's types and Alamofire's accessors on its error, so code
/// written for Alamofire ports by changing the import.

/// Alamofire's error type: TinyFire's `TinyFireError` (same cases where they apply).
public typealias AFError = TinyFireError
/// A data response failing with `AFError`.
public typealias AFDataResponse<Success: Sendable> = DataResponse<Success, TinyFireError>
/// A download response failing with `AFError`.
public typealias AFDownloadResponse<Success: Sendable> = DownloadResponse<Success, TinyFireError>
/// A result failing with `AFError`.
public typealias AFResult<Success> = Result<Success, TinyFireError>

/// The library's version, as Alamofire's `AFInfo.version` (TinyFire's, not Alamofire's).
public enum AFInfo {
    /// TinyFire's version.
    public static let version = HTTPHeaders.tinyFireVersion
}

extension Error {
    /// This error as an `AFError` (`TinyFireError`), when it is one.
    public var asAFError: AFError? { self as? AFError }
}

extension TinyFireError {
    /// Whether the URL was not usable.
    public var isInvalidURLError: Bool {
        if case .invalidURL = self { return true }
        return false
    }

    /// Whether a `ParameterEncoding` failed.
    public var isParameterEncodingError: Bool {
        if case .parameterEncodingFailed = self { return true }
        return false
    }

    /// Whether a `ParameterEncoder` failed.
    public var isParameterEncoderError: Bool {
        if case .parameterEncoderFailed = self { return true }
        return false
    }

    /// Whether a multipart form failed to encode.
    public var isMultipartEncodingError: Bool {
        if case .multipartEncodingFailed = self { return true }
        return false
    }

    /// Whether server trust evaluation failed.
    public var isServerTrustEvaluationError: Bool {
        if case .serverTrustEvaluationFailed = self { return true }
        return false
    }

    /// Whether an upload's body could not be made.
    public var isCreateUploadableError: Bool {
        if case .createUploadableFailed = self { return true }
        return false
    }

    /// Whether a `URLRequestConvertible` threw.
    public var isCreateURLRequestError: Bool {
        if case .createURLRequestFailed = self { return true }
        return false
    }

    /// Whether a download could not be put at its destination.
    public var isDownloadedFileMoveError: Bool {
        if case .downloadedFileMoveFailed = self { return true }
        return false
    }

    /// Whether the session went away while the request was in flight.
    public var isSessionDeinitializedError: Bool {
        if case .sessionDeinitialized = self { return true }
        return false
    }

    /// Whether a pre-send check refused the request (a body on GET).
    public var isURLRequestValidationError: Bool {
        if case .urlRequestValidationFailed = self { return true }
        return false
    }

    /// The URL that was not usable, as given (a `String`, which is `URLConvertible`).
    public var urlConvertible: (any URLConvertible)? {
        if case .invalidURL(let url, _) = self { return url }
        return nil
    }

    /// The file URL a multipart failure is about.
    public var url: URL? {
        guard case .multipartEncodingFailed(let reason) = self else { return nil }
        switch reason {
        case .bodyPartURLInvalid(let url), .bodyPartFilenameInvalid(let url), .bodyPartFileNotReachableWithError(let url, _),
            .bodyPartFileIsDirectory(let url), .bodyPartFileSizeNotAvailable(let url), .outputStreamFileAlreadyExists(let url),
            .outputStreamURLInvalid(let url):
            return url
        case .bodyPartHeaderInvalid, .bodyPartLengthMismatch, .inputStreamReadFailed, .outputFileWriteFailed:
            return nil
        }
    }

    /// The multipart failure's reason, if this is one.
    private var multipartReason: MultipartEncodingFailureReason? {
        if case .multipartEncodingFailed(let reason) = self { return reason }
        if case .createUploadableFailed(let error) = self { return (error as? TinyFireError)?.multipartReason }
        return nil
    }

    /// Whether a file part's URL is not a file URL (Alamofire's `isBodyPartURLInvalid`).
    public var isBodyPartURLInvalid: Bool {
        if case .bodyPartURLInvalid? = multipartReason { return true }
        return false
    }

    /// Whether a file part's URL has no file name.
    public var isBodyPartFilenameInvalid: Bool {
        if case .bodyPartFilenameInvalid? = multipartReason { return true }
        return false
    }

    /// Whether a file part's file could not be reached.
    public var isBodyPartFileNotReachable: Bool {
        if case .bodyPartFileNotReachableWithError? = multipartReason { return true }
        return false
    }

    /// Whether a file part's URL names a directory.
    public var isBodyPartFileIsDirectory: Bool {
        if case .bodyPartFileIsDirectory? = multipartReason { return true }
        return false
    }

    /// Whether a file part's size could not be read.
    public var isBodyPartFileSizeNotAvailable: Bool {
        if case .bodyPartFileSizeNotAvailable? = multipartReason { return true }
        return false
    }

    /// Whether reading a part failed, or a stream part ended before its announced length
    /// (Alamofire's `isInputStreamReadFailed`; the latter's `underlyingError` is
    /// `UnexpectedInputStreamLength`).
    public var isInputStreamReadFailed: Bool {
        switch multipartReason {
        case .inputStreamReadFailed?, .bodyPartLengthMismatch?: return true
        default: return false
        }
    }

    /// Whether `writeEncodedData(to:)` would overwrite a file.
    public var isOutputStreamFileAlreadyExists: Bool {
        if case .outputStreamFileAlreadyExists? = multipartReason { return true }
        return false
    }

    /// Whether `writeEncodedData(to:)` was given a URL that is not a file URL.
    public var isOutputStreamURLInvalid: Bool {
        if case .outputStreamURLInvalid? = multipartReason { return true }
        return false
    }

    /// The content types validation accepted, when a content-type validation failed.
    public var acceptableContentTypes: [String]? {
        switch self {
        case .responseValidationFailed(.missingContentType(let types)),
            .responseValidationFailed(.unacceptableContentType(let types, _)):
            return types
        default: return nil
        }
    }

    /// The response's content type, when a content-type validation failed on it.
    public var responseContentType: String? {
        if case .responseValidationFailed(.unacceptableContentType(_, let type)) = self { return type }
        return nil
    }

    /// The encoding a string serialization failed with.
    public var failedStringEncoding: String.Encoding? {
        if case .responseSerializationFailed(.stringSerializationFailed(let encoding)) = self { return encoding }
        return nil
    }

    /// The temporary file a download could not move.
    public var sourceURL: URL? {
        if case .downloadedFileMoveFailed(_, let source, _) = self { return source }
        return nil
    }

    /// The destination a download could not be moved to.
    public var destinationURL: URL? {
        if case .downloadedFileMoveFailed(_, _, let destination) = self { return destination }
        return nil
    }
}

extension TransferFailureKind {
    /// Alamofire's `URLError.Code.networkConnectionLost`: `.connectionLost`.
    public static let networkConnectionLost = TransferFailureKind.connectionLost
    /// Alamofire's `URLError.Code.cannotConnectToHost`: `.connectFailed`.
    public static let cannotConnectToHost = TransferFailureKind.connectFailed
    /// Alamofire's `URLError.Code.cannotFindHost` and `.dnsLookupFailed`: `.nameResolutionFailed`.
    public static let cannotFindHost = TransferFailureKind.nameResolutionFailed
    /// Alamofire's `URLError.Code.badServerResponse`: `.invalidResponse`.
    public static let badServerResponse = TransferFailureKind.invalidResponse
    /// Alamofire's `URLError.Code.secureConnectionFailed`: `.tlsFailed`.
    public static let secureConnectionFailed = TransferFailureKind.tlsFailed
}

extension RetryPolicy {
    /// Alamofire's name for `retryableTransferFailures`: the transfer failures retried (the
    /// `URLError.Code`s there, `TransferFailureKind`s here, with Alamofire's names as aliases:
    /// `.networkConnectionLost`, `.timedOut`, …).
    public var retryableURLErrorCodes: Set<TransferFailureKind> { retryableTransferFailures }

    /// A policy spelled as Alamofire's initializer is (`retryableURLErrorCodes:`).
    /// - Parameters:
    ///   - retryLimit: most retries.
    ///   - exponentialBackoffBase: base, at least 2.
    ///   - exponentialBackoffScale: scale in seconds.
    ///   - retryableHTTPMethods: methods.
    ///   - retryableHTTPStatusCodes: statuses.
    ///   - retryableURLErrorCodes: transfer failures.
    public convenience init(
        retryLimit: UInt = RetryPolicy.defaultRetryLimit,
        exponentialBackoffBase: UInt = RetryPolicy.defaultExponentialBackoffBase,
        exponentialBackoffScale: Double = RetryPolicy.defaultExponentialBackoffScale,
        retryableHTTPMethods: Set<HTTPMethod> = RetryPolicy.defaultRetryableHTTPMethods,
        retryableHTTPStatusCodes: Set<Int> = RetryPolicy.defaultRetryableHTTPStatusCodes,
        retryableURLErrorCodes: Set<TransferFailureKind>
    ) {
        self.init(
            retryLimit: retryLimit, exponentialBackoffBase: exponentialBackoffBase, exponentialBackoffScale: exponentialBackoffScale,
            retryableHTTPMethods: retryableHTTPMethods, retryableHTTPStatusCodes: retryableHTTPStatusCodes,
            retryableTransferFailures: retryableURLErrorCodes)
    }

    /// Alamofire's name for `defaultRetryableTransferFailures`.
    public static var defaultRetryableURLErrorCodes: Set<TransferFailureKind> { defaultRetryableTransferFailures }
}
