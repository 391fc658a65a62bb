import TinyFireCore

/// How fire-agent writes a batch of line protocol to InfluxDB and what the queue does with it
/// after the server answered: sans-I/O, tested from tables (`DeliveryDecisionTests`). Which
/// status means what is `StatusClass`'s rule; this file says what a batch does in each class.
package enum InfluxWrite {
    /// The `Authorization` value the API needs, if any: `Basic` for v1 with a user and a
    /// password, `Token` for v2.
    package static func authorization(for api: AgentConfig.InfluxAPI) -> String? {
        switch api {
        case .v1(_, _, let user?, let password?): return "Basic " + Base64.encode(Array((user + ":" + password).utf8))
        case .v1: return nil
        case .v2(_, _, let token): return "Token " + token
        }
    }

    /// The request body for `batch`: its line protocol, gzip'd (sent with
    /// `Content-Encoding: gzip`).
    /// - Throws: `AgentError` when zlib refuses.
    package static func body(for batch: Batch) throws(AgentError) -> [UInt8] {
        do throws(Gzip.CompressionError) {
            return try Gzip.compress(batch.body)
        } catch {
            throw AgentError(description: "cannot compress a batch: \(error.description)")
        }
    }

    /// What the queue does with a batch after the server answered:
    ///
    /// | answer | the batch |
    /// |---|---|
    /// | 204 | delivered: removed |
    /// | another 2xx | kept: not InfluxDB's answer (a captive portal, a proxy) |
    /// | 429, 503 | kept; the whole queue waits the server's `Retry-After` (else the backoff) |
    /// | 413 (too large), 400 (lines refused) | replaced by its two halves, queued at the tail, until the refused lines stand alone; a one-line batch is a dead letter |
    /// | 401, 403, 407 | kept, retried after the backoff, never let go for its age: a config reload with new credentials sends it |
    /// | 404, 410 and the other 4xx | a dead letter with the server's message (no such database, a method refused: the same batch is refused again) |
    /// | 408, 425, 5xx, 1xx, 3xx | kept, retried after the backoff |
    ///
    /// A batch kept although the server answered, for longer than `queue.maxRecordAge`, is a
    /// dead letter: it must not hold the queue for ever.
    /// - Parameters:
    ///   - status: the response's status code.
    ///   - retryAfter: its `Retry-After` value, if any.
    ///   - message: the start of the response body (InfluxDB puts its error there).
    ///   - record: the batch as queued; its halves are queued with its method, URL and headers.
    ///     Only an inline body (gzip'd line protocol) can be split, decompressed to at most twice
    ///     `batchBytes`; otherwise a 400 or 413 makes the whole batch a dead letter.
    ///   - maxAge: `queue.maxRecordAge`.
    ///   - age: the batch's age (`WallClock.age`); nil when it cannot be known, and then a
    ///     refused batch is kept, never dead-lettered for its age.
    ///   - batchBytes: `telemetry.batchMaxBytes`.
    ///   - now: the wall clock, for a `Retry-After` given as a date.
    package static func judge(
        status: Int, retryAfter: String?, message: [UInt8], record: OfflineQueueJournal.Payload, maxAge: Duration, age: Duration?,
        batchBytes: Int, now: WallTime
    ) -> QueueDisposition {
        let text = String(decoding: message, as: UTF8.self).trimmed()
        let detail = text.isEmpty ? "HTTP \(status)" : "HTTP \(status): \(text)"
        var reason = detail
        let delay: Duration?
        switch StatusClass(status: status, retryAfter: retryAfter, now: now) {
        case .success where status == 204:
            // What InfluxDB 1.x and 2.x, VictoriaMetrics and Telegraf's listener answer a write.
            return .delivered
        case .success:
            reason += " (not InfluxDB's 204: a captive portal or a proxy answered?)"
            delay = nil
        case .tooLarge:
            return split(record, detail: detail + " (a single line larger than the server accepts)", batchBytes: batchBytes)
        case .refused where status == 400:
            // InfluxDB refuses lines of the batch (1.x writes the others, 2.x none); from a
            // batch filled by several writers, only the refused lines are let go.
            return split(record, detail: detail, batchBytes: batchBytes)
        case .gone, .refused:
            return .deadLetter(reason: detail)
        case .credentials:
            // Kept whatever its age: new credentials (a reload) send it; it is not the batch's fault.
            return .retry
        case .throttled(let after):
            delay = after
        case .transient:
            delay = nil
        }
        if let age, age > maxAge {
            return .deadLetter(reason: "\(reason); still refused after \(age.components.seconds) s (queue.maxRecordAge)")
        }
        if let delay { return .retryAfter(delay) }
        return .retry
    }

    /// The halves of a refused batch as the queue's replacement, or a dead letter for
    /// `reason` when it cannot be split (one line, a body not kept inline, not gzip, beyond twice
    /// `batchBytes`).
    private static func split(_ record: OfflineQueueJournal.Payload, detail reason: String, batchBytes: Int) -> QueueDisposition {
        guard case .inline(let body) = record.body, let plain = try? Gzip.decompress(body, limit: batchBytes * 2) else {
            return .deadLetter(reason: reason)
        }
        let lines = String(decoding: plain, as: UTF8.self).split(separator: "\n").map { String($0) }
        guard let halves = Batch(lines: lines).halves else { return .deadLetter(reason: reason) }
        var headers = HTTPHeaders()
        for (name, value) in record.headers { headers.update(name: name, value: value) }
        var submissions: [QueueSubmission] = []
        for half in [halves.0, halves.1] {
            // zlib refusing memory now: the batch stays, split at a later attempt.
            guard let compressed = try? Gzip.compress(half.body) else { return .retry }
            submissions.append(
                QueueSubmission(method: record.method, url: record.url, headers: headers, body: [.memory(ByteArrayBody(compressed))]))
        }
        return .replace(with: submissions)
    }
}
