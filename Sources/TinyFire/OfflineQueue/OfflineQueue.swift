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
    /// What happens to a new record when the queue is at a bound.
    public enum OverflowPolicy: String, Sendable {
        /// Refuse it with `OfflineQueueError.queueFull` (counted in `rejectedNew`).
        case rejectNew
        /// Accept it and drop the oldest records until the queue fits (counted in `droppedOldest`).
        case dropOldest
    }

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
    public struct Backoff: Sendable {
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
            let base = Double(initial.nanosecondsClamped) * pow(multiplier, Double(max(0, failure - 1)))
            let capped = min(base, Double(maximum.nanosecondsClamped))
            let spread = capped * (1 + jitter * (2 * min(max(random, 0), 1) - 1))
            return .nanoseconds(Int64(max(0, min(spread, Double(Int64.max / 2)))))
        }
    }

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
        public static let defaultSegmentBytes = 4 << 20
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
        /// the head's failures count for the backoff; a later record the server does not
        /// simply take (a retry, a dead letter, a split) waits until it is the head and is
        /// judged then. Memory: up to this many requests and their responses (up to
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
    public enum DeliveryEvent: Sendable, Equatable {
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
    let session: Session
    let reachability: NetworkReachabilityManager?
    let logger: Logger
    let store: OfflineQueueStore
    private let deliveryQueue = DispatchQueue(label: "org.tinyfire.offline-queue")
    private let delivery = Mutex(Delivery())

    private struct Delivery {
        var replay = OfflineQueueReplay()
        var timerGeneration: UInt64 = 0
        var observer: UInt64?
        var flushing = false
        /// Between `startDelivery` and `stopDelivery`.
        var running = false
        var lastFailure: String?
        /// The delay a `.retryAfter` disposition asked for, used by the next retry timer.
        var retryAfter: Duration?
        /// Attempts in flight in background delivery (the head's and the window's).
        var attemptsInFlight = 0
        /// Records after the head sent by the window: in flight, or taken by the server and
        /// waiting to be removed in order.
        var window: [UInt64: WindowEntry] = [:]
        /// Records after the head the server did not simply take: sent again only as the head.
        var deferredToHead: Set<UInt64> = []
        /// The head is a record the window already sent: its attempt's outcome is the head's.
        var headRidesWindow: UInt64?
        /// Called once the attempt in flight has finished (`stopDelivery(completion:)`).
        var idleWaiters: [@Sendable () -> Void] = []
        var handlers: [(DispatchQueue, @Sendable (DeliveryEvent) -> Void)] = []
    }

    /// A record after the head, sent early (`maxConcurrentDeliveries` above 1).
    private enum WindowEntry {
        case inFlight
        /// Taken by the server: removed once every record before it is.
        case settled(OfflineQueueStore.Removal, status: Int, idempotencyKey: String)
    }

    /// A dead letter's description (`<sequence>.json`); times in ms since the epoch.
    private struct DeadLetter: Encodable {
        let method: String
        let url: String
        /// The status as text, as the first dead letters were written.
        let status: String
        let reason: String
        let idempotencyKey: String
        let enqueuedAt: UInt64
        let deadLetteredAt: UInt64
        let headers: [String: String]
    }

    /// Writes a dead-lettered record to `deadLetterDirectory`: the request's description and
    /// reason as JSON, and its body. Credentials (Authorization, Cookie, Proxy-Authorization)
    /// are not written. Failures are logged; the record is dead either way.
    private func keepDeadLetter(entry: OfflineQueueStore.Entry, payload: OfflineQueueJournal.Payload, status: Int, reason: String) {
        guard let directory = configuration.deadLetterDirectory else { return }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let base = directory + "/" + String(entry.sequence)
            switch payload.body {
            case .none: break
            case .inline(let bytes): try Data(bytes).write(to: URL(filePath: base + ".body"))
            case .file(let name, _): try FileManager.default.copyItem(atPath: store.bodyPath(name), toPath: base + ".body")
            }
            let secret: Set<String> = ["authorization", "cookie", "proxy-authorization"]
            var headers: [String: String] = [:]
            for header in payload.headers where !secret.contains(header.name.lowercased()) { headers[header.name] = header.value }
            let description = DeadLetter(
                method: payload.method, url: payload.url, status: String(status), reason: reason, idempotencyKey: payload.idempotencyKey,
                enqueuedAt: entry.enqueuedAtMilliseconds, deadLetteredAt: UInt64(max(0, Date().timeIntervalSince1970 * 1000)),
                headers: headers)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
            try encoder.encode(description).write(to: URL(filePath: base + ".json"))
        } catch {
            logger.error("offline queue: record \(entry.sequence) could not be kept as a dead letter in \(directory): \(error)")
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
        self.session = session
        self.reachability = reachability
        self.logger = logger
        store = try OfflineQueueStore(
            directory: directory,
            limits: .init(
                maxRecords: configuration.maxRecords, maxBytes: configuration.maxBytes,
                dropOldest: configuration.overflowPolicy == .dropOldest, segmentBytes: configuration.segmentBytes,
                cursorSyncInterval: configuration.cursorSyncInterval),
            logger: SwiftLogSink(logger))
        _ = store.enforceBoundsAfterOpen()
    }

    deinit {
        // No work may be queued from here (it would reference a deallocating object).
        if let observer = delivery.withLock({ $0.observer }) { reachability?.removeObserver(observer) }
        store.close()
    }

    /// Stops delivery, syncs the cursor and releases the directory. Later calls fail with
    /// `.closed`.
    public func close() {
        stopDelivery()
        store.syncCursor()
        store.close()
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
            body = [.bytes(data)]
        }
        return try enqueue(urlRequest, body: body)
    }

    /// Queues `urlRequest` with a body made of `body`'s pieces (bytes, file ranges); its
    /// `httpBody` is ignored. `OfflineQueueDeferrer` uses it for uploads and multipart forms.
    func enqueue(_ urlRequest: URLRequest, body segments: [BodySegment]) throws(OfflineQueueError) -> Record {
        guard let url = urlRequest.url else { throw .invalidRequest(reason: "it has no URL") }
        let method = urlRequest.method ?? .get
        let idempotencyKey = urlRequest.headers.value(for: Self.idempotencyKeyHeader).map(Self.unquoted) ?? Self.newIdempotencyKey()
        let headers = urlRequest.headers.headers.map { (name: $0.name, value: $0.value) }

        // The body: inline, or a file in bodies/ that is durable before the record points at it.
        let bodyLength = segments.reduce(UInt64(0)) { $0 + $1.length }
        let inline = bodyLength <= UInt64(configuration.inlineBodyLimit)
        let fileName = inline ? nil : Self.randomName() + ".body"
        let body: OfflineQueueJournal.Body
        if bodyLength == 0 {
            body = .none
        } else if let fileName {
            body = .file(name: fileName, length: bodyLength)
        } else {
            body = .inline(try Self.readSmallBody(segments, length: bodyLength))
        }
        let payload = OfflineQueueJournal.Payload(
            method: method.rawValue, url: url.absoluteString, idempotencyKey: idempotencyKey, headers: headers, body: body,
            enqueuedOnBootClock: BootInstant.now())
        if let problem = OfflineQueueJournal.validate(payload) {
            if case .file = body { throw .invalidRequest(reason: problem) }
            throw .recordTooLarge(bytes: Int64(bodyLength), limit: Int64(OfflineQueueJournal.maxPayloadLength))
        }
        let payloadBytes = OfflineQueueJournal.encodePayload(payload)
        let recordBytes = Int64(OfflineQueueJournal.headerLength + payloadBytes.count) + (fileName == nil ? 0 : Int64(bodyLength))

        try store.reserve(bytes: recordBytes)
        if let fileName {
            do {
                try writeBodyFile(fileName, from: segments)
            } catch {
                store.release(bytes: recordBytes)
                throw error
            }
        }
        let now = Date()
        let milliseconds = UInt64(max(0, now.timeIntervalSince1970 * 1000))
        let (entry, dropped) = try store.append(
            payload: payloadBytes, payloadChecksum: OfflineQueueJournal.checksum(payloadBytes[...]), enqueuedAt: milliseconds,
            bodyFile: fileName, bodyBytes: fileName == nil ? 0 : Int64(bodyLength), reservedBytes: recordBytes)
        for entry in dropped { emit(.dropped(sequence: entry.sequence)) }
        // Wake delivery only when it runs (a hop to its thread per enqueue otherwise); the
        // record is appended before the check, and `startDelivery` counts records after it sets
        // the flag, so a start racing with this enqueue still sees the record.
        if delivery.withLock({ $0.running }) {
            deliveryQueue.async { [self] in
                for _ in dropped { handle(.headRemoved(more: store.count > 0)) }
                handle(.recordsAvailable)
                fillWindow()  // a record behind a head in flight goes at once, within the window
            }
        }
        return Record(
            sequence: entry.sequence, idempotencyKey: idempotencyKey, enqueuedAt: Date(timeIntervalSince1970: Double(milliseconds) / 1000),
            enqueuedOnBootClock: payload.enqueuedOnBootClock, method: method, url: url.absoluteString, headers: urlRequest.headers,
            bodyLength: bodyLength, bodyIsFile: fileName != nil)
    }

    /// The header that carries each record's key.
    public static let idempotencyKeyHeader = "Idempotency-Key"

    /// A small body's bytes, read from its pieces (at most `inlineBodyLimit`).
    private static func readSmallBody(_ segments: [BodySegment], length: UInt64) throws(OfflineQueueError) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(length))
        for segment in segments {
            switch segment {
            case .memory(let memory): memory.withBodyBytes { bytes.append(contentsOf: $0) }
            case .file(let path, let offset, let count, _):
                let fd = open(path, O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { throw .bodyFileUnreadable(path: path, message: errnoMessage(errno)) }
                defer { Glibc.close(fd) }
                switch preadFully(fd, count: Int(count), at: Int64(offset)) {
                case .success(let chunk): bytes.append(contentsOf: chunk)
                case .failure(let failure):
                    throw .bodyFileUnreadable(
                        path: path, message: failure.code == 0 ? "it shrank while being read" : errnoMessage(failure.code))
                }
            }
        }
        return bytes
    }

    /// Writes a body file from its pieces completely (file ranges copied with sendfile),
    /// syncs it and its directory; removes it on failure.
    private func writeBodyFile(_ name: String, from segments: [BodySegment]) throws(OfflineQueueError) {
        let path = store.bodyPath(name)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io(errno, path: path, operation: "create body file") }
        var failure: OfflineQueueError?
        var written: UInt64 = 0
        for segment in segments where failure == nil {
            switch segment {
            case .memory(let memory):
                var copy: [UInt8] = []
                memory.withBodyBytes { copy = Array($0) }
                failure = writeAll(fd, copy, at: Int64(written), path: path)
            case .file(let original, let start, let length, _):
                let input = open(original, O_RDONLY | O_CLOEXEC)
                guard input >= 0 else {
                    failure = .bodyFileUnreadable(path: original, message: errnoMessage(errno))
                    break
                }
                // sendfile writes at the output's file offset: keep it at `written`.
                lseek(fd, off_t(written), SEEK_SET)
                var offset = Int64(start)
                let end = Int64(start + length)
                while failure == nil && offset < end {
                    let sent = tinyfire_sendfile(fd, input, &offset, UInt(min(Int64(1 << 30), end - offset)))
                    if sent < 0 && errno == EINTR { continue }
                    if sent < 0 { failure = .io(errno, path: path, operation: "copy \(original) into") }
                    if sent == 0 { failure = .bodyFileUnreadable(path: original, message: "it shrank while being copied") }
                }
                Glibc.close(input)
            }
            written += segment.length
        }
        if failure == nil, fsync(fd) != 0 { failure = .io(errno, path: path, operation: "sync") }
        Glibc.close(fd)
        if failure == nil { failure = syncQueueDirectory(store.bodiesDirectory) }
        if let failure {
            unlink(path)
            throw failure
        }
    }

    /// A version-4 UUID from the per-process seeded generator request ids use (no read of
    /// /dev/urandom per record).
    static func newIdempotencyKey() -> String { RequestIdentifiers.next().uuidString.lowercased() }

    private static func randomName() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<2).map { _ in
            let value = generator.next() as UInt64
            let hex = String(value, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
    }

    /// A structured-field string's content (`"abc"` → `abc`); other values as they are.
    static func unquoted(_ value: String) -> String {
        value.count >= 2 && value.hasPrefix("\"") && value.hasSuffix("\"") ? String(value.dropFirst().dropLast()) : value
    }

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

    static func record(_ entry: OfflineQueueStore.Entry, payload: OfflineQueueJournal.Payload) -> Record {
        var headers = HTTPHeaders()
        for header in payload.headers { headers.append(name: header.name, value: header.value) }
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
        let (failures, lastFailure) = delivery.withLock { ($0.replay.failures, $0.lastFailure) }
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
        delivery.withLock { $0.handlers.append((queue, handler)) }
    }

    private func emit(_ event: DeliveryEvent) {
        for (queue, handler) in delivery.withLock({ $0.handlers }) { queue.async { handler(event) } }
    }

    // MARK: - Delivery

    /// Starts delivering in the background: now if there is anything to send (and the
    /// network is not known to be down), again at every enqueue, after each backoff, and at
    /// once whenever reachability reports the network back.
    public func startDelivery() {
        delivery.withLock { $0.running = true }
        var initial = OfflineQueueReplay.Network.unknown
        if let reachability, delivery.withLock({ $0.observer == nil }) {
            let id = reachability.addObserver { [weak self] status in
                guard let self else { return }
                let network = Self.network(status)
                self.deliveryQueue.async { self.handle(.network(network)) }
            }
            delivery.withLock { $0.observer = id }
            // Known before the first attempt: nothing is sent while the network is down.
            initial = Self.network(reachability.status)
        }
        let network = initial
        deliveryQueue.async { [self] in
            handle(.network(network))
            handle(.start(hasRecords: store.count > 0))
        }
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
        let observer = delivery.withLock {
            let observer = $0.observer
            $0.observer = nil
            $0.running = false
            return observer
        }
        if let observer { reachability?.removeObserver(observer) }
        deliveryQueue.async { [self] in handle(.stop) }
    }

    /// Stops delivering and calls `completion` once no attempt is in flight: at once when none
    /// is, otherwise when the one in flight has finished (its record removed if it succeeded,
    /// kept if not). A daemon waits for this, with a bound of its own, before it closes the
    /// queue at shutdown: what it does not wait for stays queued and is sent again.
    /// - Parameter completion: called once, on the queue's delivery queue.
    public func stopDelivery(completion: @escaping @Sendable () -> Void) {
        stopDelivery()
        deliveryQueue.async { [self] in
            let idle = delivery.withLock { state -> Bool in
                guard state.attemptsInFlight > 0 else { return true }
                state.idleWaiters.append(completion)
                return false
            }
            if idle { completion() }
        }
    }

    /// Runs on `deliveryQueue`.
    private func handle(_ event: OfflineQueueReplay.Event) {
        let actions = delivery.withLock { $0.replay.handle(event) }
        for action in actions {
            switch action {
            case .sendHead:
                sendHead()
                fillWindow()
            case .cancelRetry:
                delivery.withLock { $0.timerGeneration += 1 }
            case .scheduleRetry(let failure):
                // A server's Retry-After, when it gave one, replaces the backoff for this wait;
                // zero (or a date already past) counts as none, as curl counts it: a server that
                // says "now" at every refusal must not turn the backoff into a busy loop.
                let asked = delivery.withLock { state -> Duration? in
                    defer { state.retryAfter = nil }
                    return state.retryAfter.flatMap { $0 > .zero ? $0 : nil }
                }
                let delay = asked ?? configuration.backoff.delay(afterFailure: failure, random: Double.random(in: 0...1))
                let generation = delivery.withLock {
                    $0.timerGeneration += 1
                    return $0.timerGeneration
                }
                deliveryQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: delay.nanosecondsClamped))) { [weak self] in
                    // A cancelled or replaced timer has an older generation.
                    guard let self, self.delivery.withLock({ $0.timerGeneration }) == generation else { return }
                    self.handle(.timerFired)
                }
            }
        }
    }

    /// Sends the head record; reports the outcome back on `deliveryQueue`.
    private func sendHead() {
        // A head the window saw taken already (the records before it went another way, an
        // overflow say) is removed, not sent again.
        let before = store.first?.sequence
        removeSettled()
        if before != nil, store.first?.sequence != before {
            handle(.headRemoved(more: store.count > 0))
            return
        }
        let riding = delivery.withLock { state -> Bool in
            guard let head = store.first, case .inFlight? = state.window[head.sequence] else { return false }
            state.headRidesWindow = head.sequence
            return true
        }
        if riding { return }  // sent already, by the window: not twice at once
        delivery.withLock { $0.attemptsInFlight += 1 }
        attemptHead { [self] outcome in
            if outcome == .removed { removeSettled() }
            let waiters = attemptEnded()
            switch outcome {
            case .removed: handle(.headRemoved(more: store.count > 0))
            case .failed: handle(.attemptFailed)
            case .empty: handle(.headRemoved(more: false))
            }
            for waiter in waiters { waiter() }
        }
    }

    /// Counts an attempt's end; the idle waiters once none is in flight.
    private func attemptEnded() -> [@Sendable () -> Void] {
        delivery.withLock { state in
            state.attemptsInFlight -= 1
            guard state.attemptsInFlight == 0 else { return [] }
            defer { state.idleWaiters = [] }
            return state.idleWaiters
        }
    }

    /// While the head is in flight, sends the records after it, up to
    /// `maxConcurrentDeliveries` at once. Runs on `deliveryQueue`.
    private func fillWindow() {
        let limit = configuration.maxConcurrentDeliveries
        guard limit > 1 else { return }
        for entry in store.entries(limit: limit).dropFirst() {
            let send = delivery.withLock { state -> Bool in
                guard state.replay.phase == .sending, state.attemptsInFlight < limit, state.window[entry.sequence] == nil,
                    !state.deferredToHead.contains(entry.sequence)
                else { return false }
                state.window[entry.sequence] = .inFlight
                state.attemptsInFlight += 1
                return true
            }
            guard send else { continue }
            attempt(entry) { [self] outcome in
                delivery.withLock { state in
                    switch outcome {
                    case .settled(let removal, let status, let key):
                        state.window[entry.sequence] = .settled(removal, status: status, idempotencyKey: key)
                    case .waitForHead:
                        state.window[entry.sequence] = nil
                        state.deferredToHead.insert(entry.sequence)
                    }
                }
                let wasHead = delivery.withLock { state -> Bool in
                    guard state.headRidesWindow == entry.sequence else { return false }
                    state.headRidesWindow = nil
                    return true
                }
                // The head may have been removed meanwhile: this one may be next in order.
                removeSettled()
                let waiters = attemptEnded()
                if wasHead {
                    // It became the head while in flight: its outcome moves the queue on, or
                    // it is sent again as the head and judged as one.
                    if case .settled = outcome {
                        handle(.headRemoved(more: store.count > 0))
                    } else if delivery.withLock({ $0.replay.phase == .sending }) {
                        sendHead()
                    }
                }
                for waiter in waiters { waiter() }
                fillWindow()
            }
        }
    }

    /// Removes, in order, the records at the head that the window's attempts saw taken.
    private func removeSettled() {
        guard configuration.maxConcurrentDeliveries > 1 else { return }  // no window: nothing settles early
        while let head = store.first {
            let settled = delivery.withLock { state -> (OfflineQueueStore.Removal, Int, String)? in
                state.window = state.window.filter { $0.key >= head.sequence }
                state.deferredToHead = state.deferredToHead.filter { $0 > head.sequence }
                guard case .settled(let removal, let status, let key)? = state.window[head.sequence] else { return nil }
                state.window[head.sequence] = nil
                return (removal, status, key)
            }
            guard let (removal, status, key) = settled else { return }
            store.removeHead(sequence: head.sequence, reason: removal)
            delivery.withLock { $0.lastFailure = nil }
            if removal == .delivered {
                emit(.delivered(sequence: head.sequence, idempotencyKey: key, status: status))
            } else {
                emit(.discarded(sequence: head.sequence, idempotencyKey: key, status: status))
            }
        }
    }

    private enum AttemptOutcome { case removed, failed, empty }

    /// One attempt of the head record: read it, send it, remove it or count the failure.
    private func attemptHead(completion: @escaping @Sendable (AttemptOutcome) -> Void) {
        guard let entry = store.first else {
            completion(.empty)
            return
        }
        let payload: OfflineQueueJournal.Payload
        do {
            payload = try store.read(entry)
        } catch {
            logger.error("offline queue: record \(entry.sequence) cannot be read back (\(error)); quarantined")
            store.removeHead(sequence: entry.sequence, reason: .quarantined)
            emit(.quarantined(sequence: entry.sequence, reason: error.description))
            completion(.removed)
            return
        }
        guard URL(string: payload.url) != nil else {
            store.removeHead(sequence: entry.sequence, reason: .quarantined)
            emit(.quarantined(sequence: entry.sequence, reason: "invalid URL \(payload.url)"))
            completion(.removed)
            return
        }
        let key = payload.idempotencyKey
        send(entry, payload, failures: delivery.withLock { $0.replay.failures }) { [self] judged in
            switch judged {
            case .noResponse(let reason): fail(reason)
            case .answered(let status, let disposition, let response):
                switch disposition {
                case .delivered:
                    store.removeHead(sequence: entry.sequence, reason: .delivered)
                    delivery.withLock { $0.lastFailure = nil }
                    emit(.delivered(sequence: entry.sequence, idempotencyKey: key, status: status))
                    completion(.removed)
                    return
                case .discard:
                    store.removeHead(sequence: entry.sequence, reason: .discarded)
                    logger.warning("offline queue: record \(entry.sequence) discarded: \(payload.method) \(payload.url) answered \(status)")
                    delivery.withLock { $0.lastFailure = nil }
                    emit(.discarded(sequence: entry.sequence, idempotencyKey: key, status: status))
                    completion(.removed)
                    return
                case .retry:
                    fail(Self.refusal(payload, status: status, response: response))
                case .retryAfter(let delay):
                    fail(Self.refusal(payload, status: status, response: response) + "; retry after \(delay)", after: delay)
                case .deadLetter(let reason):
                    keepDeadLetter(entry: entry, payload: payload, status: status, reason: reason)
                    store.removeHead(sequence: entry.sequence, reason: .discarded)
                    logger.warning("offline queue: record \(entry.sequence) dead-lettered: \(payload.method) \(payload.url): \(reason)")
                    delivery.withLock { $0.lastFailure = nil }
                    emit(.deadLettered(sequence: entry.sequence, idempotencyKey: key, status: status, reason: reason))
                    completion(.removed)
                    return
                case .replace(let replacements):
                    do throws(OfflineQueueError) {
                        for replacement in replacements { _ = try enqueue(replacement) }
                    } catch {
                        fail("\(payload.method) \(payload.url) answered \(status); its replacements could not be queued: \(error)")
                        return
                    }
                    store.removeHead(sequence: entry.sequence, reason: .discarded)
                    logger.notice("offline queue: record \(entry.sequence) replaced by \(replacements.count) after \(status)")
                    delivery.withLock { $0.lastFailure = nil }
                    emit(.replaced(sequence: entry.sequence, idempotencyKey: key, status: status, count: replacements.count))
                    completion(.removed)
                    return
                }
            }
        }

        @Sendable func fail(_ reason: String, after delay: Duration? = nil) {
            let failures = delivery.withLock {
                $0.lastFailure = reason
                $0.retryAfter = delay
                return $0.replay.failures + 1
            }
            logger.notice("offline queue: record \(entry.sequence) not delivered (\(reason)); attempt \(failures)")
            emit(.failed(sequence: entry.sequence, idempotencyKey: payload.idempotencyKey, reason: reason, failures: failures))
            completion(.failed)
        }
    }

    /// What the window's attempt of a record after the head came to.
    private enum WindowOutcome {
        /// Taken (or to be discarded): removed once the records before it are.
        case settled(OfflineQueueStore.Removal, status: Int, idempotencyKey: String)
        /// Anything else: judged again when it is the head.
        case waitForHead
    }

    /// One attempt of a record after the head (the window): never removes it.
    private func attempt(_ entry: OfflineQueueStore.Entry, completion: @escaping @Sendable (WindowOutcome) -> Void) {
        guard let payload = try? store.read(entry), URL(string: payload.url) != nil else {
            completion(.waitForHead)  // the head's path quarantines it
            return
        }
        send(entry, payload, failures: 0) { [logger] judged in
            guard case .answered(let status, let disposition, _) = judged else {
                completion(.waitForHead)
                return
            }
            switch disposition {
            case .delivered: completion(.settled(.delivered, status: status, idempotencyKey: payload.idempotencyKey))
            case .discard:
                logger.warning("offline queue: record \(entry.sequence) discarded: \(payload.method) \(payload.url) answered \(status)")
                completion(.settled(.discarded, status: status, idempotencyKey: payload.idempotencyKey))
            case .retry, .retryAfter, .deadLetter, .replace: completion(.waitForHead)
            }
        }
    }

    /// A record's attempt as the server answered it.
    private enum Judged {
        case answered(status: Int, disposition: Disposition, response: DataResponse<Data?, TinyFireError>)
        /// No answer (connection, TLS, timeout): why.
        case noResponse(String)
    }

    /// Sends one record and judges the answer (`judge`, or `disposition` by status).
    private func send(
        _ entry: OfflineQueueStore.Entry, _ payload: OfflineQueueJournal.Payload, failures: Int,
        completion: @escaping @Sendable (Judged) -> Void
    ) {
        guard let url = URL(string: payload.url) else {
            completion(.noResponse("invalid URL \(payload.url)"))
            return
        }
        var headers = HTTPHeaders()
        for header in payload.headers { headers.append(name: header.name, value: header.value) }
        if headers.value(for: Self.idempotencyKeyHeader) == nil {
            headers.add(name: Self.idempotencyKeyHeader, value: "\"\(payload.idempotencyKey)\"")
        }
        var urlRequest = URLRequest(url: url, method: HTTPMethod(rawValue: payload.method), headers: headers)
        let request: DataRequest
        switch payload.body {
        case .none:
            request = session.request(urlRequest)
        case .inline(let bytes):
            urlRequest.httpBody = Data(bytes)
            request = session.request(urlRequest)
        case .file(let name, _):
            request = session.upload(URL(filePath: store.bodyPath(name)), with: urlRequest)
        }
        // Only the addressed server's own answer counts: a redirect is followed only when it keeps
        // the method and the origin (307/308 on the same scheme, host and port). Anything else
        // (a captive portal's 302 to its login page) is the answer judged: not a delivery.
        request.redirect(
            using: Redirector.modify { _, next, response in
                let code = response.status.code
                guard code == 307 || code == 308, let target = next.url, Self.sameOrigin(target, url) else { return nil }
                return next
            })
        let key = payload.idempotencyKey
        let sentHeaders = headers
        request.response(queue: deliveryQueue) { [self] response in
            guard let status = response.response?.status.code else {
                completion(.noResponse(response.error.map { "\($0)" } ?? "no response"))
                return
            }
            let disposition: Disposition
            if let judge = configuration.judge, let head = response.response?.head {
                var inlineBody: Data?
                if case .inline(let bytes) = payload.body { inlineBody = Data(bytes) }
                let record = Record(
                    sequence: entry.sequence, idempotencyKey: key,
                    enqueuedAt: Date(timeIntervalSince1970: Double(entry.enqueuedAtMilliseconds) / 1000),
                    enqueuedOnBootClock: payload.enqueuedOnBootClock, method: HTTPMethod(rawValue: payload.method), url: payload.url,
                    headers: sentHeaders,
                    bodyLength: payload.body.length, bodyIsFile: inlineBody == nil && payload.body != .none)
                disposition = judge(
                    DeliveryResponse(
                        record: record, response: head, body: (response.data ?? Data()).prefix(Configuration.judgedBodyBytes),
                        failures: failures, requestBody: inlineBody))
            } else {
                disposition = configuration.disposition(status)
            }
            completion(.answered(status: status, disposition: disposition, response: response))
        }
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

    /// Why an answer did not deliver a record, in words: a redirect names where it pointed, a
    /// 2xx that was not accepted shows the start of its body (escaped).
    static func refusal(_ payload: OfflineQueueJournal.Payload, status: Int, response: DataResponse<Data?, TinyFireError>) -> String {
        var reason = "\(payload.method) \(payload.url) answered \(status)"
        if (300..<400).contains(status) {
            let location = response.response?.headerFields[.location] ?? "nowhere"
            reason += ", redirected to \(location): a captive portal or a wrong URL?"
        } else if (200..<300).contains(status) {
            let start = (response.data ?? Data()).prefix(80)
            let text = String(decoding: start, as: UTF8.self).unicodeScalars.map {
                $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F ? String($0) : $0.escaped(asASCII: true)
            }.joined()
            reason += " but it was not accepted as delivered" + (start.isEmpty ? "" : ": \"\(text)\"") + " (a captive portal or a proxy?)"
        }
        return reason
    }

    /// Sends every queued record now, in order, regardless of reachability and backoff,
    /// stopping at the first one that is not removed. Background delivery must be stopped.
    /// - Parameter completion: called once with what happened.
    public func flush(completion: @escaping @Sendable (Result<FlushResult, OfflineQueueError>) -> Void) {
        deliveryQueue.async { [self] in
            let busy = delivery.withLock { state -> Bool in
                guard state.replay.phase == .stopped, !state.flushing else { return true }
                state.flushing = true
                return false
            }
            guard !busy else {
                completion(.failure(.deliveryRunning))
                return
            }
            let before = store.totals().cursor
            @Sendable func step() {
                attemptHead { [self] outcome in
                    switch outcome {
                    case .removed: step()
                    case .empty, .failed:
                        let after = store.totals().cursor
                        let result = FlushResult(
                            delivered: Int(after.delivered - before.delivered), discarded: Int(after.discarded - before.discarded),
                            remaining: store.count, failure: outcome == .failed ? delivery.withLock { $0.lastFailure } : nil)
                        store.syncCursor()
                        delivery.withLock { $0.flushing = false }
                        completion(.success(result))
                    }
                }
            }
            step()
        }
    }

    /// `flush(completion:)` for async callers.
    /// - Returns: what happened.
    /// - Throws: `.deliveryRunning` when background delivery is on.
    public func flush() async throws(OfflineQueueError) -> FlushResult {
        let result = await withCheckedContinuation { continuation in flush { continuation.resume(returning: $0) } }
        return try result.get()
    }
}
