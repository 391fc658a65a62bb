import CTinyFireSystem
import Dispatch
import HTTPTypes
import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A durable queue of requests that must reach their server, for devices that lose their
/// link for days and their power without warning (Alamofire only retries in memory).
///
/// - **Durable**: `enqueue` returns only once the request (method, URL, headers, body) is on
///   disk: small bodies inline in a checksummed journal record, large ones as a body file
///   written and synced first; then the record is appended and `fdatasync`'d (new files and
///   segments also sync their directory). Concurrent enqueues share one sync.
/// - **At least once, in order**: records are sent one at a time, oldest first. A record is
///   removed only after a 2xx, or a status `Configuration.disposition` calls final. Each
///   carries an `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header), kept across
///   retries and restarts, so a server can recognise the copy it already has when a crash
///   fell between "sent" and "removed".
/// - **Driven by the network**: with a `NetworkReachabilityManager`, delivery waits while the
///   network is down and starts at once when it comes back; failures back off exponentially.
/// - **Bounded**: `maxRecords` and `maxBytes` (records plus body files), with `.rejectNew`
///   (default) or `.dropOldest`; refusals and drops are counted.
/// - **Recovers**: at open, torn or corrupt bytes are moved to `quarantine/` with a log line;
///   the records behind them are kept.
///
/// docs/OFFLINE.md explains the guarantees and the on-disk format.
///
/// Memory: the index of queued records (about 100 bytes each: `maxRecords` bounds it), one
/// record being delivered (inline bodies up to `inlineBodyLimit`; body files are streamed),
/// and at open one journal segment at a time (`segmentBytes`).
public final class OfflineQueue: Sendable {
    /// What happens to a new record when the queue is at a bound (the core's type).
    public typealias OverflowPolicy = QueueOverflowPolicy

    /// What a response status means for the record.
    public enum Disposition: Sendable {
        /// Done: remove the record.
        case delivered
        /// Keep it at the head and try again after a backoff.
        case retry
        /// Final but not a success (the server will never accept it): remove it, count it in
        /// `discarded`, log the status.
        case discard
        /// Keep it at the head and try again after this delay instead of the backoff (a
        /// server's `Retry-After`). Zero counts as no delay given: the backoff applies.
        case retryAfter(Duration)
        /// Final: remove it, and keep it with `reason` (the server's message) in
        /// `Configuration.deadLetterDirectory` for a person to look at. Counted in `discarded`.
        case deadLetter(reason: String)
        /// Remove it and queue these requests instead, at the tail (a batch the server found
        /// too large, split in two). They are on disk before the record is removed; counted
        /// in `discarded`.
        case replace(with: [URLRequest])
    }

    /// A response to a queued record, for `Configuration.judge`: everything a server says
    /// that can decide what happens to the record.
    public struct DeliveryResponse: Sendable {
        /// The record.
        public let record: Record
        /// The response head.
        public let response: HTTPResponse
        /// The start of the response body (at most `Configuration.judgedBodyBytes`).
        public let body: Data
        /// Failed attempts of this record so far.
        public let failures: Int
        /// The record's body, when it is kept inline in the journal (nil for a body file).
        public let requestBody: Data?
    }

    /// Exponential backoff with jitter between attempts of the head record.
    public typealias Backoff = QueueBackoff

    /// The queue's bounds and policies.
    public struct Configuration: Sendable {
        /// Default `maxRecords`: 10,000.
        public static let defaultMaxRecords = 10_000
        /// Default `maxBytes`: 64 MiB.
        public static let defaultMaxBytes: Int64 = 64 << 20
        /// Default `inlineBodyLimit`: 64 KiB.
        public static let defaultInlineBodyLimit = 64 << 10
        /// The largest `inlineBodyLimit` allowed: 512 KiB.
        public static let maximumInlineBodyLimit = 512 << 10
        /// Default `segmentBytes`: 4 MiB.
        public static let defaultSegmentBytes = OfflineQueueStore.defaultSegmentBytes
        /// The default disposition: 2xx is delivered, everything else is retried.
        public static let defaultDisposition: @Sendable (Int) -> Disposition = { (200..<300).contains($0) ? .delivered : .retry }

        /// Records held at most.
        public var maxRecords: Int
        /// Bytes held at most: journal records plus body files of queued requests.
        public var maxBytes: Int64
        /// What a full queue does with a new record.
        public var overflowPolicy: OverflowPolicy
        /// Bodies up to this size go inside the journal record; larger ones into a body file.
        public var inlineBodyLimit: Int
        /// A journal segment is closed and a new one started past this size; wholly removed
        /// segments are deleted. Disk use is at most `maxBytes` plus one segment.
        public var segmentBytes: Int
        /// Between attempts of the head record.
        public var backoff: Backoff
        /// Judges a response status. Default: 2xx delivered, all else retried (a record the
        /// server refuses forever then blocks the queue: say which statuses are final here).
        public var disposition: @Sendable (Int) -> Disposition
        /// The cursor (what was removed) is written at every removal and synced at most this
        /// often, and whenever the queue empties; default 1 s. After a power cut, records
        /// delivered within the last interval may be sent again (with their idempotency key).
        public var cursorSyncInterval: Duration
        /// Judges a whole response (status, headers such as `Retry-After`, the start of the
        /// body) instead of `disposition`, when set.
        public var judge: (@Sendable (DeliveryResponse) -> Disposition)?
        /// Where `.deadLetter` records go: `<sequence>.json` (method, URL, headers without
        /// credentials, status, reason, times) and `<sequence>.body`. Nil: dead letters are
        /// only logged and counted.
        public var deadLetterDirectory: String?
        /// Bytes of the response body handed to `judge`: 4 KiB.
        public static let judgedBodyBytes = 4096
        /// Records sent at once by background delivery: the head and up to this many minus one
        /// after it, each on a connection of its own (the session's `maxConnectionsPerHost`
        /// bounds them). 1, the default, keeps strict order: a record is sent only once the one
        /// before it is removed. Above 1 a later record may reach the server before an earlier
        /// one (for servers that need no order between requests, as InfluxDB needs none
        /// between batches); records are still removed in order: one delivered early waits
        /// in memory until those before it are removed, so after a crash it is sent again,
        /// with its idempotency key, like any record whose removal was not yet written. Only
        /// the head's failures count for the backoff. A throttle (429/503 with `Retry-After`,
        /// or the backoff without one) for any record in flight stops every send until it runs
        /// out; then the head goes alone. A later record the server refused for good (a dead
        /// letter, a split) is acted on when it is the head, without being sent again; one to
        /// retry is sent again only as the head. Memory: up to this many requests and their responses (up to
        /// `judgedBodyBytes` each) in flight. `flush` sends one at a time.
        public var maxConcurrentDeliveries: Int = 1

        /// Creates a configuration.
        /// - Parameters:
        ///   - maxRecords: default `defaultMaxRecords`.
        ///   - maxBytes: default `defaultMaxBytes`.
        ///   - overflowPolicy: default `.rejectNew`.
        ///   - inlineBodyLimit: default `defaultInlineBodyLimit` (at most `maximumInlineBodyLimit`).
        ///   - segmentBytes: default `defaultSegmentBytes`.
        ///   - backoff: default `Backoff()`.
        ///   - cursorSyncInterval: default 1 s.
        ///   - disposition: default `defaultDisposition`.
        public init(
            maxRecords: Int = Configuration.defaultMaxRecords, maxBytes: Int64 = Configuration.defaultMaxBytes,
            overflowPolicy: OverflowPolicy = .rejectNew, inlineBodyLimit: Int = Configuration.defaultInlineBodyLimit,
            segmentBytes: Int = Configuration.defaultSegmentBytes, backoff: Backoff = Backoff(),
            cursorSyncInterval: Duration = .seconds(1),
            disposition: @escaping @Sendable (Int) -> Disposition = Configuration.defaultDisposition
        ) {
            self.maxRecords = maxRecords
            self.maxBytes = maxBytes
            self.overflowPolicy = overflowPolicy
            self.inlineBodyLimit = inlineBodyLimit
            self.segmentBytes = segmentBytes
            self.backoff = backoff
            self.cursorSyncInterval = cursorSyncInterval
            self.disposition = disposition
        }
    }

    /// One queued request, as `records()` lists it.
    public struct Record: Sendable {
        /// Position in the queue's history; increases with every enqueue.
        public let sequence: UInt64
        /// The `Idempotency-Key` sent with every attempt.
        public let idempotencyKey: String
        /// When it was enqueued, by the wall clock of that moment (which may have been wrong).
        public let enqueuedAt: Date
        /// When it was enqueued on the boot clock; nil for records of an earlier queue format.
        public let enqueuedOnBootClock: BootInstant?
        /// The method.
        public let method: HTTPMethod
        /// The URL.
        public let url: String
        /// The headers (the idempotency key is added when sending).
        public let headers: HTTPHeaders
        /// The body's length in bytes.
        public let bodyLength: UInt64
        /// Whether the body is kept in a file rather than in the journal.
        public let bodyIsFile: Bool

        /// Time since it was enqueued, measured on the boot clock: true whatever the wall
        /// clock did meanwhile. Nil when it was enqueued during an earlier boot (or by a
        /// version that did not record the boot clock): then only the wall clock can tell.
        public var timeSinceEnqueue: Duration? {
            guard let enqueuedOnBootClock, let now = BootInstant.now() else { return nil }
            return now.since(enqueuedOnBootClock)
        }
    }

    /// What the queue holds and has done.
    public struct Statistics: Sendable, Equatable {
        /// Records queued.
        public var records: Int
        /// Their bytes on disk (records plus body files).
        public var bytes: Int64
        /// When the oldest queued record was enqueued.
        public var oldestEnqueuedAt: Date?
        /// Records removed after a 2xx (or a `.delivered` disposition). Persistent.
        public var delivered: UInt64
        /// Records dropped by `.dropOldest`. Persistent.
        public var droppedOldest: UInt64
        /// Enqueues refused by `.rejectNew`. Persistent.
        public var rejectedNew: UInt64
        /// Records removed by a `.discard` disposition. Persistent.
        public var discarded: UInt64
        /// Damaged records and byte ranges set aside. Persistent.
        public var quarantined: UInt64
        /// Consecutive failed attempts of the head record (this process only).
        public var headFailures: Int
        /// The last failure, if the head is failing.
        public var lastFailure: String?

        /// Seconds since the oldest record was enqueued.
        /// - Parameter now: the time to measure to; default now.
        /// - Returns: the age, or nil when empty.
        public func oldestAge(now: Date = Date()) -> TimeInterval? {
            oldestEnqueuedAt.map { now.timeIntervalSince($0) }
        }
    }

    /// What delivery did, for logs and monitors.
    public typealias DeliveryEvent = QueueDeliveryEvent

    /// What `flush` did.
    public struct FlushResult: Sendable, Equatable {
        /// Records removed after a success.
        public var delivered: Int
        /// Records removed by a `.discard` disposition.
        public var discarded: Int
        /// Records still queued.
        public var remaining: Int
        /// Why flushing stopped early, if it did.
        public var failure: String?
    }

    /// The queue's directory.
    public let directory: String
    /// Its configuration.
    public let configuration: Configuration
    let reachability: NetworkReachabilityManager?
    let logger: Logger
    /// The core's queue: the store, enqueue and delivery on a thread of its own.
    let core: DeliveryQueue
    var store: OfflineQueueStore { core.store }
    private let events: EventHandlers
    private let observer = Mutex<UInt64?>(nil)

    /// The delivery event handlers and their dispatch queues.
    private final class EventHandlers: Sendable {
        let handlers = Mutex<[(DispatchQueue, @Sendable (DeliveryEvent) -> Void)]>([])

        func emit(_ event: DeliveryEvent) {
            for (queue, handler) in handlers.withLock({ $0 }) { queue.async { handler(event) } }
        }
    }

    /// Opens the queue in `directory` (created if missing), recovering what a crash left.
    /// One process at a time: the directory is locked while open.
    /// - Parameters:
    ///   - directory: where the queue lives.
    ///   - configuration: bounds and policies.
    ///   - session: sends the records; default `Session.default`. Its interceptors apply
    ///     (fresh tokens are added at send time, not stored).
    ///   - reachability: drives delivery (waits while down, starts at once when up); nil
    ///     delivers on the backoff alone.
    ///   - logger: quarantines, drops, failures.
    /// - Throws: `OfflineQueueError` when the directory cannot be used, is locked, or the
    ///   configuration is out of range.
    public init(
        directory: String, configuration: Configuration = Configuration(), session: Session = .default,
        reachability: NetworkReachabilityManager? = nil, logger: Logger = Logger(label: "org.tinyfire.offline-queue")
    ) throws(OfflineQueueError) {
        guard configuration.maxRecords > 0, configuration.maxBytes > 0, configuration.segmentBytes > 0,
            (0...Configuration.maximumInlineBodyLimit).contains(configuration.inlineBodyLimit)
        else {
            throw .invalidRequest(
                reason:
                    "configuration out of range (maxRecords and maxBytes must be positive, inlineBodyLimit at most \(Configuration.maximumInlineBodyLimit))"
            )
        }
        self.directory = directory
        self.configuration = configuration
        self.reachability = reachability
        self.logger = logger
        let sink = SwiftLogSink(logger)
        let store = try OfflineQueueStore(
            directory: directory,
            limits: .init(
                maxRecords: configuration.maxRecords, maxBytes: configuration.maxBytes,
                dropOldest: configuration.overflowPolicy == .dropOldest, segmentBytes: configuration.segmentBytes,
                cursorSyncInterval: configuration.cursorSyncInterval),
            logger: sink)
        let events = EventHandlers()
        self.events = events
        do throws(OfflineQueueError) {
            core = try DeliveryQueue(
                store: store, settings: Self.settings(configuration), sender: SessionQueueSender(session: session), logger: sink,
                newKey: Self.newIdempotencyKey, onEvent: { events.emit($0) })
        } catch {
            store.close()
            throw error
        }
        _ = store.enforceBoundsAfterOpen()
    }

    /// The core's delivery settings for `configuration`: its dispositions and judge, with
    /// `URLRequest`s, `Data` and `Date`s made from the core's bytes and times and back.
    private static func settings(_ configuration: Configuration) -> QueueDeliverySettings {
        let disposition = configuration.disposition
        var judge: (@Sendable (QueueAnswer) -> QueueDisposition)?
        if let judgeResponse = configuration.judge {
            judge = { answer in
                var inlineBody: Data?
                if case .inline(let bytes) = answer.payload.body { inlineBody = Data(bytes) }
                let record = Self.record(answer.entry, payload: answer.payload, headers: answer.sentHeaders)
                return Self.core(
                    judgeResponse(
                        DeliveryResponse(
                            record: record, response: answer.response, body: Data(answer.body), failures: answer.failures,
                            requestBody: inlineBody)))
            }
        }
        return QueueDeliverySettings(
            backoff: configuration.backoff, disposition: { Self.core(disposition($0)) }, judge: judge,
            deadLetterDirectory: configuration.deadLetterDirectory, maxConcurrentDeliveries: configuration.maxConcurrentDeliveries,
            inlineBodyLimit: configuration.inlineBodyLimit)
    }

    /// The core's form of a disposition; a replacement that is not a request the queue can
    /// hold is refused by the core's enqueue, which keeps the record and says why.
    private static func core(_ disposition: Disposition) -> QueueDisposition {
        switch disposition {
        case .delivered: return .delivered
        case .retry: return .retry
        case .discard: return .discard
        case .retryAfter(let delay): return .retryAfter(delay)
        case .deadLetter(let reason): return .deadLetter(reason: reason)
        case .replace(let requests):
            return .replace(
                with: requests.map { request in
                    var body: [BodySegment] = []
                    if let data = request.httpBody, !data.isEmpty { body = [.memory(DataBody(data))] }
                    return QueueSubmission(
                        method: (request.method ?? .get).rawValue, url: request.url?.absoluteString ?? "", headers: request.headers,
                        body: body)
                })
        }
    }

    deinit {
        if let observer = observer.withLock({ $0 }) { reachability?.removeObserver(observer) }
        core.close()
    }

    /// Stops delivery, syncs the cursor and releases the directory. Later calls fail with
    /// `.closed`.
    public func close() {
        stopDelivery()
        core.close()
    }

    // MARK: - Enqueue

    /// Queues `request` and returns once it is durable on disk.
    /// - Parameters:
    ///   - request: the request; its `httpBody` is the body unless `bodyFile` is given. An
    ///     `Idempotency-Key` header it carries is kept; otherwise one is made.
    ///   - bodyFile: a file whose contents are the body; it is copied into the queue (the
    ///     original may change or go away afterwards).
    /// - Returns: the queued record.
    /// - Throws: `OfflineQueueError`: `.queueFull` (`.rejectNew`), `.recordTooLarge`,
    ///   `.diskFull`, `.ioFailed`, `.invalidRequest`, `.bodyFileUnreadable`, `.closed`.
    @discardableResult
    public func enqueue(_ request: any URLRequestConvertible, bodyFile: String? = nil) throws(OfflineQueueError) -> Record {
        let urlRequest: URLRequest
        do {
            urlRequest = try request.asURLRequest()
        } catch {
            throw .invalidRequest(reason: "\(error)")
        }
        var body: [BodySegment] = []
        if let bodyFile {
            var info = stat()
            guard stat(bodyFile, &info) == 0 else { throw .bodyFileUnreadable(path: bodyFile, message: errnoMessage(errno)) }
            guard (info.st_mode & S_IFMT) == S_IFREG else { throw .bodyFileUnreadable(path: bodyFile, message: "not a regular file") }
            body = [.file(path: bodyFile, offset: 0, length: UInt64(info.st_size), fileSize: UInt64(info.st_size))]
        } else if let data = urlRequest.httpBody, !data.isEmpty {
            body = [.memory(DataBody(data))]
        }
        return try enqueue(urlRequest, body: body)
    }

    /// Queues `urlRequest` with a body made of `body`'s pieces (bytes, file ranges); its
    /// `httpBody` is ignored. `OfflineQueueDeferrer` uses it for uploads and multipart forms.
    func enqueue(_ urlRequest: URLRequest, body segments: [BodySegment]) throws(OfflineQueueError) -> Record {
        guard let url = urlRequest.url else { throw .invalidRequest(reason: "it has no URL") }
        let (entry, payload) = try core.enqueue(
            QueueSubmission(
                method: (urlRequest.method ?? .get).rawValue, url: url.absoluteString, headers: urlRequest.headers, body: segments))
        return Self.record(entry, payload: payload)
    }

    /// The header that carries each record's key.
    public static let idempotencyKeyHeader = DeliveryQueue.idempotencyKeyHeader

    /// A version-4 UUID from the per-process seeded generator request ids use (no read of
    /// /dev/urandom per record).
    @Sendable static func newIdempotencyKey() -> String { RequestIdentifiers.next().uuidString.lowercased() }

    // MARK: - Inspecting

    /// A queue's records and statistics, read without taking its lock (while another
    /// process, e.g. the agent, has it open). Nothing is written; damage is skipped, not
    /// quarantined; an append in progress may be missing.
    public struct Inspection: Sendable {
        /// The records, oldest first (at most the `limit` asked for).
        public var records: [Record]
        /// The statistics (`headFailures` and `lastFailure` are those of a running process
        /// only, so 0 and nil here).
        public var statistics: Statistics
    }

    /// Reads the queue in `directory` without opening it for writing.
    /// - Parameters:
    ///   - directory: the queue's directory.
    ///   - limit: records to return at most; default all.
    /// - Returns: records and statistics.
    /// - Throws: `.directoryUnusable` when there is no queue, `.ioFailed` when reading fails.
    public static func inspect(directory: String, limit: Int = .max) throws(OfflineQueueError) -> Inspection {
        let store = try OfflineQueueStore(
            directory: directory,
            limits: .init(
                maxRecords: .max, maxBytes: .max, dropOldest: false, segmentBytes: Configuration.defaultSegmentBytes,
                cursorSyncInterval: .seconds(1)),
            logger: SwiftLogSink(Logger(label: "org.tinyfire.offline-queue.inspect")), readOnly: true)
        defer { store.close() }
        let records = store.entries(limit: limit).compactMap { entry in (try? store.read(entry)).map { record(entry, payload: $0) } }
        return Inspection(records: records, statistics: statistics(of: store, headFailures: 0, lastFailure: nil))
    }

    /// The queued records, oldest first, at most `limit`.
    /// - Parameter limit: how many; default all.
    /// - Returns: the records (one that can no longer be read is left out and logged).
    public func records(limit: Int = .max) -> [Record] {
        store.entries(limit: limit).compactMap { entry in
            do {
                return Self.record(entry, payload: try store.read(entry))
            } catch {
                logger.error("offline queue: \(error)")
                return nil
            }
        }
    }

    /// The record `entry` holds; `headers` replaces the queued ones (the judge sees those sent).
    static func record(_ entry: OfflineQueueStore.Entry, payload: OfflineQueueJournal.Payload, headers sent: HTTPHeaders? = nil) -> Record {
        var headers = HTTPHeaders()
        if let sent {
            headers = sent
        } else {
            for header in payload.headers { headers.append(name: header.name, value: header.value) }
        }
        var isFile = false
        if case .file = payload.body { isFile = true }
        return Record(
            sequence: entry.sequence, idempotencyKey: payload.idempotencyKey,
            enqueuedAt: Date(timeIntervalSince1970: Double(entry.enqueuedAtMilliseconds) / 1000),
            enqueuedOnBootClock: payload.enqueuedOnBootClock, method: HTTPMethod(rawValue: payload.method), url: payload.url,
            headers: headers, bodyLength: payload.body.length,
            bodyIsFile: isFile)
    }

    /// Counts, bytes, the oldest record's age and the counters.
    public var statistics: Statistics {
        let (failures, lastFailure) = core.headFailures
        return Self.statistics(of: store, headFailures: failures, lastFailure: lastFailure)
    }

    private static func statistics(of store: OfflineQueueStore, headFailures: Int, lastFailure: String?) -> Statistics {
        let totals = store.totals()
        return Statistics(
            records: totals.records, bytes: totals.bytes,
            oldestEnqueuedAt: totals.oldest.map { Date(timeIntervalSince1970: Double($0) / 1000) }, delivered: totals.cursor.delivered,
            droppedOldest: totals.cursor.droppedOldest, rejectedNew: totals.cursor.rejectedNew, discarded: totals.cursor.discarded,
            quarantined: totals.cursor.quarantined, headFailures: headFailures, lastFailure: lastFailure)
    }

    /// Calls `handler` on `queue` with every delivery event.
    /// - Parameters:
    ///   - queue: where; default a serial queue of the queue.
    ///   - handler: receives events.
    public func onDeliveryEvent(queue: DispatchQueue? = nil, _ handler: @escaping @Sendable (DeliveryEvent) -> Void) {
        let queue = queue ?? DispatchQueue(label: "org.tinyfire.offline-queue.events")
        events.handlers.withLock { $0.append((queue, handler)) }
    }

    // MARK: - Delivery

    /// Starts delivering in the background: now if there is anything to send (and the
    /// network is not known to be down), again at every enqueue, after each backoff, and at
    /// once whenever reachability reports the network back.
    public func startDelivery() {
        var initial = OfflineQueueReplay.Network.unknown
        if let reachability, observer.withLock({ $0 == nil }) {
            let id = reachability.addObserver { [weak self] status in self?.core.network(Self.network(status)) }
            observer.withLock { $0 = id }
            // Known before the first attempt: nothing is sent while the network is down.
            initial = Self.network(reachability.status)
        }
        core.start(network: initial)
    }

    private static func network(_ status: NetworkReachabilityManager.NetworkReachabilityStatus) -> OfflineQueueReplay.Network {
        switch status {
        case .unknown: return .unknown
        case .notReachable: return .notReachable
        case .reachable: return .reachable
        }
    }

    /// Stops delivering (an attempt in flight finishes; its record is removed if it succeeded).
    public func stopDelivery() {
        if let id = observer.withLock({ $0.take() }) { reachability?.removeObserver(id) }
        core.stop()
    }

    /// Stops delivering and calls `completion` once no attempt is in flight: at once when none
    /// is, otherwise when the one in flight has finished (its record removed if it succeeded,
    /// kept if not). A daemon waits for this, with a bound of its own, before it closes the
    /// queue at shutdown: what it does not wait for stays queued and is sent again.
    /// - Parameter completion: called once, on the queue's delivery thread.
    public func stopDelivery(completion: @escaping @Sendable () -> Void) {
        if let id = observer.withLock({ $0.take() }) { reachability?.removeObserver(id) }
        core.stop(completion: completion)
    }

    /// Sends every queued record now, in order, regardless of reachability and backoff,
    /// stopping at the first one that is not removed. Background delivery must be stopped; an
    /// attempt it had in flight is waited for first (a record is never sent twice at once).
    /// - Parameter completion: called once with what happened.
    public func flush(completion: @escaping @Sendable (Result<FlushResult, OfflineQueueError>) -> Void) {
        core.flush { outcome in
            completion(
                outcome.map {
                    FlushResult(delivered: $0.delivered, discarded: $0.discarded, remaining: $0.remaining, failure: $0.failure)
                })
        }
    }

    /// `flush(completion:)` for async callers.
    /// - Returns: what happened.
    /// - Throws: `.deliveryRunning` when background delivery is on.
    public func flush() async throws(OfflineQueueError) -> FlushResult {
        let result = await withCheckedContinuation { continuation in flush { continuation.resume(returning: $0) } }
        return try result.get()
    }

    /// Whether two URLs have the same origin: scheme, host (any case) and port (the scheme's
    /// default when absent).
    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        func origin(_ url: URL) -> (String, String, Int)? {
            guard let scheme = url.scheme?.lowercased(), let host = url.host()?.lowercased() else { return nil }
            return (scheme, host, url.port ?? (scheme == "https" ? 443 : 80))
        }
        guard let left = origin(a), let right = origin(b) else { return false }
        return left == right
    }
}

/// Sends the queue's records through a `Session`, so its interceptors and adapters apply.
private final class SessionQueueSender: QueueSender {
    let session: Session
    /// Where the session's responses are handed over (the core hops to its own thread).
    private let queue = DispatchQueue(label: "org.tinyfire.offline-queue.responses")

    init(session: Session) {
        self.session = session
    }

    func sendQueued(_ queued: QueuedSend, completion: @escaping @Sendable (QueueReply) -> Void) {
        guard let url = URL(string: queued.url) else {
            completion(.noResponse("invalid URL \(queued.url)"))
            return
        }
        var urlRequest = URLRequest(url: url, method: HTTPMethod(rawValue: queued.method), headers: queued.headers)
        let request: DataRequest
        switch queued.body {
        case .none:
            request = session.request(urlRequest)
        case .bytes(let bytes):
            urlRequest.httpBody = Data(bytes)
            request = session.request(urlRequest)
        case .file(let path, _):
            request = session.upload(URL(filePath: path), with: urlRequest)
        }
        // Only the addressed server's own answer counts: a redirect is followed only when it keeps
        // the method and the origin (307/308 on the same scheme, host and port). Anything else
        // (a captive portal's 302 to its login page) is the answer judged: not a delivery.
        request.redirect(
            using: Redirector.modify { _, next, response in
                let code = response.status.code
                guard code == 307 || code == 308, let target = next.url, OfflineQueue.sameOrigin(target, url) else { return nil }
                return next
            })
        let limit = queued.bodyLimit
        request.response(queue: queue) { response in
            guard let head = response.response?.head else {
                completion(.noResponse(response.error.map { "\($0)" } ?? "no response"))
                return
            }
            completion(.answered(head, body: Array((response.data ?? Data()).prefix(limit))))
        }
    }
}
