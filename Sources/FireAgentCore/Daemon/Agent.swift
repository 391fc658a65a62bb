import Dispatch
import HTTPTypes
import Synchronization
import TinyFire

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

/// What one collection and delivery cycle did (`fire-agent sync --once`).
public struct SyncReport: Sendable, Equatable {
    /// Points the collectors made.
    public var collectedPoints = 0
    /// Lines taken from spool files.
    public var spooledLines = 0
    /// Lines refused from spool files (kept in `rejected/`).
    public var rejectedLines = 0
    /// Batches queued this cycle.
    public var queuedBatches = 0
    /// Batches delivered by the flush.
    public var delivered = 0
    /// Batches removed without delivery (dead letters, split batches).
    public var discarded = 0
    /// Batches still queued.
    public var remaining = 0
    /// Why delivery stopped early, if it did.
    public var failure: String?
}

/// fire-agent's job, on the library: collectors and spool files become line protocol, cut into
/// batches, gzip'd and queued durably in the offline queue; the queue delivers them to InfluxDB
/// and the server's answer decides each batch's fate (`UploadVerdict`). Credentials are added
/// when a batch is sent, never stored in the queue, so a new token applies to queued batches.
public final class Agent: Sendable {
    /// The config in use.
    public let config: AgentConfig
    let logger: Logger
    /// The session every upload goes through.
    public let session: Session
    /// The durable queue of batches.
    public let queue: OfflineQueue
    /// What delivery has done, for status and the agent's own telemetry.
    public let tracker: DeliveryTracker
    private let files: SystemFiles
    /// The spool directory, when one is configured.
    private let spool: SpoolDirectory?
    private let collector: SendableBox<TelemetryCollector>
    /// Points collected and not yet queued (at most one batch: a full one is queued at once).
    private let pending: SendableBox<Batcher>
    /// What the wall clock can be trusted with.
    public let clock: WallClock
    /// Whether the clock was below its floor at the last collection (logged once per spell).
    private let belowFloor = Atomic<Bool>(false)

    /// Opens the agent's queue and session.
    /// - Parameters:
    ///   - config: the checked config.
    ///   - logger: where the agent logs.
    ///   - files: where /proc and /sys are (tests give a fake board).
    ///   - reachability: drives the queue's background delivery (waits while the route to the
    ///     server is down, starts at once when it returns); nil for `sync --once`.
    ///   - clock: the wall clock's trust; default one with its floor in `<queue.directory>/clock-floor`.
    /// - Throws: `AgentError` when the queue cannot be opened or TLS cannot be set up.
    public init(
        config: AgentConfig, logger: Logger, files: SystemFiles = SystemFiles(), reachability: NetworkReachabilityManager? = nil,
        clock: WallClock? = nil
    ) throws(AgentError) {
        self.config = config
        let clock = clock ?? WallClock(floorFile: config.queue.directory + "/clock-floor", requireSync: config.clock.requireSync)
        self.clock = clock
        self.logger = logger
        self.files = files
        // The agent's own state must be changeable by nobody else (docs/OPERATIONS.md).
        for (key, directory) in [
            ("queue.directory", config.queue.directory), ("queue.deadLetterDirectory", config.queue.deadLetterDirectory),
        ] {
            if let problem = FileTrust.privateDirectoryProblem(directory) { throw AgentError(description: "\(key): \(problem)") }
        }
        spool = config.telemetry.spoolDirectory.map {
            SpoolDirectory(
                path: $0, progressPath: config.queue.directory + "/spool-progress",
                maxFileBytes: config.telemetry.spoolMaxFileBytes, maxLineBytes: config.telemetry.batchMaxBytes, logger: logger)
        }
        guard let writeURL = Self.writeURL(for: config) else {
            throw AgentError(description: "server.url: \(config.server.url) is not a URL Foundation reads")
        }
        self.writeURL = writeURL
        var configuration = SessionConfiguration()
        configuration.connectTimeout = config.server.connectTimeout
        configuration.idleTimeout = config.server.idleTimeout
        configuration.totalTimeout = config.server.requestTimeout
        if let caFile = config.server.caFile { configuration.tls.caCertificateFiles = [caFile] }
        configuration.tls.clientCertificateFile = config.server.clientCertificate
        configuration.tls.clientKeyFile = config.server.clientKey
        configuration.proxy = config.network.proxy
        configuration.maxConnectionsPerHost = max(configuration.maxConnectionsPerHost, config.queue.inFlight)
        var trust: ServerTrustManager?
        if !config.server.pins.isEmpty, let host = config.server.url.host {
            do {
                trust = ServerTrustManager(evaluators: [host: try PublicKeysTrustEvaluator(pins: config.server.pins)])
            } catch {
                throw AgentError(description: "server.pins: \(error)")
            }
        }
        let authorization = BatchUpload.authorization(for: config.telemetry.api)
        let adapter = Adapter { request, _, completion in
            var request = request
            if let authorization { request.headers.update(name: "Authorization", value: authorization) }
            completion(.success(request))
        }
        session = Session(configuration: configuration, interceptor: adapter, serverTrustManager: trust)
        var queueConfiguration = OfflineQueue.Configuration(
            maxRecords: config.queue.maxRecords, maxBytes: config.queue.maxBytes,
            inlineBodyLimit: OfflineQueue.Configuration.maximumInlineBodyLimit)
        queueConfiguration.deadLetterDirectory = config.queue.deadLetterDirectory
        queueConfiguration.overflowPolicy = config.queue.overflow
        queueConfiguration.maxConcurrentDeliveries = config.queue.inFlight
        queueConfiguration.backoff = OfflineQueue.Backoff(initial: config.queue.retryInitial, maximum: config.queue.retryMaximum)
        let maxAge = config.queue.maxRecordAge
        let batchBytes = config.telemetry.batchMaxBytes
        queueConfiguration.judge = { answer in
            Self.judge(answer, maxAge: maxAge, age: clock.age(of: answer.record), batchBytes: batchBytes)
        }
        do {
            queue = try OfflineQueue(
                directory: config.queue.directory, configuration: queueConfiguration, session: session, reachability: reachability,
                logger: logger.swiftLogger)
        } catch {
            throw AgentError(description: "queue.directory \(config.queue.directory): \(error)")
        }
        let tags = ["device": config.device.id].merging(config.device.labels) { first, _ in first }
        let queue = self.queue
        let tracker = DeliveryTracker(deadLetters: Self.countDeadLetters(in: config.queue.deadLetterDirectory))
        self.tracker = tracker
        queue.onDeliveryEvent { event in tracker.record(event) }
        collector = SendableBox(
            TelemetryCollector(
                collectors: config.telemetry.collectors, tags: tags, files: files, logger: logger,
                agentHealth: { Self.health(queue.statistics, tracker: tracker) }))
        pending = SendableBox(Batcher(maxPoints: config.telemetry.batchMaxPoints, maxBytes: config.telemetry.batchMaxBytes))
    }

    /// Dead letters already kept (one `.json` description each).
    static func countDeadLetters(in directory: String) -> Int {
        SystemFiles().list(directory).filter { $0.hasSuffix(".json") }.count
    }

    /// Collectors switched off on this board, with the reason.
    public var stoppedCollectors: [String: String] { collector.value.stopped }

    /// Closes the queue.
    public func close() { queue.close() }

    /// Where batches are written: `/write` (v1) or `/api/v2/write` (v2) with the query the
    /// API needs; the base URL's own path is kept in front. Built once.
    public let writeURL: URL

    static func writeURL(for config: AgentConfig) -> URL? {
        guard var components = URLComponents(string: config.server.url.absoluteString) else { return nil }
        let base = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
        var query: [URLQueryItem] = []
        switch config.telemetry.api {
        case .v1(let database, let retention, _, _):
            components.path = base + "/write"
            query = [URLQueryItem(name: "db", value: database)]
            if let retention { query.append(URLQueryItem(name: "rp", value: retention)) }
        case .v2(let organization, let bucket, _):
            components.path = base + "/api/v2/write"
            query = [URLQueryItem(name: "org", value: organization), URLQueryItem(name: "bucket", value: bucket)]
        }
        query.append(URLQueryItem(name: "precision", value: config.telemetry.precision.rawValue))
        components.queryItems = query
        return components.url
    }

    /// The request that uploads `batch`: gzip'd line protocol.
    func request(for batch: Batch) throws(AgentError) -> URLRequest {
        var request = URLRequest(url: writeURL, method: .post)
        request.headers.update(name: "Content-Type", value: "text/plain; charset=utf-8")
        request.headers.update(name: "Content-Encoding", value: "gzip")
        request.httpBody = Data(try BatchUpload.body(for: batch))
        return request
    }

    /// The fate of a batch after the server answered (`BatchUpload.judge`), as the library's
    /// queue takes it.
    /// - Parameters:
    ///   - answer: the server's answer.
    ///   - maxAge: `queue.maxRecordAge`.
    ///   - age: the batch's age (`WallClock.age(of:)`); nil when it cannot be known.
    ///   - batchBytes: `telemetry.batchMaxBytes`.
    static func judge(_ answer: OfflineQueue.DeliveryResponse, maxAge: Duration, age: Duration?, batchBytes: Int)
        -> OfflineQueue.Disposition
    {
        let fate = BatchUpload.judge(
            status: answer.response.status.code, retryAfter: answer.response.headerFields[HTTPField.Name("Retry-After")!],
            message: Array(answer.body), requestBody: answer.requestBody.map { Array($0) }, maxAge: maxAge, age: age,
            batchBytes: batchBytes, now: .now())
        switch fate {
        case .delivered: return .delivered
        case .retry: return .retry
        case .retryAfter(let delay): return .retryAfter(delay)
        case .deadLetter(let reason): return .deadLetter(reason: reason)
        case .split(let bodies):
            guard let url = URL(string: answer.record.url) else { return .retry }
            return .replace(
                with: bodies.map { body in
                    var request = URLRequest(url: url, method: .post)
                    request.headers = answer.record.headers
                    request.headers.remove(name: OfflineQueue.idempotencyKeyHeader)
                    request.httpBody = Data(body)
                    return request
                })
        }
    }

    /// The `fire_agent` measurement's fields.
    static func health(_ statistics: OfflineQueue.Statistics, tracker: DeliveryTracker) -> [String: Point.Value] {
        var fields: [String: Point.Value] = [
            "queue_records": .integer(Int64(statistics.records)), "queue_bytes": .integer(statistics.bytes),
            "delivered": .integer(Int64(clamping: statistics.delivered)), "dropped": .integer(Int64(clamping: statistics.droppedOldest)),
            "rejected": .integer(Int64(clamping: statistics.rejectedNew)), "discarded": .integer(Int64(clamping: statistics.discarded)),
            "quarantined": .integer(Int64(clamping: statistics.quarantined)),
        ]
        if let age = statistics.oldestAge() { fields["oldest_record_age"] = .float(age) }
        let delivery = tracker.snapshot
        fields["dead_letters"] = .integer(Int64(delivery.deadLetters))
        fields["spool_rejected"] = .integer(Int64(delivery.rejectedSpoolLines))
        if let success = delivery.lastSuccess {
            fields["last_success_age"] = .float(max(0, Double(WallTime.now().duration(since: success).wholeMilliseconds) / 1000))
        }
        if let rss = residentBytes() { fields["rss"] = .integer(rss) }
        return fields
    }

    /// Resident set size from /proc/self/statm.
    static func residentBytes() -> Int64? {
        guard let text = SystemFiles().read("/proc/self/statm") else { return nil }
        let parts = text.split(separator: " ")
        guard parts.count > 1, let pages = Int64(parts[1]) else { return nil }
        return pages * Int64(sysconf(Int32(_SC_PAGESIZE)))
    }

    // MARK: - One cycle

    /// Collects one round, takes the spool files, queues the batches and delivers the queue
    /// once (`fire-agent sync --once`). Background delivery must be off.
    /// - Parameter timestamp: the round's time, ns since the epoch.
    /// - Returns: what happened.
    public func syncOnce(timestamp: Int64 = Agent.now()) -> SyncReport {
        var report = SyncReport()
        report.collectedPoints = collect(timestamp: timestamp)
        queuePending(into: &report)
        let done = DispatchSemaphore(value: 0)
        let outcome = SendableBox<Result<OfflineQueue.FlushResult, OfflineQueueError>?>(nil)
        queue.flush { result in
            outcome.value = result
            done.signal()
        }
        done.wait()
        switch outcome.value {
        case .success(let result):
            report.delivered = result.delivered
            report.discarded = result.discarded
            report.remaining = result.remaining
            report.failure = result.failure
        case .failure(let error):
            report.failure = "\(error)"
            report.remaining = queue.statistics.records
        case nil:
            break
        }
        return report
    }

    /// Runs the collectors once; their points join the pending batch, and a batch that fills
    /// up is queued at once.
    /// - Parameter timestamp: the round's time, ns since the epoch (every point carries it).
    /// - Returns: how many points were collected.
    @discardableResult
    public func collect(timestamp: Int64 = Agent.now()) -> Int {
        guard clockAllowsStamping(at: timestamp) else { return 0 }
        var count = 0
        var batcher = pending.value
        defer { pending.value = batcher }
        for point in collector.value.collect(timestamp: timestamp) {
            guard let line = LineProtocol.encode(point, precision: config.telemetry.precision) else { continue }
            count += 1
            do {
                if let full = try batcher.add(line) { _ = enqueue(full) }
            } catch {
                logger.warning("point not sent", metadata: ["measurement": "\(point.measurement)", "reason": "\(error)"])
            }
        }
        return count
    }

    /// Queues the pending points and the spool directory's files (the sync step).
    /// - Parameter report: receives the counts.
    public func queuePending(into report: inout SyncReport) {
        var batcher = pending.value
        defer { pending.value = batcher }
        var failed = false
        var queued = 0
        defer { report.queuedBatches += queued }
        /// Queues a batch; false when it could not be (the queue is full or the disk failed).
        func enqueue(_ batch: Batch?) -> Bool {
            guard let batch else { return true }
            guard !failed else { return false }
            guard self.enqueue(batch) else {
                failed = true
                return false
            }
            queued += 1
            return true
        }
        // The collectors' points open the batch; spool lines fill it up to the batch limits.
        if let spool, clockAllowsStamping(at: Self.now()) {
            let precision = config.telemetry.precision
            let pass = spool.take(batcher: &batcher, stamp: { LineProtocol.scale(Self.now(), to: precision) }) { enqueue($0) }
            report.spooledLines += pass.queuedLines
            report.rejectedLines += pass.rejectedLines
        }
        _ = enqueue(batcher.flush())
        if report.rejectedLines > 0 { tracker.rejectedSpool(report.rejectedLines) }
    }

    /// Whether points may be stamped at `timestamp`: not while the clock is below its floor.
    /// Collection then waits (those rounds' samples are not taken) and spool files stay where
    /// they are; logged once per spell.
    private func clockAllowsStamping(at timestamp: Int64) -> Bool {
        let now = Date(timeIntervalSince1970: Double(timestamp) / 1_000_000_000)
        let allowed = clock.mayStamp(at: now)
        let wasBelow = belowFloor.exchange(!allowed, ordering: .relaxed)
        if !allowed && !wasBelow {
            logger.warning(
                "clock before its floor: collection and spool files wait",
                metadata: ["clock": "\(AgentLogHandler.timestamp(now))", "floor": "\(clock.floor)"])
        } else if allowed && wasBelow {
            logger.notice("clock past its floor: collection resumes", metadata: ["clock": "\(AgentLogHandler.timestamp(now))"])
        }
        return allowed
    }

    /// Queues one batch durably; false (logged) when the queue refused it.
    private func enqueue(_ batch: Batch) -> Bool {
        do {
            _ = try queue.enqueue(try request(for: batch))
            return true
        } catch {
            logger.error("batch not queued", metadata: ["reason": "\(error)", "lines": "\(batch.lines.count)"])
            return false
        }
    }

    /// Now, in nanoseconds since the epoch.
    public static func now() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}

/// A value shared across threads under a lock.
final class SendableBox<Value>: @unchecked Sendable {
    private let lock = Mutex(())
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { _ in stored } }
        set { lock.withLock { _ in stored = newValue } }
    }
}
