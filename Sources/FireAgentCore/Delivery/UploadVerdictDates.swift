#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// `UploadVerdict`'s `Date`-taking forms, for the full-Swift agent and the tests.
extension UploadVerdict {
    /// Decides from a response (`decide(status:retryAfter:message:secondsSince1970:lines:)`).
    /// - Parameters:
    ///   - status: the status code.
    ///   - retryAfter: the `Retry-After` value, if any (seconds or an HTTP date).
    ///   - message: the start of the response body (InfluxDB puts its error there).
    ///   - now: for an HTTP-date `Retry-After`.
    ///   - lines: lines in the batch (a one-line batch cannot be split).
    public static func decide(status: Int, retryAfter: String?, message: String, now: Date = Date(), lines: Int) -> UploadVerdict {
        decide(status: status, retryAfter: retryAfter, message: message, secondsSince1970: now.timeIntervalSince1970, lines: lines)
    }

    /// `Retry-After` as delay-seconds or an HTTP date, capped at one hour; nil when unreadable.
    public static func parseRetryAfter(_ value: String, now: Date) -> Duration? {
        parseRetryAfter(value, secondsSince1970: now.timeIntervalSince1970)
    }

    /// An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT").
    static func parseHTTPDate(_ text: String) -> Date? {
        httpDateSeconds(text).map { Date(timeIntervalSince1970: TimeInterval($0)) }
    }
}
