import TinyFireCore

extension AgentCommandLine.Exit {
    /// `request`: redirect to a scheme that is not allowed (https → http).
    package static let unsupportedProtocol: Int32 = 1
    /// `request`, `queue add`: the URL or the request cannot be used.
    package static let malformedURL: Int32 = 3
    /// The proxy's name did not resolve, or the proxy URL is malformed.
    package static let proxyProblem: Int32 = 5
    /// The host name did not resolve.
    package static let couldNotResolveHost: Int32 = 6
    /// No address accepted the connection; `queue flush`: a record could not be delivered.
    package static let couldNotConnect: Int32 = 7
    /// The server's response broke HTTP/1.1.
    package static let weirdServerReply: Int32 = 8
    /// `request`: the server answered with a status outside 2xx.
    package static let httpError: Int32 = 22
    /// A timeout fired: connect, idle, total or low speed.
    package static let timedOut: Int32 = 28
    /// The TLS handshake failed.
    package static let sslConnectError: Int32 = 35
    /// A partial download could not be resumed (`-C -`).
    package static let badDownloadResume: Int32 = 36
    /// More redirects than `--max-redirs`.
    package static let tooManyRedirects: Int32 = 47
    /// The connection failed or closed while receiving.
    package static let receiveError: Int32 = 56
    /// A CA, CRL, certificate, key file or pin could not be used.
    package static let sslCertificateProblem: Int32 = 58
    /// The server's certificate was not trusted.
    package static let peerFailedVerification: Int32 = 60
    /// The body's Content-Encoding could not be decoded.
    package static let badContentEncoding: Int32 = 61
    /// A size limit was crossed (`--max-filesize`, a full queue).
    package static let sizeLimitExceeded: Int32 = 63

    /// The status for an offline queue that refused a record or could not be opened.
    package static func code(_ error: OfflineQueueError) -> Int32 {
        switch error {
        case .queueFull, .recordTooLarge: sizeLimitExceeded
        case .invalidRequest: malformedURL
        case .bodyFileUnreadable: readError
        default: writeError
        }
    }

    /// The status for a transfer that failed (curl's number for the same failure).
    package static func code(_ failure: TransferFailure) -> Int32 {
        switch failure {
        case .invalidURL, .invalidRequest: malformedURL
        case .invalidTLSConfiguration: sslCertificateProblem
        case .explicitlyCancelled, .engineShutDown, .resourceExhausted: internalError
        case .refusedByOwner: peerFailedVerification
        case .failed(let error): code(error)
        }
    }

    /// The status for a transfer error.
    package static func code(_ error: TransferError) -> Int32 {
        switch error.reason {
        case .nameResolutionFailed: error.failedAtProxy ? proxyProblem : couldNotResolveHost
        case .connectFailed: couldNotConnect
        case .timedOut, .lowSpeed: timedOut
        case .connectionError: receiveError
        case .invalidResponse: weirdServerReply
        case .contentDecodingFailed: badContentEncoding
        case .bodyLimitExceeded, .fileSizeExceeded: sizeLimitExceeded
        case .tooManyRedirects: tooManyRedirects
        case .insecureRedirect: unsupportedProtocol
        case .invalidRedirect, .redirectBodyTooLarge: weirdServerReply
        case .fileWriteFailed: writeError
        case .tlsFailed: sslConnectError
        case .requestBodyReadFailed: readError
        case .certificateVerificationFailed: peerFailedVerification
        case .resumeRejected, .resourceChanged: badDownloadResume
        // curl 7.88: "CONNECT tunnel failed, response 407" and the rest are receive errors.
        case .proxyAuthenticationRequired, .proxyTunnelRefused, .proxyTunnelFailed: receiveError
        }
    }
}
