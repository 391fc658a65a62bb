import ArgumentParser
import TinyFire

/// fire-agent's exit statuses. Where curl has a code for the same failure, fire-agent uses
/// curl's number, so scripts written for curl read them the same way. docs/CLI.md lists them.
enum ExitStatus: Int32 {
    /// A complete transfer with a 2xx status.
    case success = 0
    /// Redirect to a scheme that is not allowed (https → http), or another refused protocol.
    case unsupportedProtocol = 1
    /// The URL or the request could not be used.
    case malformedURL = 3
    /// The proxy's name did not resolve, or the proxy URL is malformed.
    case couldNotResolveProxy = 5
    /// The host name did not resolve.
    case couldNotResolveHost = 6
    /// No address accepted the connection.
    case couldNotConnect = 7
    /// The server's response broke HTTP/1.1.
    case weirdServerReply = 8
    /// The server answered with a status outside 2xx.
    case httpError = 22
    /// Writing the body (to -o or stdout) failed.
    case writeError = 23
    /// Reading a local file (-d @file) failed.
    case readError = 26
    /// A timeout fired: connect, idle, total or low speed.
    case timedOut = 28
    /// More redirects than --max-redirs.
    case tooManyRedirects = 47
    /// The connection failed or closed while receiving.
    case receiveError = 56
    /// The body's Content-Encoding could not be decoded.
    case badContentEncoding = 61
    /// The body exceeded a configured size limit.
    case sizeLimitExceeded = 63
    /// The TLS handshake failed.
    case sslConnectError = 35
    /// A partial download could not be resumed (-C -).
    case badDownloadResume = 36
    /// The server's certificate was not trusted.
    case peerFailedVerification = 60
    /// A CA, CRL, certificate or key file could not be loaded.
    case sslCertificateProblem = 58
    /// The request failed for lack of network and was queued (`request --defer-to`): not
    /// delivered yet, but durable (sysexits' EX_TEMPFAIL).
    case deferred = 75
    /// `status`: no daemon runs with this config (sysexits' EX_UNAVAILABLE).
    case notRunning = 69
    /// The config file has problems (sysexits' EX_CONFIG).
    case configError = 78
    /// Out of system resources, or anything else.
    case internalError = 99

    /// The status for an offline queue that refused a record or could not be opened.
    init(_ error: OfflineQueueError) {
        switch error {
        case .queueFull, .recordTooLarge: self = .sizeLimitExceeded
        case .invalidRequest: self = .malformedURL
        case .bodyFileUnreadable: self = .readError
        default: self = .writeError
        }
    }

    /// The status for a TinyFire error.
    init(_ error: TinyFireError) {
        switch error {
        case .invalidURL, .invalidRequest, .createURLRequestFailed, .parameterEncodingFailed, .parameterEncoderFailed,
            .urlRequestValidationFailed:
            self = .malformedURL
        case .explicitlyCancelled, .sessionDeinitialized, .resourceExhausted, .requestAdaptationFailed, .requestRetryFailed,
            .responseSerializationFailed:
            self = .internalError
        case .serverTrustEvaluationFailed: self = .peerFailedVerification
        case .invalidTLSConfiguration: self = .sslCertificateProblem
        case .invalidProxy: self = .couldNotResolveProxy
        case .responseValidationFailed: self = .httpError
        case .multipartEncodingFailed, .createUploadableFailed: self = .readError
        case .downloadedFileMoveFailed: self = .writeError
        case .downloadResumeFailed: self = .badDownloadResume
        case .sessionTaskFailed(let transfer):
            switch transfer.reason {
            case .nameResolutionFailed: self = transfer.failedAtProxy ? .couldNotResolveProxy : .couldNotResolveHost
            case .connectFailed: self = .couldNotConnect
            case .timedOut, .lowSpeed: self = .timedOut
            case .connectionError: self = .receiveError
            case .invalidResponse: self = .weirdServerReply
            case .contentDecodingFailed: self = .badContentEncoding
            case .bodyLimitExceeded, .fileSizeExceeded: self = .sizeLimitExceeded
            case .tooManyRedirects: self = .tooManyRedirects
            case .insecureRedirect: self = .unsupportedProtocol
            case .invalidRedirect, .redirectBodyTooLarge: self = .weirdServerReply
            case .fileWriteFailed: self = .writeError
            case .tlsFailed: self = .sslConnectError
            case .requestBodyReadFailed: self = .readError
            case .certificateVerificationFailed: self = .peerFailedVerification
            case .resumeRejected, .resourceChanged: self = .badDownloadResume
            // curl 7.88: "CONNECT tunnel failed, response 407" and the rest are receive errors.
            case .proxyAuthenticationRequired, .proxyTunnelRefused, .proxyTunnelFailed: self = .receiveError
            }
        }
    }
}

/// Refuses time options that are not a number of seconds (NaN, infinite, negative), naming the
/// option; 0 means "no limit", as in curl.
/// - Parameter options: each option's spelling and value (nil when not given).
/// - Throws: `ValidationError` naming the first bad option.
func validateSeconds(_ options: [(name: String, value: Double?)]) throws {
    for (name, value) in options {
        guard let value else { continue }
        guard value.isFinite, value >= 0 else {
            throw ValidationError("\(name) takes a number of seconds (0 or more), not \(value)")
        }
    }
}
