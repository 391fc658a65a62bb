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
        default: return nil
        }
    }
}

extension Error {
    /// This error as a `TinyFireError`, when it is one (Alamofire's `asAFError`).
    public var asTinyFireError: TinyFireError? { self as? TinyFireError }
}

/// Where in its life a transfer was when it failed.
public enum TransferPhase: String, Sendable {
    /// Looking up the host name.
    case resolving = "resolving the host"
    /// Running the TLS handshake.
    case tlsHandshake = "running the TLS handshake"
    /// Opening the TCP connection.
    case connecting = "connecting"
    /// Waiting for a free connection slot to the host (per-host limit).
    case waitingForConnection = "waiting for a connection slot"
    /// Writing the request head and body.
    case sendingRequest = "sending the request"
    /// Request sent, no response head yet.
    case awaitingResponse = "waiting for the response"
    /// Head received, reading the body.
    case receivingBody = "receiving the body"
    /// Asking the proxy for a tunnel to the origin (CONNECT).
    case openingTunnel = "opening the tunnel through the proxy"
}

/// Which timeout fired.
public enum TimeoutKind: String, Sendable {
    /// DNS plus TCP connect took longer than `connectTimeout`.
    case connect
    /// No byte moved for `idleTimeout`.
    case idle
    /// The whole transfer, redirects included, took longer than `totalTimeout`.
    case total
    /// The TLS handshake took longer than `tls.handshakeTimeout`.
    case tlsHandshake
}

/// A transfer that failed on the network or in the protocol.
public struct TransferError: Error, Sendable, CustomStringConvertible {
    /// Why it failed.
    public enum Reason: Sendable {
        /// getaddrinfo failed; its message.
        case nameResolutionFailed(message: String)
        /// Every address refused or was unreachable; one entry per address tried.
        case connectFailed(attempts: [String])
        /// A timeout fired.
        case timedOut(TimeoutKind, limit: Duration)
        /// Fewer than `bytesPerSecond` over `window` (curl's low-speed limit).
        case lowSpeed(bytesPerSecond: Int, window: Duration, measuredBytesPerSecond: Int)
        /// A socket call failed (errno and its text).
        case connectionError(code: Int32, message: String)
        /// The response broke HTTP/1.1 framing or syntax.
        case invalidResponse(HTTPParseError)
        /// The body's Content-Encoding could not be decoded.
        case contentDecodingFailed(ContentDecodingError)
        /// The in-memory body limit was crossed (counted on decoded bytes).
        case bodyLimitExceeded(limit: Int)
        /// A download would grow past its file size limit (curl's `--max-filesize`): the
        /// announced length, or the bytes so far, crossed it.
        case fileSizeExceeded(limit: UInt64)
        /// More redirects than allowed.
        case tooManyRedirects(limit: Int)
        /// An https URL redirected to http, and that is not allowed.
        case insecureRedirect(location: String)
        /// A redirect's Location is missing or not a usable URL.
        case invalidRedirect(location: String)
        /// Writing the body to its destination failed.
        case fileWriteFailed(path: String, message: String)
        /// A redirect response's body grew past `limit` bytes while the redirect handler had
        /// not decided yet.
        case redirectBodyTooLarge(limit: Int)
        /// The request body could not be read from its file (or the file changed size).
        case requestBodyReadFailed(message: String)
        /// The TLS handshake or a TLS record failed; mbedTLS's code and message.
        case tlsFailed(code: Int32, message: String)
        /// The server's certificate was not trusted: mbedTLS's reasons (expired, not trusted,
        /// name mismatch, revoked, …).
        case certificateVerificationFailed(reasons: [String])
        /// A resumed download's response cannot continue the partial file (a Content-Range
        /// that starts elsewhere, a 416 for a resource that shrank); TinyFire restarts from
        /// zero once before reporting this.
        case resumeRejected(message: String)
        /// A resumed download asked to stop when the resource changed (the agent's firmware
        /// download) got the whole of another version of it: If-Range answered 200 with other
        /// validators. Nothing of that body was written; the partial file is left as it was.
        case resourceChanged(message: String)
        /// The proxy answered 407 Proxy Authentication Required: no credentials were
        /// configured, they were refused, or the proxy asked again after they were sent once.
        /// Its `Proxy-Authenticate` challenge (empty when it sent none).
        case proxyAuthenticationRequired(challenge: String)
        /// The proxy refused the CONNECT request with this status (403 for a port it does not
        /// tunnel, 502 when it cannot reach the origin, a 3xx it has no business sending).
        case proxyTunnelRefused(status: Int, reasonPhrase: String)
        /// The tunnel could not be opened: the proxy closed the connection, answered with
        /// something that is not HTTP, or sent bytes after its answer.
        case proxyTunnelFailed(message: String)
    }

    /// The request method.
    public var method: String
    /// The URL of the hop that failed.
    public var url: String
    /// The host of that URL.
    public var host: String
    /// What the transfer was doing.
    public var phase: TransferPhase
    /// Why it failed.
    public var reason: Reason
    /// Request bytes written on the failing hop.
    public var bytesSent: UInt64
    /// Response bytes read on the failing hop (wire bytes, head included).
    public var bytesReceived: UInt64
    /// The proxy the hop went through, as `scheme://host:port` (never its credentials); nil
    /// when it went direct.
    public var proxy: String?
    /// Whether the failure was on the way to the proxy or at it (resolving or connecting to
    /// it, its TLS, its answer to CONNECT), rather than at the origin.
    public var failedAtProxy = false
    /// getaddrinfo's status for `.nameResolutionFailed`, each address's errno for
    /// `.connectFailed`; empty otherwise.
    var systemCodes: [Int32] = []

    /// Whether the failure says the network is not there, rather than that the server or the
    /// request is wrong: name resolution that got no answer (`EAI_AGAIN`), connects that failed
    /// with `ENETUNREACH`, `EHOSTUNREACH`, `ENETDOWN`, `EADDRNOTAVAIL` or `ETIMEDOUT` on every
    /// address, a connect timeout, or a connection that died with one of those errors.
    /// A refused connection (`ECONNREFUSED`) or an unknown name (`EAI_NONAME`) is not: the
    /// network answered. `OfflineRetrier` and `OfflineQueueDeferrer` use this by default.
    public var isNetworkUnavailable: Bool {
        switch reason {
        case .nameResolutionFailed: return systemCodes.contains(EAI_AGAIN)
        case .connectFailed: return !systemCodes.isEmpty && systemCodes.allSatisfy(Self.offlineErrnos.contains)
        case .timedOut(.connect, _): return true
        case .connectionError(let code, _): return Self.offlineErrnos.contains(code)
        default: return false
        }
    }

    /// The errno values that say no path to the host exists (or none answered).
    private static let offlineErrnos: Set<Int32> = [ENETUNREACH, EHOSTUNREACH, ENETDOWN, EADDRNOTAVAIL, ETIMEDOUT]

    /// `METHOD URL failed while PHASE: reason`.
    public var description: String {
        "\(method) \(url) failed while \(phase.rawValue): \(reasonDescription)"
    }

    /// The reason alone, in words, control characters escaped.
    public var reasonDescription: String { unescapedReasonDescription.escapingControlCharacters() }

    private var unescapedReasonDescription: String {
        switch reason {
        case .nameResolutionFailed(let message):
            if failedAtProxy, let proxy { return "cannot resolve the proxy \(proxy): \(message)" }
            return "cannot resolve host \(quoted(host)): \(message)"
        case .connectFailed(let attempts):
            if failedAtProxy, let proxy { return "cannot connect to the proxy \(proxy): " + attempts.joined(separator: "; ") }
            return "cannot connect to \(host): " + attempts.joined(separator: "; ")
        case .timedOut(let kind, let limit):
            let what: String
            switch kind {
            case .connect: what = "connect timeout"
            case .idle: what = "no data for"
            case .total: what = "total timeout"
            case .tlsHandshake: what = "TLS handshake timeout"
            }
            return "\(what) \(formatSeconds(limit)) exceeded (host \(host), sent \(bytesSent) bytes, received \(bytesReceived) bytes)"
        case .lowSpeed(let limit, let window, let measured):
            return
                "transfer slower than \(limit) bytes/s over \(formatSeconds(window)) (measured \(measured) bytes/s, received \(bytesReceived) bytes)"
        case .connectionError(_, let message):
            return "connection to \(host) failed: \(message) (sent \(bytesSent) bytes, received \(bytesReceived) bytes)"
        case .invalidResponse(let error):
            return "invalid response from \(host): \(error)"
        case .contentDecodingFailed(let error):
            return "cannot decode response from \(host): \(error)"
        case .bodyLimitExceeded(let limit):
            return "response body exceeds the in-memory limit of \(limit) bytes (decoded)"
        case .fileSizeExceeded(let limit):
            return "the downloaded file would exceed its limit of \(limit) bytes"
        case .tooManyRedirects(let limit):
            return "more than \(limit) redirects"
        case .insecureRedirect(let location):
            return "refused redirect from https to \(quoted(location))"
        case .invalidRedirect(let location):
            return "invalid redirect location \(quoted(location))"
        case .fileWriteFailed(let path, let message):
            return "cannot write body to \(path): \(message)"
        case .redirectBodyTooLarge(let limit):
            return "redirect response body exceeds \(limit) bytes while the redirect handler was deciding"
        case .tlsFailed(_, let message):
            if failedAtProxy, let proxy { return "TLS with the proxy \(proxy) failed: \(message)" }
            return "TLS with \(host) failed: \(message)"
        case .requestBodyReadFailed(let message):
            return "cannot send the request body: \(message)"
        case .certificateVerificationFailed(let reasons):
            if failedAtProxy, let proxy { return "certificate of the proxy \(proxy) not trusted: \(reasons.joined(separator: "; "))" }
            return "certificate of \(host) not trusted: \(reasons.joined(separator: "; "))"
        case .resumeRejected(let message):
            return "cannot resume the download: \(message)"
        case .resourceChanged(let message):
            return "the download was not resumed: \(message)"
        case .proxyAuthenticationRequired(let challenge):
            let asked = challenge.isEmpty ? "" : " (it asks for \(quoted(challenge)))"
            return "the proxy \(proxy ?? "?") requires authentication: 407\(asked)"
        case .proxyTunnelRefused(let status, let phrase):
            return "the proxy \(proxy ?? "?") refused the tunnel to \(host): \(status) \(phrase)"
        case .proxyTunnelFailed(let message):
            return "no tunnel through the proxy \(proxy ?? "?") to \(host): \(message)"
        }
    }
}

func formatSeconds(_ duration: Duration) -> String {
    let seconds = duration.seconds
    if seconds == seconds.rounded() { return "\(Int(seconds)) s" }
    return "\(Double(Int(seconds * 1000)) / 1000) s"
}

/// The kind of a transfer failure without its details, for sets of retryable failures (the
/// counterpart of the `URLError.Code`s Alamofire's `RetryPolicy` lists).
public enum TransferFailureKind: Sendable, Hashable, CaseIterable {
    /// The host name did not resolve (`cannotFindHost`, `dnsLookupFailed`).
    case nameResolutionFailed
    /// No address accepted the connection (`cannotConnectToHost`).
    case connectFailed
    /// A connect, idle or total timeout fired (`timedOut`).
    case timedOut
    /// The low-speed limit fired.
    case lowSpeed
    /// The connection failed or closed mid-exchange (`networkConnectionLost`).
    case connectionLost
    /// The response broke HTTP/1.1 (`badServerResponse`).
    case invalidResponse
    /// The body's Content-Encoding could not be decoded (`downloadDecodingFailedMidStream`).
    case contentDecodingFailed
    /// A configured limit was crossed (not retryable: the same response would cross it again).
    case limitExceeded
    /// A redirect was refused, invalid or one too many.
    case redirectFailed
    /// The body could not be written to its destination.
    case fileWriteFailed
    /// A resumed download's resource changed on the server (not retryable: the same request
    /// gets the same answer; what to fetch instead is the caller's decision).
    case resourceChanged
    /// The upload's file could not be read (not retryable).
    case requestBodyUnreadable
    /// The TLS handshake or a record failed (`secureConnectionFailed`).
    case tlsFailed
    /// The server's certificate was not trusted (not retryable).
    case certificateUntrusted
    /// The proxy refused the request: authentication, or a CONNECT it would not open (not
    /// retryable by default: the same request gets the same answer).
    case proxyRefused
}

extension TransferError {
    /// The kind of failure.
    public var kind: TransferFailureKind {
        switch reason {
        case .nameResolutionFailed: return .nameResolutionFailed
        case .connectFailed: return .connectFailed
        case .timedOut: return .timedOut
        case .lowSpeed: return .lowSpeed
        case .connectionError: return .connectionLost
        case .invalidResponse(let error):
            switch error {
            // The peer went away mid-message: the connection was lost, not the syntax broken
            // (URLSession's networkConnectionLost; what ConnectionLostRetryPolicy retries).
            case .truncatedHead, .truncatedBody, .truncatedChunkedBody, .closeDelimitedBodyWithoutCloseNotify: return .connectionLost
            default: return .invalidResponse
            }
        case .contentDecodingFailed: return .contentDecodingFailed
        case .bodyLimitExceeded, .fileSizeExceeded: return .limitExceeded
        case .tooManyRedirects, .insecureRedirect, .invalidRedirect, .redirectBodyTooLarge: return .redirectFailed
        case .fileWriteFailed: return .fileWriteFailed
        case .resumeRejected: return .invalidResponse
        case .resourceChanged: return .resourceChanged
        case .tlsFailed: return .tlsFailed
        case .certificateVerificationFailed: return .certificateUntrusted
        case .requestBodyReadFailed: return .requestBodyUnreadable
        case .proxyAuthenticationRequired, .proxyTunnelRefused: return .proxyRefused
        case .proxyTunnelFailed: return .connectionLost
        }
    }
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
