#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Every error TinyFire reports, shaped after Alamofire's `AFError`.
///
/// `description` is one line naming what went wrong: the host, the phase, byte counts
/// expected and received, the limit crossed, the validator or serializer that refused.
public enum TinyFireError: Error, Sendable, CustomStringConvertible {
    /// The URL could not be used: unparsable, no host, or a scheme TinyFire does not speak.
    case invalidURL(url: String, reason: String)
    /// The request itself cannot be written: a header with CR/LF, a head over the limit.
    case invalidRequest(reason: String)
    /// A `URLRequestConvertible` threw while building the request.
    case createURLRequestFailed(error: any Error)
    /// A `ParameterEncoding` could not encode the untyped parameters.
    case parameterEncodingFailed(reason: ParameterEncodingFailureReason)
    /// A `ParameterEncoder` could not encode the parameters.
    case parameterEncoderFailed(reason: ParameterEncoderFailureReason)
    /// The request failed a check before sending (a body on GET).
    case urlRequestValidationFailed(reason: URLRequestValidationFailureReason)
    /// A `RequestAdapter` threw or failed.
    case requestAdaptationFailed(error: any Error)
    /// A `RequestRetrier` failed while deciding, after `originalError`.
    case requestRetryFailed(retryError: any Error, originalError: any Error)
    /// `cancel()` was called.
    case explicitlyCancelled
    /// The `Session` was deinitialized while the request was in flight.
    case sessionDeinitialized
    /// The operating system refused a resource (epoll, eventfd, thread, descriptors).
    case resourceExhausted(String)
    /// The transfer failed on the network or in the protocol; the `TransferError` says where.
    case sessionTaskFailed(TransferError)
    /// The response arrived but did not pass validation.
    case responseValidationFailed(reason: ResponseValidationFailureReason)
    /// A response serializer could not produce its value.
    case responseSerializationFailed(reason: ResponseSerializationFailureReason)
    /// The server's certificate chain was not trusted for the host.
    case serverTrustEvaluationFailed(reason: ServerTrustFailureReason)
    /// The TLS configuration cannot be used (a CA, CRL, certificate or key file failed to load).
    case invalidTLSConfiguration(reason: String)
    /// A proxy URL or setting is malformed (its text, password masked, and the problem).
    case invalidProxy(reason: String)
    /// A multipart form could not be encoded (a part unreadable, the spill file unwritable).
    case multipartEncodingFailed(reason: MultipartEncodingFailureReason)
    /// An upload's body could not be made (an `InputStream` or a multipart form that failed
    /// to encode); the error says why.
    case createUploadableFailed(error: any Error)
    /// A download's file could not be put at its destination: a file is there and
    /// `.removePreviousFile` was not given (`CocoaError` 516), the directory is missing and
    /// `.createIntermediateDirectories` was not given (4), or another file-system error. TinyFire
    /// finds this out when the response head arrives, before the body is downloaded; `source`
    /// is the temporary file the body was (or would have been) written to.
    case downloadedFileMoveFailed(error: any Error, source: URL, destination: URL)
    /// A download could not be resumed as asked (resume data unreadable, partial file gone).
    case downloadResumeFailed(reason: DownloadResumeFailureReason)

    /// Why a server was not trusted.
    public enum ServerTrustFailureReason: Sendable {
        /// No evaluator applies to the host and the manager requires one.
        case noRequiredEvaluator(host: String)
        /// An evaluator refused the chain: which host, which evaluator, why.
        case evaluationFailed(host: String, evaluator: String, reasons: [String])
        /// A custom evaluator threw this error.
        case customEvaluationFailed(host: String, error: any Error)
    }

    /// Why a `ParameterEncoding` failed.
    public enum ParameterEncodingFailureReason: Sendable {
        /// The request had no URL to put the query in.
        case missingURL
        /// The parameters are not JSON (a `JSONEncoding.Error` says which value and where).
        case jsonEncodingFailed(error: any Error)
        /// A custom `ParameterEncoding` threw.
        case customEncodingFailed(error: any Error)
    }

    /// Why a `ParameterEncoder` failed.
    public enum ParameterEncoderFailureReason: Sendable {
        /// A part of the request the encoder needs.
        public enum RequiredComponent: Sendable {
            /// The URL was missing or could not be rebuilt with the query.
            case url
            /// The method was missing.
            case httpMethod(rawValue: String)
        }

        /// The request lacked a part the encoder needs.
        case missingRequiredComponent(RequiredComponent)
        /// The underlying encoder threw.
        case encoderFailed(error: any Error)
    }

    /// Why a request failed the pre-send check.
    public enum URLRequestValidationFailureReason: Sendable {
        /// A GET request carried a body (not sent; encode GET parameters into the query).
        case bodyDataInGETRequest(Data)
    }

    /// Why validation rejected a response.
    public enum ResponseValidationFailureReason: Sendable {
        /// The status code is not in the acceptable set.
        case unacceptableStatusCode(code: Int)
        /// The response had no Content-Type and the acceptable types were not `*/*`.
        case missingContentType(acceptableContentTypes: [String])
        /// The Content-Type matched none of the acceptable types.
        case unacceptableContentType(acceptableContentTypes: [String], responseContentType: String)
        /// A custom validation closure returned this error.
        case customValidationFailed(error: any Error)
    }

    /// Why a multipart form could not be encoded, as Alamofire's cases where they apply.
    public enum MultipartEncodingFailureReason: Sendable {
        /// A file part's URL is not a file URL.
        case bodyPartURLInvalid(url: URL)
        /// No file name could be taken from the URL.
        case bodyPartFilenameInvalid(in: URL)
        /// The file cannot be reached; the error (a `CocoaError` with the errno underneath:
        /// 260 no such file, 257 no permission) says why.
        case bodyPartFileNotReachableWithError(atURL: URL, error: any Error)
        /// The URL names a directory.
        case bodyPartFileIsDirectory(at: URL)
        /// The URL names something without a size (a device, a FIFO).
        case bodyPartFileSizeNotAvailable(at: URL)
        /// A part's header value contains CR or LF.
        case bodyPartHeaderInvalid(name: String)
        /// A file or stream part ended before its announced length.
        case bodyPartLengthMismatch(part: String, expected: UInt64, actual: UInt64)
        /// Reading a file or stream part failed.
        case inputStreamReadFailed(message: String)
        /// `writeEncodedData(to:)` would overwrite a file.
        case outputStreamFileAlreadyExists(at: URL)
        /// `writeEncodedData(to:)` was given a URL that is not a file URL.
        case outputStreamURLInvalid(url: URL)
        /// Writing the encoded body (or the upload's temporary file) failed.
        case outputFileWriteFailed(path: String, message: String)
    }

    /// Why a download could not be resumed.
    public enum DownloadResumeFailureReason: Sendable {
        /// The resume data is not TinyFire resume data, or of an unknown version.
        case invalidResumeData(String)
    }

    /// Why a response serializer failed.
    public enum ResponseSerializationFailureReason: Sendable {
        /// The body was empty and the status and method do not allow an empty response.
        case inputDataNilOrZeroLength
        /// A download serializer got no file (the download went to a descriptor, or failed
        /// before a file existed).
        case inputFileNil
        /// A download serializer could not read the file at this URL.
        case inputFileReadFailed(at: URL)
        /// The body is not JSON (`responseJSON`); the error says where and why.
        case jsonSerializationFailed(error: any Error)
        /// The body is not valid text in the named encoding.
        case stringSerializationFailed(encoding: String.Encoding)
        /// The decoder threw.
        case decodingFailed(error: any Error)
        /// The response was empty and the type has no empty value (`EmptyResponse`).
        case invalidEmptyResponse(type: String)
        /// A custom serializer threw.
        case customSerializationFailed(error: any Error)
    }

    /// One line naming what went wrong. Control characters a peer put in it (a header, a
    /// certificate name, a message) are shown escaped (`\x1b`), so printing it to a terminal
    /// or a log is safe.
    public var description: String { unescapedDescription.escapingControlCharacters() }

    private var unescapedDescription: String {
        switch self {
        case .invalidURL(let url, let reason): return "invalid URL \(quoted(url)): \(reason)"
        case .invalidRequest(let reason): return "invalid request: \(reason)"
        case .createURLRequestFailed(let error): return "cannot create the request: \(error)"
        case .parameterEncodingFailed(.missingURL): return "cannot encode the parameters into the URL: the request has no URL"
        case .parameterEncodingFailed(.jsonEncodingFailed(let error)): return "cannot encode the parameters as JSON: \(error)"
        case .parameterEncodingFailed(.customEncodingFailed(let error)): return "cannot encode the parameters: \(error)"
        case .parameterEncoderFailed(.missingRequiredComponent(.url)):
            return "parameter encoding failed: the request has no usable URL"
        case .parameterEncoderFailed(.missingRequiredComponent(.httpMethod(let method))):
            return "parameter encoding failed: the request has no usable method (\(method))"
        case .parameterEncoderFailed(.encoderFailed(let error)):
            return "parameter encoding failed: \(error)"
        case .urlRequestValidationFailed(.bodyDataInGETRequest(let data)):
            return "a GET request cannot carry a body (\(data.count) bytes); encode its parameters into the query"
        case .requestAdaptationFailed(let error): return "request adapter failed: \(error)"
        case .requestRetryFailed(let retryError, let originalError):
            return "request retrier failed: \(retryError) (after: \(originalError))"
        case .explicitlyCancelled: return "request explicitly cancelled"
        case .sessionDeinitialized: return "session deinitialized while the request was in flight"
        case .resourceExhausted(let what): return "out of resources: \(what)"
        case .sessionTaskFailed(let error): return error.description
        case .invalidTLSConfiguration(let reason): return "invalid TLS configuration: \(reason)"
        case .invalidProxy(let reason): return "invalid proxy: \(reason)"
        case .multipartEncodingFailed(let reason): return "multipart encoding failed: \(reason.message)"
        case .createUploadableFailed(let error): return "cannot create the upload body: \(error)"
        case .downloadedFileMoveFailed(let error, _, let destination):
            return "cannot put the download at \(destination.path(percentEncoded: false)): \(describeFileSystemError(error))"
        case .downloadResumeFailed(.invalidResumeData(let problem)): return "cannot resume the download: \(problem)"
        case .serverTrustEvaluationFailed(.noRequiredEvaluator(let host)):
            return "no server trust evaluator for host \(quoted(host)), and the trust manager requires one for every host"
        case .serverTrustEvaluationFailed(.evaluationFailed(let host, let evaluator, let reasons)):
            return "\(evaluator) did not trust \(host): \(reasons.joined(separator: "; "))"
        case .serverTrustEvaluationFailed(.customEvaluationFailed(let host, let error)):
            return "server trust evaluation of \(host) failed: \(error)"
        case .responseValidationFailed(let reason):
            switch reason {
            case .unacceptableStatusCode(let code):
                return "response status code \(code) was unacceptable"
            case .missingContentType(let acceptable):
                return "response has no Content-Type; acceptable: \(acceptable.joined(separator: ", "))"
            case .unacceptableContentType(let acceptable, let actual):
                return "response Content-Type \(quoted(actual)) is not one of: \(acceptable.joined(separator: ", "))"
            case .customValidationFailed(let error):
                return "custom validation failed: \(error)"
            }
        case .responseSerializationFailed(let reason):
            switch reason {
            case .inputDataNilOrZeroLength:
                return "response serialization failed: the body is empty and an empty response is not allowed here"
            case .inputFileNil:
                return "response serialization failed: the download has no file"
            case .inputFileReadFailed(let url):
                return "response serialization failed: cannot read the downloaded file \(url.path(percentEncoded: false))"
            case .jsonSerializationFailed(let error):
                return "response serialization failed: the body is not JSON: \(error)"
            case .stringSerializationFailed(let encoding):
                return "response serialization failed: the body is not valid \(encoding) text"
            case .decodingFailed(let error):
                return "response serialization failed: decoding failed: \(error)"
            case .invalidEmptyResponse(let type):
                return "response serialization failed: empty response, and \(type) has no empty value (adopt EmptyResponse)"
            case .customSerializationFailed(let error):
                return "response serialization failed: \(error)"
            }
        }
    }

    /// The transfer error, when this is a network or protocol failure.
    public var transferError: TransferError? {
        if case .sessionTaskFailed(let error) = self { return error }
        return nil
    }

    /// Whether this error is a timeout of any kind (connect, idle, total, low speed).
    public var isTimeout: Bool {
        switch transferError?.reason {
        case .timedOut, .lowSpeed: return true
        default: return false
        }
    }

    /// Whether `cancel()` caused it.
    public var isExplicitlyCancelledError: Bool {
        if case .explicitlyCancelled = self { return true }
        return false
    }

    /// Whether a response validator caused it.
    public var isResponseValidationError: Bool {
        if case .responseValidationFailed = self { return true }
        return false
    }

    /// Whether a response serializer caused it.
    public var isResponseSerializationError: Bool {
        if case .responseSerializationFailed = self { return true }
        return false
    }

    /// Whether the network or protocol caused it.
    public var isSessionTaskError: Bool { transferError != nil }

    /// Whether a request adapter caused it.
    public var isRequestAdaptationError: Bool {
        if case .requestAdaptationFailed = self { return true }
        return false
    }

    /// Whether a request retrier caused it.
    public var isRequestRetryError: Bool {
        if case .requestRetryFailed = self { return true }
        return false
    }

    /// The status code validation refused, if that is what happened.
    public var responseCode: Int? {
        if case .responseValidationFailed(.unacceptableStatusCode(let code)) = self { return code }
        return nil
    }

    /// The error underneath, for cases that wrap one.
    public var underlyingError: (any Error)? {
        switch self {
        case .createURLRequestFailed(let error), .requestAdaptationFailed(let error): return error
        case .requestRetryFailed(let retryError, _): return retryError
        case .parameterEncoderFailed(.encoderFailed(let error)): return error
        case .parameterEncodingFailed(.jsonEncodingFailed(let error)), .parameterEncodingFailed(.customEncodingFailed(let error)):
            return error
        case .responseValidationFailed(.customValidationFailed(let error)): return error
        case .responseSerializationFailed(.decodingFailed(let error)),
            .responseSerializationFailed(.customSerializationFailed(let error)),
            .responseSerializationFailed(.jsonSerializationFailed(let error)):
            return error
        case .sessionTaskFailed(let error): return error
        case .createUploadableFailed(let error), .downloadedFileMoveFailed(let error, _, _): return error
        case .multipartEncodingFailed(.bodyPartFileNotReachableWithError(_, let error)): return error
        case .multipartEncodingFailed(.bodyPartLengthMismatch(_, let expected, let actual)):
            return UnexpectedInputStreamLength(bytesExpected: expected, bytesRead: actual)
        default: return nil
        }
    }
}

extension Error {
    /// This error as a `TinyFireError`, when it is one (Alamofire's `asAFError`).
    public var asTinyFireError: TinyFireError? { self as? TinyFireError }
}

extension TinyFireError.MultipartEncodingFailureReason {
    var message: String {
        switch self {
        case .bodyPartURLInvalid(let url): return "\(url.absoluteString) is not a file URL"
        case .bodyPartFilenameInvalid(let url): return "no file name in \(url.absoluteString)"
        case .bodyPartFileNotReachableWithError(let url, let error):
            return "cannot read \(url.path(percentEncoded: false)): \(describeFileSystemError(error))"
        case .bodyPartFileIsDirectory(let url): return "\(url.path(percentEncoded: false)) is a directory"
        case .bodyPartFileSizeNotAvailable(let url): return "\(url.path(percentEncoded: false)) is not a regular file"
        case .bodyPartHeaderInvalid(let name): return "part header \(quoted(name)) contains CR or LF"
        case .bodyPartLengthMismatch(let part, let expected, let actual):
            return "\(part) ended after \(actual) of its announced \(expected) bytes"
        case .inputStreamReadFailed(let message): return "reading a part failed: \(message)"
        case .outputStreamFileAlreadyExists(let url): return "\(url.path(percentEncoded: false)) already exists"
        case .outputStreamURLInvalid(let url): return "\(url.absoluteString) is not a file URL"
        case .outputFileWriteFailed(let path, let message): return "cannot write \(path): \(message)"
        }
    }
}

/// A file-system failure as Foundation reports it (what Alamofire's callers see from
/// `FileManager`): a `CocoaError` whose code says what happened (516 the file exists, 4 no
/// such file when writing, 260 when reading, 513/257 no permission, 640 out of space, 642
/// read-only volume), with the path (`filePath`) and the errno (`underlying`, a `POSIXError`).
/// - Parameters:
///   - code: the errno.
///   - path: the file.
///   - writing: whether the file was being written (else read).
/// - Returns: the error.
func fileSystemError(_ code: Int32, path: String, writing: Bool) -> CocoaError {
    let kind: CocoaError.Code
    switch code {
    case EEXIST: kind = .fileWriteFileExists
    case ENOENT, ENOTDIR: kind = writing ? .fileNoSuchFile : .fileReadNoSuchFile
    case EACCES, EPERM: kind = writing ? .fileWriteNoPermission : .fileReadNoPermission
    case ENOSPC, EDQUOT: kind = .fileWriteOutOfSpace
    case EROFS: kind = .fileWriteVolumeReadOnly
    default: kind = writing ? .fileWriteUnknown : .fileReadUnknown
    }
    var info: [String: any Sendable] = ["NSFilePath": path]
    if let posix = POSIXErrorCode(rawValue: code) { info["NSUnderlyingError"] = POSIXError(posix) }
    return CocoaError(kind, userInfo: info)
}

/// A file-system error in words: the errno's text for a `CocoaError` made by
/// `fileSystemError`, else the error's description.
func describeFileSystemError(_ error: any Error) -> String {
    if let cocoa = error as? CocoaError, let posix = cocoa.underlying as? POSIXError {
        return "\(errnoMessage(posix.code.rawValue)) (CocoaError \(cocoa.code.rawValue))"
    }
    return "\(error)"
}

extension TinyFireError {
    /// A stream part that gave fewer bytes than announced (Alamofire's
    /// `AFError.UnexpectedInputStreamLength`): the `underlyingError` of
    /// `.multipartEncodingFailed(.bodyPartLengthMismatch)`.
    public struct UnexpectedInputStreamLength: Error, Sendable, Equatable, CustomStringConvertible {
        /// The length the part was appended with.
        public var bytesExpected: UInt64
        /// What the stream gave before it ended.
        public var bytesRead: UInt64

        /// Says both.
        public var description: String { "a stream part announced \(bytesExpected) bytes and gave \(bytesRead)" }
    }
}
