import HTTPTypes

/// What happens to a new record when the offline queue is at a bound.
public enum QueueOverflowPolicy: String, Sendable, CaseIterable {
    /// Refuse it with `OfflineQueueError.queueFull` (counted in `rejectedNew`).
    case rejectNew
    /// Accept it and drop the oldest records until the queue fits (counted in `droppedOldest`).
    case dropOldest
}

/// Exponential backoff with jitter between attempts of the offline queue's head record (and
/// of the agent's other retries).
public struct QueueBackoff: Sendable {
    /// The delay after the first failure; default 1 s.
    public var initial: Duration
    /// The largest delay; default 5 minutes.
    public var maximum: Duration
    /// Growth per failure; default 2.
    public var multiplier: Double
    /// Spread, as a fraction either way; default 0.2 (±20 %).
    public var jitter: Double

    /// Creates a backoff.
    /// - Parameters:
    ///   - initial: first delay.
    ///   - maximum: largest delay.
    ///   - multiplier: growth per failure.
    ///   - jitter: spread fraction.
    public init(initial: Duration = .seconds(1), maximum: Duration = .seconds(300), multiplier: Double = 2, jitter: Double = 0.2) {
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
    }

    /// The delay after the `failure`-th consecutive failure (1 for the first), with `random`
    /// in 0...1 placing it within the jitter.
    /// - Parameters:
    ///   - failure: consecutive failures so far.
    ///   - random: a value in 0...1.
    /// - Returns: the delay.
    public func delay(afterFailure failure: Int, random: Double) -> Duration {
        let cap = Double(maximum.nanosecondsClamped)
        // Grown by repeated multiplication, stopping at the cap (no libm `pow` on boards).
        var base = Double(initial.nanosecondsClamped)
        var step = 1
        while step < failure && base < cap {
            base *= multiplier
            step += 1
        }
        let capped = min(base, cap)
        let spread = capped * (1 + jitter * (2 * min(max(random, 0), 1) - 1))
        return .nanoseconds(Int64(max(0, min(spread, Double(Int64.max / 2)))))
    }
}

/// What delivery of the offline queue did, for logs and monitors.
public enum QueueDeliveryEvent: Sendable, Equatable {
    /// Removed after this status.
    case delivered(sequence: UInt64, idempotencyKey: String, status: Int)
    /// Removed by a `.discard` disposition for this status.
    case discarded(sequence: UInt64, idempotencyKey: String, status: Int)
    /// The attempt failed; the record stays at the head.
    case failed(sequence: UInt64, idempotencyKey: String, reason: String, failures: Int)
    /// Dropped to stay within the bounds (`.dropOldest`).
    case dropped(sequence: UInt64)
    /// Could not be read back (damaged after it was written): set aside.
    case quarantined(sequence: UInt64, reason: String)
    /// Removed by a `.deadLetter` disposition, kept in the dead-letter directory.
    case deadLettered(sequence: UInt64, idempotencyKey: String, status: Int, reason: String)
    /// Removed by a `.replace` disposition; `count` requests were queued instead.
    case replaced(sequence: UInt64, idempotencyKey: String, status: Int, count: Int)
}

/// A request to queue: the core's form of what the library's `URLRequest` or the agent's
/// batch holds.
package struct QueueSubmission: Sendable {
    /// The method's name.
    package var method: String
    /// The absolute URL.
    package var url: String
    /// The headers; an `Idempotency-Key` among them is kept as the record's key.
    package var headers: HTTPHeaders
    /// The body's pieces (bytes, file ranges); copied into the queue by `enqueue`.
    package var body: [BodySegment]

    package init(method: String, url: String, headers: HTTPHeaders, body: [BodySegment]) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// What a response means for the record it answered.
package enum QueueDisposition: Sendable {
    /// Done: remove it.
    case delivered
    /// Keep it at the head and try again after a backoff.
    case retry
    /// Final but not a success: remove it, count it in `discarded`, log the status.
    case discard
    /// Keep it and try again after this delay instead of the backoff (zero: the backoff).
    case retryAfter(Duration)
    /// Final: remove it and keep it, with `reason`, in the dead-letter directory.
    case deadLetter(reason: String)
    /// Remove it and queue these instead, at the tail (on disk before it is removed).
    case replace(with: [QueueSubmission])
}

/// One record's request as the sender sends it.
package struct QueuedSend: Sendable {
    /// Where the body is.
    package enum Body: Sendable {
        case none
        case bytes([UInt8])
        /// The whole file at `path` (in the queue's `bodies` directory).
        case file(path: String, length: UInt64)
    }

    package var method: String
    /// The absolute URL, as queued.
    package var url: String
    /// The queued headers and the `Idempotency-Key`.
    package var headers: HTTPHeaders
    package var body: Body
    /// Bytes of the response body the answer needs at most (`DeliveryQueue.judgedBodyBytes`).
    package var bodyLimit: Int
}

/// A server's answer to a queued record, or why there was none.
package enum QueueReply: Sendable {
    /// The response head and the start of the body (at most `QueuedSend.bodyLimit` bytes).
    case answered(HTTPResponse, body: [UInt8])
    /// No answer (connection, TLS, timeout): why, in words.
    case noResponse(String)
}

/// Sends the offline queue's records: the library's `Session` (so its interceptors apply), or
/// the core's engine on the agent.
package protocol QueueSender: AnyObject, Sendable {
    /// Sends `request` and calls `completion` once, from any thread. A redirect is followed
    /// only when it keeps the method and the origin (307 or 308 to the same scheme, host and
    /// port); any other is the answer: a captive portal's 302 must not count as delivered.
    func sendQueued(_ request: QueuedSend, completion: @escaping @Sendable (QueueReply) -> Void)
}

/// A response to a queued record, for the judge: everything a server says that can decide
/// what happens to the record.
package struct QueueAnswer: Sendable {
    /// The record's index entry.
    package let entry: OfflineQueueStore.Entry
    /// The record as queued.
    package let payload: OfflineQueueJournal.Payload
    /// The headers sent (the queued ones and the `Idempotency-Key`).
    package let sentHeaders: HTTPHeaders
    /// The response head.
    package let response: HTTPResponse
    /// The start of the response body (at most `DeliveryQueue.judgedBodyBytes`).
    package let body: [UInt8]
    /// Failed attempts of this record so far.
    package let failures: Int
}

/// The delivery half of the queue's configuration.
package struct QueueDeliverySettings: Sendable {
    /// Between attempts of the head record.
    package var backoff: QueueBackoff
    /// Judges a status when `judge` is nil.
    package var disposition: @Sendable (Int) -> QueueDisposition
    /// Judges a whole answer, when set.
    package var judge: (@Sendable (QueueAnswer) -> QueueDisposition)?
    /// Where `.deadLetter` records are kept; nil: only logged and counted.
    package var deadLetterDirectory: String?
    /// Records in flight at once in background delivery (1: strict order).
    package var maxConcurrentDeliveries: Int
    /// Bodies up to this size go inside the journal record.
    package var inlineBodyLimit: Int

    package init(
        backoff: QueueBackoff, disposition: @escaping @Sendable (Int) -> QueueDisposition,
        judge: (@Sendable (QueueAnswer) -> QueueDisposition)?, deadLetterDirectory: String?, maxConcurrentDeliveries: Int,
        inlineBodyLimit: Int
    ) {
        self.backoff = backoff
        self.disposition = disposition
        self.judge = judge
        self.deadLetterDirectory = deadLetterDirectory
        self.maxConcurrentDeliveries = maxConcurrentDeliveries
        self.inlineBodyLimit = inlineBodyLimit
    }
}

/// What a flush did.
package struct QueueFlushOutcome: Sendable, Equatable {
    package var delivered: Int
    package var discarded: Int
    package var remaining: Int
    package var failure: String?
}
