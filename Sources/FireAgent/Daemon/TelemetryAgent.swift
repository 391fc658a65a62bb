import HTTPTypes
import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// What one collection and delivery cycle did (`fire-agent sync --once`).
package struct SyncReport: Sendable, Equatable {
    /// Points the collectors made.
    package var collectedPoints = 0
    /// Lines taken from spool files.
    package var spooledLines = 0
    /// Lines refused from spool files (kept in `rejected/`).
    package var rejectedLines = 0
    /// Spool entries set aside whole (unread, or after too many refused lines).
    package var spoolSetAside = 0
    /// Whether taking the spool stopped at its deadline with files left (the next sync goes on).
    package var spoolYielded = false
    /// Batches queued this cycle.
    package var queuedBatches = 0
    /// Batches delivered by the flush.
    package var delivered = 0
    /// Batches removed without delivery (dead letters, split batches).
    package var discarded = 0
    /// Batches still queued.
    package var remaining = 0
    /// Why delivery stopped early, if it did.
    package var failure: String?

    /// Nothing done yet.
    package init() {}
}

/// fire-agent's telemetry job on the core alone, for the Embedded agent and the host: the
/// collectors and the spool directory's files become line protocol, cut into batches, gzip'd
/// and queued durably in the core's `DeliveryQueue`; the queue sends them through the core's
/// `Engine` (TLS, pins, proxy from the config) and the server's answer decides each batch's fate
/// (`InfluxWrite.judge`). Credentials are added when a batch is sent (the engine's default
/// fields), never stored in the queue, so a new token applies to queued batches.
///
/// Memory: the queue's (`queue.maxRecords` bounds its index; `queue.inFlight` batches in
/// flight, each at most `telemetry.batchMaxBytes` and 4 KiB of its answer), one pending batch
/// (`telemetry.batchMaxPoints`, `telemetry.batchMaxBytes`), one collection round's points and
/// the spool's one line at a time (`SpoolDirectory`).
package final class TelemetryAgent: Sendable {
    /// The config in use.
    package let config: AgentConfig
    /// What delivery has done, for status and the agent's own telemetry.
    package let tracker: DeliveryTracker
    /// What the wall clock can be trusted with.
    package let clock: WallClock
    /// Where batches are written: `/write` (v1) or `/api/v2/write` (v2) with the query the API
    /// needs, behind the base URL's own path.
    package let writeURL: AbsoluteURL
    let logger: Logger
    let store: OfflineQueueStore
    let queue: DeliveryQueue
    /// The fleet server this agent writes to, as set up from its config (the daemon's firmware
    /// client takes the same).
    package let server: FleetServer
    private let engine: Engine
    private let spool: SpoolDirectory?
    private let collector: Locked<TelemetryCollector>
    /// Points collected and not yet queued (at most one batch: a full one is queued at once).
    private let pending: Locked<Batcher>
    /// Whether the clock was below its floor at the last collection (logged once per spell).
    private let belowFloor = Locked(false)

    /// Opens the agent's queue and engine.
    /// - Parameters:
    ///   - config: the checked config.
    ///   - logger: where the agent logs (the queue's own lines go to its output too).
    ///   - files: where /proc and /sys are (tests give a fake board).
    ///   - clock: the wall clock's trust; default one with its floor in `<queue.directory>/clock-floor`.
    ///   - userAgent: the `User-Agent` of every upload (when `server` is not given).
    ///   - server: the fleet server as the daemon set it up once for all its clients; nil: set
    ///     up from `config` here.
    ///   - loop: the event loop the engine and the queue run on, shared with the daemon's other
    ///     clients (its owner stops it after `close`); nil: the agent starts one of its own
    ///   (`fire-agent-io`), for both.
    /// - Throws: `AgentError` naming the key when the agent's directories are not its own, the
    ///   queue cannot be opened, a pin is not base64, or the server URL has no write URL.
    package init(
        config: AgentConfig, logger: Logger, files: SystemFiles = SystemFiles(), clock: WallClock? = nil,
        userAgent: String = FleetServer.defaultUserAgent, server: FleetServer? = nil, loop: EventLoop? = nil
    ) throws(AgentError) {
        self.config = config
        self.logger = logger
        // Said once per start (and reload), not per request.
        for entry in config.network.ignoredNoProxyEntries { logger.warning("proxy settings: \(entry)") }
        let clock = clock ?? WallClock(floorFile: config.queue.directory + "/clock-floor", requireSync: config.clock.requireSync)
        self.clock = clock
        // The agent's own state must be changeable by nobody else (docs/OPERATIONS.md).
        for (key, directory) in [
            ("queue.directory", config.queue.directory), ("queue.deadLetterDirectory", config.queue.deadLetterDirectory),
        ] {
            if let problem = FileTrust.privateDirectoryProblem(directory) { throw AgentError(description: "\(key): \(problem)") }
        }
        guard let writeURL = Self.writeURL(for: config) else {
            throw AgentError(description: "server.url: \(config.server.url) has no write URL")
        }
        self.writeURL = writeURL
        let fleet: FleetServer
        if let server {
            fleet = server
        } else {
            fleet = try FleetServer(config: config, userAgent: userAgent)
        }
        self.server = fleet
        let engineSettings = fleet.telemetrySettings(api: config.telemetry.api, inFlight: config.queue.inFlight)
        engine = loop.map { Engine(settings: engineSettings, loop: $0) } ?? Engine(settings: engineSettings, name: "fire-agent-io")
        let trust = fleet.trustForHost
        let writeURLs = TimestampPrecision.allCases.compactMap { precision in
            Self.writeURL(for: config, precision: precision).map { (precision.rawValue, $0.absoluteString) }
        }
        do throws(OfflineQueueError) {
            store = try OfflineQueueStore(
                directory: config.queue.directory,
                limits: .init(
                    maxRecords: config.queue.maxRecords, maxBytes: config.queue.maxBytes, dropOldest: config.queue.overflow == .dropOldest,
                    segmentBytes: 4 << 20, cursorSyncInterval: .seconds(1)),
                logger: logger.output)
        } catch {
            engine.shutdown()
            throw AgentError(description: "queue.directory \(config.queue.directory): \(error.description)")
        }
        let tracker = DeliveryTracker(deadLetters: Self.countDeadLetters(in: config.queue.deadLetterDirectory))
        self.tracker = tracker
        let maxAge = config.queue.maxRecordAge
        let batchBytes = config.telemetry.batchMaxBytes
        let settings = QueueDeliverySettings(
            backoff: QueueBackoff(initial: config.queue.retryInitial, maximum: config.queue.retryMaximum),
            disposition: { (200..<300).contains($0) ? .delivered : .retry },
            judge: { answer in Self.judge(answer, clock: clock, maxAge: maxAge, batchBytes: batchBytes) },
            deadLetterDirectory: config.queue.deadLetterDirectory, maxConcurrentDeliveries: config.queue.inFlight,
            inlineBodyLimit: Self.inlineBodyLimit)
        do throws(OfflineQueueError) {
            queue = try DeliveryQueue(
                store: store, settings: settings,
                sender: EngineQueueSender(
                    engine: engine, trustForHost: trust, address: { Self.deliveryURL(for: $0, writeURLs: writeURLs) }),
                logger: logger.output,
                newKey: newIdempotencyKey, onEvent: { tracker.record($0) }, loop: engine.loop)
        } catch {
            store.close()
            engine.shutdown()
            throw AgentError(description: "queue.directory \(config.queue.directory): \(error.description)")
        }
        _ = store.enforceBoundsAfterOpen()
        spool = config.telemetry.spoolDirectory.map {
            SpoolDirectory(
                path: $0, progressPath: config.queue.directory + "/spool-progress", maxFileBytes: config.telemetry.spoolMaxFileBytes,
                maxLineBytes: config.telemetry.batchMaxBytes, rejectedMaxBytes: config.telemetry.spoolRejectedMaxBytes,
                device: SpoolLineVerdict.DeviceTag(id: config.device.id, keptAs: config.telemetry.spoolDeviceTagKeptAs), logger: logger)
        }
        var tags = config.device.labels
        tags["device"] = config.device.id
        let store = store
        let queue = queue
        collector = Locked(
            TelemetryCollector(
                collectors: config.telemetry.collectors, tags: tags, files: files, logger: logger,
                agentHealth: { Self.health(Self.queueFigures(store: store, queue: queue), tracker: tracker) }))
        pending = Locked(Batcher(maxPoints: config.telemetry.batchMaxPoints, maxBytes: config.telemetry.batchMaxBytes))
    }

    /// Batches up to this size (gzip'd) are kept inline in the queue's journal, so the judge
    /// can split one the server found too large (413); larger ones go to body files.
    static let inlineBodyLimit = 512 << 10

    /// Stops delivery, closes the queue and the engine.
    package func close() {
        queue.close()
        engine.shutdown()
    }

    /// Collectors switched off on this board, with the reason.
    package var stoppedCollectors: [String: String] { collector.withLock { $0.stopped } }

    /// The queue's figures for the status file.
    package var queueFigures: AgentStatus.Queue { Self.queueFigures(store: store, queue: queue) }

    /// Starts background delivery (now if anything is queued and the network allows).
    /// - Parameter network: what reachability says about the route to the server.
    package func startDelivery(network: OfflineQueueReplay.Network = .reachable) { queue.start(network: network) }

    /// Tells delivery what reachability says now (a route back starts delivery at once).
    package func network(_ network: OfflineQueueReplay.Network) { queue.network(network) }

    /// Stops background delivery; `completion` runs once no attempt is in flight.
    package func stopDelivery(completion: @escaping @Sendable () -> Void) { queue.stop(completion: completion) }

    /// One whole cycle: collect, queue the pending points and the spool, deliver everything the
    /// server takes now (`fire-agent sync --once`). Blocks until the flush ends.
    /// - Parameter timestamp: the round's time, ns since the epoch.
    package func syncOnce(timestamp: Int64 = TelemetryAgent.now()) -> SyncReport {
        var report = SyncReport()
        report.collectedPoints = collect(timestamp: timestamp)
        queuePending(into: &report)
        let outcome = ConditionLocked<Result<QueueFlushOutcome, OfflineQueueError>?>(nil)
        queue.flush { result in outcome.withLock { $0 = result } }
        switch outcome.wait(until: { $0 }) {
        case .success(let flushed):
            report.delivered = flushed.delivered
            report.discarded = flushed.discarded
            report.remaining = flushed.remaining
            report.failure = flushed.failure
        case .failure(let error):
            report.failure = error.description
            report.remaining = store.totals().records
        }
        return report
    }

    /// Runs the collectors once; their points join the pending batch, and a batch that fills
    /// up is queued at once.
    /// - Parameter timestamp: the round's time, ns since the epoch (every point carries it).
    /// - Returns: how many points were collected.
    @discardableResult
    package func collect(timestamp: Int64 = TelemetryAgent.now()) -> Int {
        guard clockAllowsStamping(at: timestamp) else { return 0 }
        let points = collector.withLock { $0.collect(timestamp: timestamp) }
        var count = 0
        var full: [Batch] = []
        pending.withLock { batcher in
            for point in points {
                guard let line = LineProtocol.encode(point, precision: config.telemetry.precision) else { continue }
                count += 1
                do throws(Batcher.LineTooLong) {
                    if let batch = try batcher.add(line) { full.append(batch) }
                } catch {
                    logger.warning(
                        "point not sent", metadata: ["measurement": .string(point.measurement), "reason": .string(error.description)])
                }
            }
        }
        for batch in full { _ = enqueue(batch) }
        return count
    }

    /// Queues one of the agent's own points (a firmware report) durably, as a record of its own:
    /// it does not wait for the next sync, and never passes through the spool.
    /// - Parameter point: the point (its tags as given: the caller adds `device`).
    /// - Returns: false (logged) when the queue refused it; true for a point with no field left
    ///   to send (nothing to queue).
    @discardableResult
    package func record(_ point: Point) -> Bool {
        guard let line = LineProtocol.encode(point, precision: config.telemetry.precision) else { return true }
        return enqueue(Batch(lines: [line]))
    }

    /// Queues the pending points and the spool directory's files (the sync step).
    /// - Parameters:
    ///   - report: receives the counts.
    ///   - spoolDeadline: when taking the spool stops, wherever it is (`report.spoolYielded`
    ///     says so; the next sync goes on from there); nil: the whole spool.
    package func queuePending(into report: inout SyncReport, spoolDeadline: Duration? = nil) {
        let deadline = spoolDeadline.map { Instant.now() + $0 }
        var yielded = false
        var setAside = 0
        var dropped = 0
        var failed = false
        var queued = 0
        var spooled = 0
        var rejected = 0
        let stamping = spool != nil && clockAllowsStamping(at: Self.now())
        pending.withLock { batcher in
            /// Queues a batch; false when it could not be (the queue is full or the disk failed).
            func add(_ batch: Batch?) -> Bool {
                guard let batch else { return true }
                guard !failed else { return false }
                guard enqueue(batch) else {
                    failed = true
                    return false
                }
                queued += 1
                return true
            }
            // The collectors' points open the batch; spool lines fill it up to the batch limits.
            if let spool, stamping {
                let precision = config.telemetry.precision
                let pass = spool.take(batcher: &batcher, stamp: { LineProtocol.scale(Self.now(), to: precision) }, deadline: deadline) {
                    add($0)
                }
                spooled = pass.queuedLines
                rejected = pass.rejectedLines
                yielded = pass.yielded
                setAside = pass.setAside
                dropped = pass.rejectedDropped
            }
            _ = add(batcher.flush())
        }
        report.queuedBatches += queued
        report.spooledLines += spooled
        report.rejectedLines += rejected
        report.spoolSetAside += setAside
        report.spoolYielded = yielded
        if rejected > 0 { tracker.rejectedSpool(rejected) }
        if dropped > 0 { tracker.droppedRejectedSpool(dropped) }
    }

    /// Now, in nanoseconds since the epoch (the wall clock).
    package static func now() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    // MARK: - Parts

    /// Whether points may be stamped at `timestamp`: not while the clock is below its floor.
    /// Collection then waits and spool files stay where they are; logged once per spell.
    private func clockAllowsStamping(at timestamp: Int64) -> Bool {
        let now = WallTime(millisecondsSince1970: timestamp / 1_000_000)
        let allowed = clock.mayStamp(now: now)
        let wasBelow = belowFloor.withLock { state in
            defer { state = !allowed }
            return state
        }
        if !allowed && !wasBelow {
            logger.warning(
                "clock before its floor: collection and spool files wait",
                metadata: ["clock": .string(now.description), "floor": .string(clock.floor.description)])
        } else if allowed && wasBelow {
            logger.notice("clock past its floor: collection resumes", metadata: ["clock": .string(now.description)])
        }
        return allowed
    }

    /// Queues one batch durably; false (logged) when the queue refused it.
    private func enqueue(_ batch: Batch) -> Bool {
        do throws(AgentError) {
            let body = try InfluxWrite.body(for: batch)
            var headers = HTTPHeaders()
            headers.update(name: "Content-Type", value: "text/plain; charset=utf-8")
            headers.update(name: "Content-Encoding", value: "gzip")
            do throws(OfflineQueueError) {
                _ = try queue.enqueue(
                    QueueSubmission(method: "POST", url: writeURL.absoluteString, headers: headers, body: [.memory(ByteArrayBody(body))]))
            } catch {
                throw AgentError(description: error.description)
            }
            return true
        } catch {
            logger.error("batch not queued", metadata: ["reason": .string(error.description), "lines": .string("\(batch.lines.count)")])
            return false
        }
    }

    /// The judge on the core's answer: `InfluxWrite.judge` with the batch's age by the wall
    /// clock (or the boot clock within this boot).
    static func judge(_ answer: QueueAnswer, clock: WallClock, maxAge: Duration, batchBytes: Int) -> QueueDisposition {
        let sinceEnqueue = answer.payload.enqueuedOnBootClock.flatMap { enqueued in BootInstant.now()?.since(enqueued) }
        let enqueuedAt = WallTime(millisecondsSince1970: Int64(clamping: answer.entry.enqueuedAtMilliseconds))
        return InfluxWrite.judge(
            status: answer.response.status.code, retryAfter: answer.response.headerFields[.retryAfter], message: answer.body,
            record: answer.payload, maxAge: maxAge, age: clock.age(enqueuedAt: enqueuedAt, sinceEnqueue: sinceEnqueue),
            batchBytes: batchBytes, now: .now())
    }

    /// Where one of the agent's queued batches goes now: the write URL of the config the agent
    /// runs with, at the precision the batch's lines were stamped in (the queued URL's
    /// `precision`). So a batch queued for a server the board no longer uses (a changed
    /// `server.url`, database or API: a reload, a new config) goes to the one it uses and does
    /// not hold the queue's head until `queue.maxRecordAge`. A URL without a known `precision`
    /// (not one of the agent's batches) goes where it says.
    /// - Parameters:
    ///   - queued: the URL the record was queued with.
    ///   - writeURLs: the current write URL for each precision's name.
    static func deliveryURL(for queued: String, writeURLs: [(String, String)]) -> String {
        guard let question = queued.firstIndex(of: "?") else { return queued }
        for parameter in queued[queued.index(after: question)...].split(separator: "&") {
            guard parameter.hasPrefix("precision=") else { continue }
            let name = parameter.dropFirst("precision=".count)
            return writeURLs.first { $0.0 == name }?.1 ?? queued
        }
        return queued
    }

    /// `config.server.url` with the API's write path and query: `<base>/write?db=…&rp=…`
    /// (v1) or `<base>/api/v2/write?org=…&bucket=…` (v2), then `precision` (the config's
    /// unless another is given). Names and values are percent-encoded except for RFC 3986's
    /// unreserved characters.
    package static func writeURL(for config: AgentConfig, precision: TimestampPrecision? = nil) -> AbsoluteURL? {
        let base = config.server.url
        var path = base.path
        if path.hasSuffix("/") { path.removeLast() }
        var query: [(String, String)] = []
        switch config.telemetry.api {
        case .v1(let database, let retention, _, _):
            path += "/write"
            query.append(("db", database))
            if let retention { query.append(("rp", retention)) }
        case .v2(let organization, let bucket, _):
            path += "/api/v2/write"
            query.append(("org", organization))
            query.append(("bucket", bucket))
        }
        query.append(("precision", (precision ?? config.telemetry.precision).rawValue))
        var text = base.scheme + "://" + (base.authority ?? "") + path + "?"
        for (index, (name, value)) in query.enumerated() {
            text += (index == 0 ? "" : "&") + percentEncoded(name) + "=" + percentEncoded(value)
        }
        return AbsoluteURL(text)
    }

    /// `text` with every byte but RFC 3986's unreserved ones as `%XX`.
    static func percentEncoded(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(byte)
            default:
                out.append(contentsOf: [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Dead letters already kept (one `.json` description each).
    static func countDeadLetters(in directory: String) -> Int {
        SystemFiles().list(directory).filter { $0.hasSuffix(".json") }.count
    }

    /// The queue's figures: the store's totals and the head's failures.
    static func queueFigures(store: OfflineQueueStore, queue: DeliveryQueue) -> AgentStatus.Queue {
        let totals = store.totals()
        let (failures, lastFailure) = queue.headFailures
        let oldest = totals.oldest.map { oldest -> Double in
            let age = WallTime.now().duration(since: WallTime(millisecondsSince1970: Int64(clamping: oldest)))
            return Double((age.wholeMilliseconds + 50) / 100) / 10
        }
        return AgentStatus.Queue(
            records: totals.records, bytes: totals.bytes, oldestAgeSeconds: oldest, delivered: totals.cursor.delivered,
            dropped: totals.cursor.droppedOldest, rejected: totals.cursor.rejectedNew, discarded: totals.cursor.discarded,
            quarantined: totals.cursor.quarantined, headFailures: failures, lastFailure: lastFailure)
    }

    /// The `fire_agent` measurement's fields.
    static func health(_ queue: AgentStatus.Queue, tracker: DeliveryTracker) -> [String: Point.Value] {
        var fields: [String: Point.Value] = [
            "queue_records": .integer(Int64(queue.records)), "queue_bytes": .integer(queue.bytes),
            "delivered": .integer(Int64(clamping: queue.delivered)), "dropped": .integer(Int64(clamping: queue.dropped)),
            "rejected": .integer(Int64(clamping: queue.rejected)), "discarded": .integer(Int64(clamping: queue.discarded)),
            "quarantined": .integer(Int64(clamping: queue.quarantined)),
        ]
        if let age = queue.oldestAgeSeconds { fields["oldest_record_age"] = .float(age) }
        let delivery = tracker.snapshot
        fields["dead_letters"] = .integer(Int64(delivery.deadLetters))
        fields["spool_rejected"] = .integer(Int64(delivery.rejectedSpoolLines))
        fields["spool_rejected_dropped"] = .integer(Int64(delivery.droppedRejectedSpool))
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
}
