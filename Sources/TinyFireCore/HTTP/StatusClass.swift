/// What a response's status means to a client that may send the same request again later.
///
/// One rule for every request that is repeated: the agent's telemetry writes, manifest polls,
/// image downloads and reports, and the core's offline queue (its throttle). Each caller maps
/// the class to what it does (a batch split on `.tooLarge`, a report discarded on `.refused`),
/// but which statuses fall in which class is decided here alone: a change to how, say, a 413 is
/// treated is made in this file.
///
/// Sans-I/O and allocation-free; tested from tables (`StatusClassTests`).
public enum StatusClass: Sendable, Equatable {
    /// 2xx.
    case success
    /// The server asks to be left alone for a while (429, 503): wait `retryAfter` when it said
    /// how long (`Retry-After`, capped at an hour), else the caller's backoff.
    case throttled(retryAfter: Duration?)
    /// The request's credentials are missing or refused (401, 403, 407): the same request fails
    /// until the configuration changes.
    case credentials
    /// The request's body is larger than the server takes (413).
    case tooLarge
    /// Nothing at this URL (404, 410).
    case gone
    /// Any other 4xx: the server refuses the request as it is; sending it again cannot help.
    case refused
    /// Worth sending again after a backoff: 408 and 425 (RFC 8470: sent too early, before a
    /// handshake finished), every 5xx but 503, and a 1xx or 3xx that reached the caller (a
    /// redirect not followed, a box in the path answering for the server).
    case transient

    /// Classifies a status.
    /// - Parameters:
    ///   - status: the response's status code.
    ///   - retryAfter: its `Retry-After` value, if any (read for 429 and 503 only).
    ///   - now: the wall clock, for a `Retry-After` given as a date.
    public init(status: Int, retryAfter: String? = nil, now: WallTime = .now()) {
        switch status {
        case 200..<300: self = .success
        case 429, 503: self = .throttled(retryAfter: retryAfter.flatMap { Self.retryDelay($0, now: now) })
        case 401, 403, 407: self = .credentials
        case 413: self = .tooLarge
        case 404, 410: self = .gone
        case 408, 425: self = .transient
        case 400..<500: self = .refused
        default: self = .transient
        }
    }

    /// Whether sending the same request again cannot succeed without a change on either side
    /// (`.credentials`, `.tooLarge`, `.gone`, `.refused`).
    public var isPermanent: Bool {
        switch self {
        case .credentials, .tooLarge, .gone, .refused: return true
        case .success, .throttled, .transient: return false
        }
    }

    /// The longest wait a `Retry-After` can ask for: a server cannot park a fleet for days.
    public static let maximumRetryAfter: Duration = .seconds(3600)

    /// `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3), capped at
    /// `maximumRetryAfter`; nil when unreadable. A date in the past is no wait.
    /// - Parameters:
    ///   - value: the header's value.
    ///   - now: the wall clock, for an HTTP date.
    public static func retryDelay(_ value: String, now: WallTime) -> Duration? {
        let text = value.trimmingHTTPWhitespace()
        let cap = maximumRetryAfter.components.seconds
        if let seconds = Int64(text), seconds >= 0 { return .seconds(min(seconds, cap)) }
        guard let date = HTTPDate.secondsSince1970(text) else { return nil }
        // Years 1 to 9999 (`HTTPDate`): no overflow in milliseconds; `now` may be anything.
        let (delta, overflow) = (Int64(date) * 1000).subtractingReportingOverflow(now.millisecondsSince1970)
        if overflow { return now.millisecondsSince1970 < 0 ? maximumRetryAfter : .zero }
        return .milliseconds(min(max(delta, 0), cap * 1000))
    }
}

/// HTTP's dates (RFC 9110 §5.6.7), as `Retry-After`, `Date` and `Last-Modified` carry them.
public enum HTTPDate {
    /// An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") as seconds since 1970; nil for any other
    /// form (the obsolete RFC 850 and asctime forms are not read: no server this client talks
    /// to sends them, and a date misread is worse than none) and for a year outside 1 to 9999
    /// (a header from anyone on the path must not overflow the arithmetic).
    /// - Parameter text: the header's value.
    public static func secondsSince1970(_ text: String) -> Int? {
        let parts = text.split(separator: " ")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard parts.count == 6, parts[5] == "GMT", let day = Int(parts[1]), (1...31).contains(day),
            let month = months.firstIndex(of: String(parts[2])), let year = Int(parts[3]), (1...9999).contains(year)
        else { return nil }
        let clock = parts[4].split(separator: ":").compactMap { Int($0) }
        guard clock.count == 3, (0..<24).contains(clock[0]), (0..<60).contains(clock[1]), (0...60).contains(clock[2]) else {
            return nil
        }
        // Days from the civil date (Howard Hinnant's algorithm), no calendar needed.
        let y = month < 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let m = month + 1
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146097 + doe - 719468
        return days * 86400 + clock[0] * 3600 + clock[1] * 60 + clock[2]
    }
}
