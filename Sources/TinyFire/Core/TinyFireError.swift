/// Every error TinyFire reports, shaped after Alamofire's `AFError`.
///
/// `description` is one line naming what went wrong: the host, the phase, byte counts
/// expected and received, the limit crossed.
public enum TinyFireError: Error, Sendable, CustomStringConvertible {
    /// The URL could not be used: unparsable, no host, or a scheme TinyFire does not speak.
    case invalidURL(url: String, reason: String)
    /// The request itself cannot be written: a header with CR/LF, a head over the limit.
    case invalidRequest(reason: String)
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

    /// Why validation rejected a response.
    public enum ResponseValidationFailureReason: Sendable, Equatable {
        /// The status code is not in the acceptable set.
        case unacceptableStatusCode(code: Int)
    }

    /// One line naming what went wrong.
    public var description: String {
        switch self {
        case .invalidURL(let url, let reason): return "invalid URL \(quoted(url)): \(reason)"
        case .invalidRequest(let reason): return "invalid request: \(reason)"
        case .explicitlyCancelled: return "request explicitly cancelled"
        case .sessionDeinitialized: return "session deinitialized while the request was in flight"
        case .resourceExhausted(let what): return "out of resources: \(what)"
        case .sessionTaskFailed(let error): return error.description
        case .responseValidationFailed(.unacceptableStatusCode(let code)):
            return "response status code \(code) was unacceptable"
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
}

/// Where in its life a transfer was when it failed.
public enum TransferPhase: String, Sendable {
    /// Looking up the host name.
    case resolving = "resolving the host"
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
}

/// Which timeout fired.
public enum TimeoutKind: String, Sendable {
    /// DNS plus TCP connect took longer than `connectTimeout`.
    case connect
    /// No byte moved for `idleTimeout`.
    case idle
    /// The whole transfer, redirects included, took longer than `totalTimeout`.
    case total
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
        /// More redirects than allowed.
        case tooManyRedirects(limit: Int)
        /// An https URL redirected to http, and that is not allowed.
        case insecureRedirect(location: String)
        /// A redirect's Location is missing or not a usable URL.
        case invalidRedirect(location: String)
        /// Writing the body to its destination failed.
        case fileWriteFailed(path: String, message: String)
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

    /// `METHOD URL failed while PHASE: reason`.
    public var description: String {
        "\(method) \(url) failed while \(phase.rawValue): \(reasonDescription)"
    }

    /// The reason alone, in words.
    public var reasonDescription: String {
        switch reason {
        case .nameResolutionFailed(let message):
            return "cannot resolve host \(quoted(host)): \(message)"
        case .connectFailed(let attempts):
            return "cannot connect to \(host): " + attempts.joined(separator: "; ")
        case .timedOut(let kind, let limit):
            let what: String
            switch kind {
            case .connect: what = "connect timeout"
            case .idle: what = "no data for"
            case .total: what = "total timeout"
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
        case .tooManyRedirects(let limit):
            return "more than \(limit) redirects"
        case .insecureRedirect(let location):
            return "refused redirect from https to \(quoted(location))"
        case .invalidRedirect(let location):
            return "invalid redirect location \(quoted(location))"
        case .fileWriteFailed(let path, let message):
            return "cannot write body to \(path): \(message)"
        }
    }
}

func formatSeconds(_ duration: Duration) -> String {
    let seconds = duration.seconds
    if seconds == seconds.rounded() { return "\(Int(seconds)) s" }
    return "\(Double(Int(seconds * 1000)) / 1000) s"
}
