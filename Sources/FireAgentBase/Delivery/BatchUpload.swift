import TinyFireCore

/// How fire-agent uploads a batch of line protocol and what it makes of the server's answer,
/// sans-I/O: one implementation for the host agent (on TinyFire's `OfflineQueue`) and the
/// Embedded one (on the core's `DeliveryQueue`).
public enum BatchUpload {
    /// What happens to a batch after the server answered.
    public enum Fate: Sendable, Equatable {
        /// Accepted: remove it.
        case delivered
        /// Keep it and try again after the backoff.
        case retry
        /// Keep it and try again after this delay (the server's `Retry-After`).
        case retryAfter(Duration)
        /// Refused for good: remove it and keep it as a dead letter, with the reason.
        case deadLetter(reason: String)
        /// Too large (413), or lines of it refused (400): replace it by these gzip'd halves,
        /// queued at the tail.
        case split([[UInt8]])
    }

    /// The `Authorization` value the API needs, if any: `Basic` for v1 with a user and a
    /// password, `Token` for v2.
    public static func authorization(for api: AgentConfig.InfluxAPI) -> String? {
        switch api {
        case .v1(_, _, let user?, let password?): return "Basic " + Base64.encode(Array((user + ":" + password).utf8))
        case .v1: return nil
        case .v2(_, _, let token): return "Token " + token
        }
    }

    /// The request body for `batch`: its line protocol, gzip'd (sent with
    /// `Content-Encoding: gzip`).
    /// - Throws: `AgentError` when zlib refuses.
    public static func body(for batch: Batch) throws(AgentError) -> [UInt8] {
        do throws(Gzip.CompressionError) {
            return try Gzip.compress(batch.body)
        } catch {
            throw AgentError(description: "cannot compress a batch: \(error.description)")
        }
    }

    /// The fate of a batch after the server answered.
    /// - Parameters:
    ///   - status: the response's status code.
    ///   - retryAfter: its `Retry-After` value, if any.
    ///   - message: the start of the response body (InfluxDB puts its error there).
    ///   - requestBody: the gzip'd batch as sent, when the queue kept it inline (needed only to
    ///     split it on a 413 or a 400; decompressed to at most twice `batchBytes`). Without it
    ///     (or when it is not gzip) a 400 dead-letters the whole batch.
    ///   - maxAge: `queue.maxRecordAge`.
    ///   - age: the batch's age (`WallClock.age`); nil when it cannot be known, and then a
    ///     refused batch is kept, never dead-lettered for its age.
    ///   - batchBytes: `telemetry.batchMaxBytes`.
    ///   - now: the wall clock, for a `Retry-After` given as a date.
    public static func judge(
        status: Int, retryAfter: String?, message: [UInt8], requestBody: [UInt8]?, maxAge: Duration, age: Duration?, batchBytes: Int,
        now: WallTime
    ) -> Fate {
        let text = String(decoding: message, as: UTF8.self).trimmed()
        // The lines matter only to split a batch: decompressed for a 413 or a 400 alone.
        var lines: [String]?
        if status == 413 || status == 400, let requestBody, let plain = try? Gzip.decompress(requestBody, limit: batchBytes * 2) {
            lines = String(decoding: plain, as: UTF8.self).split(separator: "\n").map { String($0) }
        }
        let verdict = UploadVerdict.decide(
            status: status, retryAfter: retryAfter, message: text, secondsSince1970: Double(now.millisecondsSince1970) / 1000,
            lines: lines?.count ?? 1)
        switch verdict {
        case .delivered: return .delivered
        case .split:
            guard let lines, let halves = Batch(lines: lines).halves else {
                return .deadLetter(reason: "HTTP \(status) for a batch that cannot be split")
            }
            var bodies: [[UInt8]] = []
            for half in [halves.0, halves.1] {
                guard let body = try? Gzip.compress(half.body) else { return .retry }
                bodies.append(body)
            }
            return .split(bodies)
        case .deadLetter(let reason): return .deadLetter(reason: reason)
        case .retry(let after, let reason):
            // Refused for longer than maxRecordAge: it must not block the queue for ever.
            if let age, age > maxAge {
                return .deadLetter(reason: "\(reason); still refused after \(age.components.seconds) s (queue.maxRecordAge)")
            }
            if let after { return .retryAfter(after) }
            return .retry
        case .holdForCredentials:
            return .retry
        }
    }
}
