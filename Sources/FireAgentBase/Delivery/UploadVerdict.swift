/// What the agent does with a batch after the server answered (or did not). Sans-I/O: fed the
/// status, the headers that matter and the start of the body; tested from tables. Times are
/// seconds since 1970 (FireAgentCore adds `Date`-taking forms).
public enum UploadVerdict: Sendable, Equatable {
    /// 2xx: the batch is stored; remove it.
    case delivered
    /// Try again later: after `after` when the server said (Retry-After), else after the
    /// queue's backoff.
    case retry(after: Duration?, reason: String)
    /// Replace the batch by its two halves: 413, the batch is too large for the server; 400,
    /// the server refused lines of it (a field type conflict, a line it cannot parse), so the
    /// halves are sent again until the refused lines stand alone and the others arrive.
    case split
    /// The server refuses this batch for good (a one-line batch with 400 or 413, and the
    /// other 4xx that a retry cannot fix): move it to the dead letters with the server's
    /// message.
    case deadLetter(reason: String)
    /// 401/403: the credentials are wrong; keep the batch (a config reload may fix them),
    /// stop sending until then, and show the error in status.
    case holdForCredentials(reason: String)

    /// Decides from a response.
    /// - Parameters:
    ///   - status: the status code.
    ///   - retryAfter: the `Retry-After` value, if any (seconds or an HTTP date).
    ///   - message: the start of the response body (InfluxDB puts its error there).
    ///   - now: seconds since 1970, for an HTTP-date `Retry-After`.
    ///   - lines: lines in the batch (a one-line batch cannot be split).
    public static func decide(status: Int, retryAfter: String?, message: String, secondsSince1970 now: Double, lines: Int)
        -> UploadVerdict
    {
        let detail = message.isEmpty ? "HTTP \(status)" : "HTTP \(status): \(message)"
        switch status {
        case 204:
            // What InfluxDB 1.x and 2.x, VictoriaMetrics and Telegraf's listener answer a write.
            return .delivered
        case 200..<300:
            // Any other success is not the write API's: a captive portal's page, a proxy's
            // answer. The batch stays queued.
            return .retry(after: nil, reason: "\(detail) (not InfluxDB's 204: a captive portal or a proxy answered?)")
        case 413:
            return lines > 1 ? .split : .deadLetter(reason: "\(detail) (a single line larger than the server accepts)")
        case 400:
            // InfluxDB refuses the batch for some of its lines (1.x writes the others, 2.x none);
            // from a batch filled by several writers, only the refused lines are let go.
            return lines > 1 ? .split : .deadLetter(reason: detail)
        case 429, 503:
            return .retry(after: retryAfter.flatMap { parseRetryAfter($0, secondsSince1970: now) }, reason: detail)
        case 401, 403:
            return .holdForCredentials(reason: detail)
        case 408, 425, 500, 502, 504:
            return .retry(after: nil, reason: detail)
        case 400..<500:
            // No such database, a method or a size refused: the same batch will be refused again.
            return .deadLetter(reason: detail)
        default:
            return .retry(after: nil, reason: detail)
        }
    }

    /// `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3), capped at one hour
    /// (a server cannot park the fleet for days); nil when unreadable.
    /// - Parameters:
    ///   - value: the header's value.
    ///   - now: seconds since 1970, for an HTTP date.
    public static func parseRetryAfter(_ value: String, secondsSince1970 now: Double) -> Duration? {
        let text = value.trimmed()
        if let seconds = Int64(text), seconds >= 0 { return .seconds(min(seconds, 3600)) }
        guard let date = httpDateSeconds(text) else { return nil }
        let delta = Double(date) - now
        return .milliseconds(Int64(min(max(delta, 0), 3600) * 1000))
    }

    /// An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") as seconds since 1970.
    package static func httpDateSeconds(_ text: String) -> Int? {
        let parts = text.split(separator: " ")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard parts.count == 6, parts[5] == "GMT", let day = Int(parts[1]), let month = months.firstIndex(of: String(parts[2])),
            let year = Int(parts[3])
        else { return nil }
        let clock = parts[4].split(separator: ":").compactMap { Int($0) }
        guard clock.count == 3 else { return nil }
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
