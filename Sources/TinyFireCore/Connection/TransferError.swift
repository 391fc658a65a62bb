#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

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
    package var systemCodes: [Int32] = []

    package init(
        method: String, url: String, host: String, phase: TransferPhase, reason: Reason, bytesSent: UInt64, bytesReceived: UInt64,
        proxy: String? = nil, failedAtProxy: Bool = false, systemCodes: [Int32] = []
    ) {
        self.method = method
        self.url = url
        self.host = host
        self.phase = phase
        self.reason = reason
        self.bytesSent = bytesSent
        self.bytesReceived = bytesReceived
        self.proxy = proxy
        self.failedAtProxy = failedAtProxy
        self.systemCodes = systemCodes
    }

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
            // Through a tunnel, what the handshake read came through the proxy (which may have
            // sent it itself: the client cannot tell after it spoke).
            if let proxy { return "TLS with \(host) through the tunnel of the proxy \(proxy) failed: \(message)" }
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

package func formatSeconds(_ duration: Duration) -> String {
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
