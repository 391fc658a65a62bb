import CTinyFireSystem
import HTTPTypes

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The offline queue without Foundation: records written durably (`OfflineQueueStore`) and
/// delivered in order, at least once, from an `EventLoop` (its tasks and retry timers): a
/// thread of its own, or a loop it shares (the agent's queues share the loop of the engine
/// they send through). The library's `OfflineQueue` is its edge (`URLRequest`, `Date`, handlers on
/// dispatch queues, reachability); the agent uses it directly. docs/OFFLINE.md describes the
/// guarantees.
///
/// Memory: the store's index (about 100 bytes per record, `maxRecords` bounds it), the records
/// in flight (`maxConcurrentDeliveries`, inline bodies up to `inlineBodyLimit`, answers up to
/// `judgedBodyBytes` each) and the answers the window got for records after the head (at most
/// `maxConcurrentDeliveries` of them; a split's replacement requests among them), kept until
/// those records are the head.
package final class DeliveryQueue: Sendable {
    /// Bytes of a response body kept for the judge and for the log: 4 KiB.
    package static let judgedBodyBytes = 4096
    /// The header that carries each record's key.
    package static let idempotencyKeyHeader = "Idempotency-Key"

    package let store: OfflineQueueStore
    package let settings: QueueDeliverySettings
    private let sender: any QueueSender
    private let logger: any LogSink
    private let loop: EventLoop
    /// Whether `close` stops the loop (the queue started it) or only ends its own part.
    private let ownsLoop: Bool
    private let onEvent: @Sendable (QueueDeliveryEvent) -> Void
    private let newKey: @Sendable () -> String
    private let state: Locked<DeliveryState>

    private struct DeliveryState {
        var replay = OfflineQueueReplay()
        /// What is in flight, what the window learned, the server's throttle.
        var window: DeliveryWindow<Judgement>
        var retryTimer: TimerHandle?
        /// Armed while the throttle holds the head: at its end.
        var throttleTimer: TimerHandle?
        var flushing = false
        /// Between `start` and `stop`.
        var running = false
        var closed = false
        var lastFailure: String?
        /// The delay a `.retryAfter` disposition asked for, used by the next retry timer.
        var retryAfter: Duration?
        /// The head's last failure was the server's throttle: the next retry's delay holds the
        /// whole queue.
        var headThrottled = false
        /// Called once the attempts in flight have finished (`stop(completion:)`).
        var idleWaiters: [@Sendable () -> Void] = []
        /// The completions of flushes under way: `close` ends each with `.closed`.
        var pendingFlushes: [FlushCompletion] = []

        /// The idle waiters, taken, when no attempt is in flight.
        mutating func takeIdleWaiters() -> [@Sendable () -> Void] {
            guard window.attemptsInFlight == 0 else { return [] }
            defer { idleWaiters = [] }
            return idleWaiters
        }
    }

    /// A final answer the window got for a record after the head, kept until it is the head.
    private struct Judgement: Sendable {
        var status: Int
        var disposition: QueueDisposition
        var idempotencyKey: String
    }

    /// Delivers from `store`.
    /// - Parameters:
    ///   - store: the queue's open store (closed by `close`).
    ///   - settings: dispositions, backoff, window, dead letters.
    ///   - sender: sends each record.
    ///   - logger: quarantines, drops, failures.
    ///   - newKey: a new idempotency key (a UUID's text) for a request without one.
    ///   - onEvent: every delivery event, on the delivery thread (drops: on the enqueuing one).
    ///   - loop: the loop to deliver from, shared (its owner stops it after `close`); nil: the
    ///     queue starts a thread of its own.
    /// - Throws: `.directoryUnusable` when the delivery thread cannot be started.
    package init(
        store: OfflineQueueStore, settings: QueueDeliverySettings, sender: any QueueSender, logger: any LogSink,
        newKey: @escaping @Sendable () -> String, onEvent: @escaping @Sendable (QueueDeliveryEvent) -> Void, loop: EventLoop? = nil
    ) throws(OfflineQueueError) {
        self.store = store
        self.settings = settings
        self.sender = sender
        self.logger = logger
        self.newKey = newKey
        self.onEvent = onEvent
        state = Locked(DeliveryState(window: DeliveryWindow(limit: settings.maxConcurrentDeliveries)))
        ownsLoop = loop == nil
        do throws(SystemResourceError) {
            if let loop {
                self.loop = loop
            } else {
                self.loop = try EventLoop(name: "tf-queue")
            }
        } catch {
            throw .directoryUnusable(path: store.directory, message: "cannot start the delivery thread: \(error.description)")
        }
    }

    /// Stops delivery and the thread the queue started (on a shared loop: its own tasks and
    /// timers; the loop runs on), drops an attempt in flight (its record stays queued), ends a
    /// flush under way with `.closed`, syncs the cursor, closes the store.
    package func close() {
        let first = state.withLock { state -> Bool in
            defer { state.closed = true }
            state.running = false
            return !state.closed
        }
        guard first else { return }
        let end: @Sendable () -> Void = { [self] in
            let (timers, flushes) = state.withLock { state in
                defer { state.pendingFlushes = [] }
                return ([state.retryTimer.take(), state.throttleTimer.take()], state.pendingFlushes)
            }
            for timer in timers { if let timer { loop.cancel(timer) } }
            for flush in flushes { flush(.failure(.closed)) }
        }
        if ownsLoop {
            // Queued before the shutdown, so it runs in the loop's last pass: the timers (which
            // hold this queue) go with it.
            loop.execute(end)
            loop.shutdown()
        } else {
            // On a shared loop: once this ran there, no task of this queue runs any more (each
            // checks `closed` first).
            loop.runAndWait(end)
        }
        store.syncCursor()
        store.close()
    }

    /// Runs `task` on the delivery loop unless the queue is closed by then.
    private func onLoop(_ task: @escaping @Sendable () -> Void) {
        loop.execute { [self] in
            guard !state.withLock({ $0.closed }) else { return }
            task()
        }
    }

    // MARK: - Enqueue

    /// Queues `submission` and returns once it is durable on disk.
    /// - Parameter submission: the request; its body's pieces are copied into the queue.
    /// - Returns: the record's entry and payload.
    /// - Throws: `OfflineQueueError`: `.queueFull`, `.recordTooLarge`, `.diskFull`, `.ioFailed`,
    ///   `.invalidRequest`, `.bodyFileUnreadable`, `.closed`.
    package func enqueue(_ submission: QueueSubmission) throws(OfflineQueueError) -> (
        entry: OfflineQueueStore.Entry, payload: OfflineQueueJournal.Payload
    ) {
        guard AbsoluteURL(submission.url) != nil else { throw .invalidRequest(reason: "\(submission.url) is not an absolute http(s) URL") }
        let idempotencyKey = submission.headers.value(for: Self.idempotencyKeyHeader).map(Self.unquoted) ?? newKey()
        let headers = submission.headers.headers.map { (name: $0.name, value: $0.value) }

        // The body: inline, or a file in bodies/ that is durable before the record points at it.
        let segments = submission.body
        var bodyLength: UInt64 = 0
        for segment in segments { bodyLength += segment.length }
        let inline = bodyLength <= UInt64(settings.inlineBodyLimit)
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
            method: submission.method, url: submission.url, idempotencyKey: idempotencyKey, headers: headers, body: body,
            enqueuedOnBootClock: BootInstant.now())
        if let problem = OfflineQueueJournal.validate(payload) {
            if case .file = body { throw .invalidRequest(reason: problem) }
            throw .recordTooLarge(bytes: Int64(bodyLength), limit: Int64(OfflineQueueJournal.maxPayloadLength))
        }
        let payloadBytes = OfflineQueueJournal.encodePayload(payload)
        let recordBytes = Int64(OfflineQueueJournal.headerLength + payloadBytes.count) + (fileName == nil ? 0 : Int64(bodyLength))

        try store.reserve(bytes: recordBytes)
        if let fileName {
            do throws(OfflineQueueError) {
                try writeBodyFile(fileName, from: segments)
            } catch {
                store.release(bytes: recordBytes)
                throw error
            }
        }
        let (entry, dropped) = try store.append(
            payload: payloadBytes, payloadChecksum: OfflineQueueJournal.checksum(payloadBytes[...]),
            enqueuedAt: Instant.wallClockMilliseconds(), bodyFile: fileName, bodyBytes: fileName == nil ? 0 : Int64(bodyLength),
            reservedBytes: recordBytes)
        for entry in dropped { onEvent(.dropped(sequence: entry.sequence)) }
        // Wake delivery only when it runs (a hop to its thread per enqueue otherwise); the
        // record is appended before the check, and `start` counts records after it sets the
        // flag, so a start racing with this enqueue still sees the record.
        if state.withLock({ $0.running }) {
            let removed = dropped.count
            onLoop { [self] in
                for _ in 0..<removed { handle(.headRemoved(more: store.count > 0)) }
                handle(.recordsAvailable)
                fillWindow()  // a record behind a head in flight goes at once, within the window
            }
        }
        return (entry, payload)
    }

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

    private static func randomName() -> String {
        var generator = SystemRandomNumberGenerator()
        var name = ""
        for _ in 0..<2 {
            let value = generator.next() as UInt64
            let hex = String(value, radix: 16)
            name += String(repeating: "0", count: 16 - hex.count) + hex
        }
        return name
    }

    /// A structured-field string's content (`"abc"` → `abc`); other values as they are.
    package static func unquoted(_ value: String) -> String {
        value.utf8.count >= 2 && value.hasPrefix("\"") && value.hasSuffix("\"") ? String(value.dropFirst().dropLast()) : value
    }

    // MARK: - State

    /// Consecutive failed attempts of the head (this process) and the last failure.
    package var headFailures: (count: Int, last: String?) { state.withLock { ($0.replay.failures, $0.lastFailure) } }

    // MARK: - Delivery

    /// Starts delivering in the background: now if there is anything to send (and `network`
    /// is not down), again at every enqueue, after each backoff, and at once when `network(_:)`
    /// reports the network back.
    /// - Parameter network: what reachability says now (`.unknown` without it).
    package func start(network: OfflineQueueReplay.Network) {
        let closed = state.withLock { state -> Bool in
            if !state.closed { state.running = true }
            return state.closed
        }
        guard !closed else { return }
        onLoop { [self] in
            handle(.network(network))
            handle(.start(hasRecords: store.count > 0))
        }
    }

    /// Tells delivery what reachability now says.
    package func network(_ network: OfflineQueueReplay.Network) {
        onLoop { [self] in handle(.network(network)) }
    }

    /// Stops delivering (an attempt in flight finishes; its record is removed if it succeeded).
    package func stop() {
        state.withLock { $0.running = false }
        onLoop { [self] in handle(.stop) }
    }

    /// Stops delivering and calls `completion` once no attempt is in flight: at once when none
    /// is, otherwise when the last one in flight has finished. Called on the delivery thread;
    /// never when the queue is closed first.
    package func stop(completion: @escaping @Sendable () -> Void) {
        stop()
        onLoop { [self] in
            let idle = state.withLock { state -> Bool in
                guard state.window.attemptsInFlight > 0 else { return true }
                state.idleWaiters.append(completion)
                return false
            }
            if idle { completion() }
        }
    }

    /// Runs on the delivery thread.
    private func handle(_ event: OfflineQueueReplay.Event) {
        let actions = state.withLock { state in
            if event == .stop { state.window.stopped() }
            return state.replay.handle(event)
        }
        for action in actions {
            switch action {
            case .sendHead:
                sendHead()
                fillWindow()
            case .cancelRetry:
                if let timer = state.withLock({ $0.retryTimer.take() }) { loop.cancel(timer) }
            case .scheduleRetry(let failure):
                // A server's Retry-After, when it gave one, replaces the backoff for this wait;
                // zero (or a date already past) counts as none, as curl counts it: a server that
                // says "now" at every refusal must not turn the backoff into a busy loop.
                let (asked, throttled) = state.withLock { state -> (Duration?, Bool) in
                    defer {
                        state.retryAfter = nil
                        state.headThrottled = false
                    }
                    guard let delay = state.retryAfter, delay > .zero else { return (nil, state.headThrottled) }
                    return (delay, state.headThrottled)
                }
                let delay = asked ?? settings.backoff.delay(afterFailure: failure, random: Double.random(in: 0...1))
                let deadline = Instant.now() + delay
                if let old = state.withLock({ $0.retryTimer.take() }) { loop.cancel(old) }
                let timer = loop.schedule(at: deadline) { [self] in
                    let closed = state.withLock { state -> Bool in
                        state.retryTimer = nil
                        return state.closed
                    }
                    if !closed { handle(.timerFired) }
                }
                state.withLock { state in
                    state.retryTimer = timer
                    // The server's throttle holds the window too, and the head whatever else
                    // makes it due (the network coming back, a restart of delivery).
                    if throttled { state.window.serverThrottled(until: deadline) }
                }
            }
        }
    }

    /// Whether a status is the server asking to be left alone for a while (with its
    /// `Retry-After`, or the backoff without one): the whole queue waits.
    private static func throttles(_ status: Int) -> Bool {
        if case .throttled = StatusClass(status: status) { return true }
        return false
    }

    /// The head is due (`OfflineQueueReplay` says so): sends it, acts on what the window got
    /// for it, leaves it to the window's attempt in flight, or holds it while the server's
    /// throttle lasts.
    private func sendHead() {
        guard let head = store.first else {
            handle(.headRemoved(more: false))
            return
        }
        let step = state.withLock { $0.window.headDue(head.sequence, now: Instant.now()) }
        let stored: Judgement?
        switch step {
        case .inFlight: return
        case .hold(let until):
            armThrottleTimer(until)
            return
        case .act(let judgement): stored = judgement
        case .send: stored = nil
        }
        attemptHead(stored: stored) { [self] outcome in
            let waiters = state.withLock { state in
                if stored == nil { state.window.headEnded(head.sequence, removed: outcome != .failed, now: Instant.now()) }
                return state.takeIdleWaiters()
            }
            switch outcome {
            case .removed: handle(.headRemoved(more: store.count > 0))
            case .failed: handle(.attemptFailed)
            case .empty: handle(.headRemoved(more: false))
            }
            for waiter in waiters { waiter() }
        }
    }

    /// Asks for the head again at `until`, when the server's throttle runs out.
    private func armThrottleTimer(_ until: Instant) {
        if let old = state.withLock({ $0.throttleTimer.take() }) { loop.cancel(old) }
        let timer = loop.schedule(at: until) { [self] in
            let due = state.withLock { state -> Bool in
                state.throttleTimer = nil
                return !state.closed && state.window.holdingHead && state.replay.phase == .sending
            }
            if due {
                sendHead()
                fillWindow()
            }
        }
        state.withLock { $0.throttleTimer = timer }
    }

    /// While the head is being sent, sends the records after it, up to
    /// `maxConcurrentDeliveries` in flight at once, unless the server's throttle holds the
    /// queue. Runs on the delivery thread.
    private func fillWindow() {
        let limit = settings.maxConcurrentDeliveries
        guard limit > 1 else { return }
        let candidates = store.entries(limit: limit).dropFirst()
        let started = state.withLock { state in
            state.window.fill(candidates.map { $0.sequence }, sending: state.replay.phase == .sending)
        }
        for entry in candidates where started.contains(entry.sequence) {
            attemptInWindow(entry)
        }
    }

    /// The window's attempt of `entry`, a record after the head: never removes it; what the
    /// server answered is kept for when it is the head (or is the head's, when it became the
    /// head meanwhile).
    private func attemptInWindow(_ entry: OfflineQueueStore.Entry) {
        attempt(entry) { [self] judged, key in
            let outcome: DeliveryWindow<Judgement>.WindowOutcome
            // Why, and how long the server asked to wait, should this attempt be the head's.
            var reason = ""
            var asked: Duration?
            switch judged {
            case .none: outcome = .unsent
            case .noResponse(let why)?:
                outcome = .failed
                reason = why
            case .answered(let status, let disposition, let refusal)?:
                reason = refusal
                switch disposition {
                case .delivered, .discard, .deadLetter, .replace:
                    outcome = .judged(Judgement(status: status, disposition: disposition, idempotencyKey: key))
                case .retryAfter(let delay) where delay > .zero:
                    outcome = .throttled(delay)
                    reason += "; retry after \(Self.describe(delay))"
                    asked = delay
                case .retry, .retryAfter:
                    if Self.throttles(status) {
                        let failures = state.withLock { $0.replay.failures }
                        outcome = .throttled(settings.backoff.delay(afterFailure: failures + 1, random: Double.random(in: 0...1)))
                    } else {
                        outcome = .failed
                    }
                }
            }
            let (step, waiters) = state.withLock { state in
                (state.window.windowEnded(entry.sequence, outcome, now: Instant.now()), state.takeIdleWaiters())
            }
            switch step {
            case .none: break
            case .headJudged, .headDue:
                // It became the head while in flight: acted on (or sent) as the head now.
                if state.withLock({ $0.replay.phase == .sending }) { sendHead() }
            case .headFailed:
                var throttled = false
                if case .throttled = outcome { throttled = true }
                headFailed(entry, idempotencyKey: key, reason: reason, after: asked, throttled: throttled)
                handle(.attemptFailed)
            }
            for waiter in waiters { waiter() }
            fillWindow()
        }
    }

    private enum AttemptOutcome { case removed, failed, empty }

    /// Reads `entry`'s record, or quarantines it (it was damaged after it was written, or its
    /// URL cannot be sent) and returns nil.
    private func readHead(_ entry: OfflineQueueStore.Entry) -> OfflineQueueJournal.Payload? {
        let payload: OfflineQueueJournal.Payload
        do throws(OfflineQueueError) {
            payload = try store.read(entry)
        } catch {
            logger.error("offline queue: record \(entry.sequence) cannot be read back (\(error.description)); quarantined")
            store.removeHead(sequence: entry.sequence, reason: .quarantined)
            onEvent(.quarantined(sequence: entry.sequence, reason: error.description))
            return nil
        }
        guard AbsoluteURL(payload.url) != nil else {
            store.removeHead(sequence: entry.sequence, reason: .quarantined)
            onEvent(.quarantined(sequence: entry.sequence, reason: "invalid URL \(payload.url)"))
            return nil
        }
        return payload
    }

    /// One attempt of the head record: read it, send it, remove it or count the failure. With
    /// `stored` (what the window's attempt of it got), acts on that instead: nothing is sent.
    private func attemptHead(stored: Judgement?, completion: @escaping @Sendable (AttemptOutcome) -> Void) {
        guard let entry = store.first else {
            completion(.empty)
            return
        }
        @Sendable func removed(_ reason: OfflineQueueStore.Removal, _ event: QueueDeliveryEvent) {
            store.removeHead(sequence: entry.sequence, reason: reason)
            state.withLock { $0.lastFailure = nil }
            onEvent(event)
            completion(.removed)
        }
        // Taken or discarded already (the window logged a discard): removed in order now.
        if let stored {
            switch stored.disposition {
            case .delivered:
                removed(.delivered, .delivered(sequence: entry.sequence, idempotencyKey: stored.idempotencyKey, status: stored.status))
                return
            case .discard:
                removed(.discarded, .discarded(sequence: entry.sequence, idempotencyKey: stored.idempotencyKey, status: stored.status))
                return
            case .deadLetter, .replace, .retry, .retryAfter: break
            }
        }
        guard let payload = readHead(entry) else {
            completion(.removed)
            return
        }
        let key = payload.idempotencyKey

        @Sendable func conclude(status: Int, disposition: QueueDisposition, refusal: String) {
            switch disposition {
            case .delivered:
                removed(.delivered, .delivered(sequence: entry.sequence, idempotencyKey: key, status: status))
            case .discard:
                logger.warning("offline queue: record \(entry.sequence) discarded: \(payload.method) \(payload.url) answered \(status)")
                removed(.discarded, .discarded(sequence: entry.sequence, idempotencyKey: key, status: status))
            case .retry:
                fail(refusal, throttled: Self.throttles(status))
            case .retryAfter(let delay):
                fail(refusal + "; retry after \(Self.describe(delay))", after: delay, throttled: delay > .zero || Self.throttles(status))
            case .deadLetter(let reason):
                keepDeadLetter(entry: entry, payload: payload, status: status, reason: reason)
                logger.warning("offline queue: record \(entry.sequence) dead-lettered: \(payload.method) \(payload.url): \(reason)")
                removed(.discarded, .deadLettered(sequence: entry.sequence, idempotencyKey: key, status: status, reason: reason))
            case .replace(let replacements):
                do throws(OfflineQueueError) {
                    for replacement in replacements { _ = try enqueue(replacement) }
                } catch {
                    fail(
                        "\(payload.method) \(payload.url) answered \(status); its replacements could not be queued: \(error.description)"
                    )
                    return
                }
                logger.notice("offline queue: record \(entry.sequence) replaced by \(replacements.count) after \(status)")
                removed(.discarded, .replaced(sequence: entry.sequence, idempotencyKey: key, status: status, count: replacements.count))
            }
        }

        @Sendable func fail(_ reason: String, after delay: Duration? = nil, throttled: Bool = false) {
            headFailed(entry, idempotencyKey: key, reason: reason, after: delay, throttled: throttled)
            completion(.failed)
        }

        if let stored {
            conclude(status: stored.status, disposition: stored.disposition, refusal: "")
            return
        }
        send(entry, payload, failures: state.withLock { $0.replay.failures }) { judged in
            switch judged {
            case .noResponse(let reason): fail(reason)
            case .answered(let status, let disposition, let refusal): conclude(status: status, disposition: disposition, refusal: refusal)
            }
        }
    }

    /// Counts a failed attempt of the head `entry`: logs it, keeps the reason and the delay
    /// the server asked for (`throttled`: its throttle, which the next retry's delay extends to
    /// the whole queue), reports it.
    private func headFailed(
        _ entry: OfflineQueueStore.Entry, idempotencyKey: String, reason: String, after delay: Duration?, throttled: Bool
    ) {
        let failures = state.withLock { state -> Int in
            state.lastFailure = reason
            state.retryAfter = delay
            state.headThrottled = throttled
            return state.replay.failures + 1
        }
        logger.notice("offline queue: record \(entry.sequence) not delivered (\(reason)); attempt \(failures)")
        onEvent(.failed(sequence: entry.sequence, idempotencyKey: idempotencyKey, reason: reason, failures: failures))
    }

    /// A duration in words as Swift prints one ("2.0 seconds").
    private static func describe(_ delay: Duration) -> String {
        let (seconds, attoseconds) = delay.components
        let tenths = attoseconds / 100_000_000_000_000_000
        return "\(seconds).\(tenths) seconds"
    }

    /// One attempt of a record after the head (the window): never removes it. With the
    /// record's idempotency key; nil when its record cannot be read back (the head's path
    /// quarantines it).
    private func attempt(_ entry: OfflineQueueStore.Entry, completion: @escaping @Sendable (Judged?, String) -> Void) {
        let read: OfflineQueueJournal.Payload?
        do throws(OfflineQueueError) {
            read = try store.read(entry)
        } catch {
            read = nil
        }
        guard let payload = read, AbsoluteURL(payload.url) != nil else {
            completion(nil, "")
            return
        }
        send(entry, payload, failures: 0) { [logger] judged in
            if case .answered(let status, .discard, _) = judged {
                logger.warning("offline queue: record \(entry.sequence) discarded: \(payload.method) \(payload.url) answered \(status)")
            }
            completion(judged, payload.idempotencyKey)
        }
    }

    /// A record's attempt as the server answered it.
    private enum Judged: Sendable {
        /// The status, what it means, and why it did not deliver the record in words (for a
        /// retry: a redirect names where it pointed, a 2xx that was not accepted shows the
        /// start of its body).
        case answered(status: Int, disposition: QueueDisposition, refusal: String)
        /// No answer (connection, TLS, timeout): why.
        case noResponse(String)
    }

    /// Sends one record and judges the answer (`judge`, or `disposition` by status) on the
    /// delivery thread.
    private func send(
        _ entry: OfflineQueueStore.Entry, _ payload: OfflineQueueJournal.Payload, failures: Int,
        completion: @escaping @Sendable (Judged) -> Void
    ) {
        var headers = HTTPHeaders()
        for header in payload.headers { headers.append(name: header.name, value: header.value) }
        if headers.value(for: Self.idempotencyKeyHeader) == nil {
            headers.add(name: Self.idempotencyKeyHeader, value: "\"\(payload.idempotencyKey)\"")
        }
        let body: QueuedSend.Body
        switch payload.body {
        case .none: body = .none
        case .inline(let bytes): body = .bytes(bytes)
        case .file(let name, let length): body = .file(path: store.bodyPath(name), length: length)
        }
        let request = QueuedSend(method: payload.method, url: payload.url, headers: headers, body: body, bodyLimit: Self.judgedBodyBytes)
        let sentHeaders = headers
        sender.sendQueued(request) { [self] reply in
            onLoop { [self] in
                switch reply {
                case .noResponse(let reason): completion(.noResponse(reason))
                case .answered(let response, let start):
                    let status = response.status.code
                    let disposition: QueueDisposition
                    if let judge = settings.judge {
                        disposition = judge(
                            QueueAnswer(
                                entry: entry, payload: payload, sentHeaders: sentHeaders, response: response, body: start,
                                failures: failures))
                    } else {
                        disposition = settings.disposition(status)
                    }
                    completion(.answered(status: status, disposition: disposition, refusal: Self.refusal(payload, response, start)))
                }
            }
        }
    }

    /// Why an answer did not deliver a record, in words: a redirect names where it pointed, a
    /// 2xx that was not accepted shows the start of its body (escaped).
    package static func refusal(_ payload: OfflineQueueJournal.Payload, _ response: HTTPResponse, _ body: [UInt8]) -> String {
        let status = response.status.code
        var reason = "\(payload.method) \(payload.url) answered \(status)"
        if (300..<400).contains(status) {
            let location = response.headerFields[.location] ?? "nowhere"
            reason += ", redirected to \(location): a captive portal or a wrong URL?"
        } else if (200..<300).contains(status) {
            var text = ""
            for byte in body.prefix(80) {
                if byte >= 0x20 && byte < 0x7F {
                    text.unicodeScalars.append(Unicode.Scalar(byte))
                } else {
                    text += Self.escaped(byte)
                }
            }
            reason += " but it was not accepted as delivered" + (body.isEmpty ? "" : ": \"\(text)\"") + " (a captive portal or a proxy?)"
        }
        return reason
    }

    /// A byte outside printable ASCII as Swift escapes a scalar: `\n`, `\t`, `\r`, else `\u{XX}`.
    private static func escaped(_ byte: UInt8) -> String {
        switch byte {
        case 0x0A: return "\\n"
        case 0x09: return "\\t"
        case 0x0D: return "\\r"
        case 0x00: return "\\0"
        default: return "\\u{" + String(byte, radix: 16, uppercase: true) + "}"
        }
    }

    /// Sends every queued record now, in order, regardless of reachability, backoff and a
    /// server's throttle (the caller asked for now), stopping at the first one that is not
    /// removed; a record the window already got a final answer for is acted on, not sent. Background delivery must be stopped; an
    /// attempt it started before it stopped is waited for (never two sends of one record at
    /// once).
    /// - Parameter completion: called once, on the delivery thread, with what happened.
    package func flush(completion: @escaping @Sendable (Result<QueueFlushOutcome, OfflineQueueError>) -> Void) {
        // Registered before it is handed to the loop: a close meanwhile ends it with `.closed`.
        let once = FlushCompletion(completion)
        let closed = state.withLock { state -> Bool in
            if !state.closed { state.pendingFlushes.append(once) }
            return state.closed
        }
        guard !closed else {
            once(.failure(.closed))
            return
        }
        let done: @Sendable (Result<QueueFlushOutcome, OfflineQueueError>) -> Void = { [self] result in
            state.withLock { $0.pendingFlushes.removeAll { $0 === once } }
            once(result)
        }
        onLoop { [self] in
            let busy = state.withLock { state -> Bool? in
                guard state.replay.phase == .stopped, !state.flushing else { return true }
                if state.window.attemptsInFlight > 0 {
                    state.idleWaiters.append { [self] in flush(completion: done) }
                    return nil
                }
                state.flushing = true
                return false
            }
            guard let busy else { return }  // started again once the attempt in flight ends
            guard !busy else {
                done(.failure(.deliveryRunning))
                return
            }
            let before = store.totals().cursor
            FlushStep(queue: self, before: before, completion: done).run()
        }
    }

    /// A flush's completion, called once: by the flush, or with `.closed` by `close`.
    final class FlushCompletion: Sendable {
        private let body: @Sendable (Result<QueueFlushOutcome, OfflineQueueError>) -> Void
        private let called = Locked(false)

        init(_ body: @escaping @Sendable (Result<QueueFlushOutcome, OfflineQueueError>) -> Void) {
            self.body = body
        }

        func callAsFunction(_ result: Result<QueueFlushOutcome, OfflineQueueError>) {
            let first = called.withLock { called -> Bool in
                defer { called = true }
                return !called
            }
            if first { body(result) }
        }
    }

    /// One step of a flush: the head's attempt, then the next step or the end.
    private struct FlushStep: Sendable {
        let queue: DeliveryQueue
        let before: OfflineQueueJournal.Cursor
        let completion: @Sendable (Result<QueueFlushOutcome, OfflineQueueError>) -> Void

        func run() {
            // What the window got for the head is acted on, not sent again.
            let stored = queue.store.first.flatMap { head in queue.state.withLock { $0.window.takeJudgement(for: head.sequence) } }
            queue.attemptHead(stored: stored) { outcome in
                switch outcome {
                case .removed: run()
                case .empty, .failed:
                    let store = queue.store
                    let after = store.totals().cursor
                    let result = QueueFlushOutcome(
                        delivered: Int(after.delivered - before.delivered), discarded: Int(after.discarded - before.discarded),
                        remaining: store.count, failure: outcome == .failed ? queue.state.withLock { $0.lastFailure } : nil)
                    store.syncCursor()
                    queue.state.withLock { $0.flushing = false }
                    completion(.success(result))
                }
            }
        }
    }

    // MARK: - Dead letters

    /// Writes a dead-lettered record to `deadLetterDirectory`: `<sequence>.json` (method, URL,
    /// status, reason, times in ms since the epoch, headers without credentials:
    /// Authorization, Cookie, Proxy-Authorization) and `<sequence>.body`. Failures are
    /// logged; the record is dead either way.
    private func keepDeadLetter(entry: OfflineQueueStore.Entry, payload: OfflineQueueJournal.Payload, status: Int, reason: String) {
        guard let directory = settings.deadLetterDirectory else { return }
        let base = directory + "/" + String(entry.sequence)
        var failure: OfflineQueueError?
        if mkdir(directory, 0o755) != 0 && errno != EEXIST { failure = .io(errno, path: directory, operation: "create") }
        if failure == nil {
            switch payload.body {
            case .none: break
            case .inline(let bytes): failure = Self.writeFile(base + ".body", bytes)
            case .file(let name, let length): failure = Self.copyFile(store.bodyPath(name), length: length, to: base + ".body")
            }
        }
        if failure == nil {
            var headers: [(String, String)] = []
            for header in payload.headers {
                let name = header.name.lowercased()
                if name != "authorization" && name != "cookie" && name != "proxy-authorization" {
                    headers.append((header.name, header.value))
                }
            }
            headers.sort { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) }
            var headerText = ""
            for (index, header) in headers.enumerated() {
                headerText += (index == 0 ? "\n" : ",\n") + "    " + header.0.jsonQuoted + " : " + header.1.jsonQuoted
            }
            // Keys in sorted order, as the first dead letters were written.
            let fields: [(String, String)] = [
                ("deadLetteredAt", String(Instant.wallClockMilliseconds())),
                ("enqueuedAt", String(entry.enqueuedAtMilliseconds)),
                ("headers", headers.isEmpty ? "{\n\n  }" : "{" + headerText + "\n  }"),
                ("idempotencyKey", payload.idempotencyKey.jsonQuoted),
                ("method", payload.method.jsonQuoted),
                ("reason", reason.jsonQuoted),
                ("status", String(status).jsonQuoted),
                ("url", payload.url.jsonQuoted),
            ]
            var text = "{"
            for (index, field) in fields.enumerated() {
                text += (index == 0 ? "\n" : ",\n") + "  " + field.0.jsonQuoted + " : " + field.1
            }
            text += "\n}"
            failure = Self.writeFile(base + ".json", Array(text.utf8))
        }
        if let failure {
            logger.error(
                "offline queue: record \(entry.sequence) could not be kept as a dead letter in \(directory): \(failure.description)")
        }
    }

    /// Writes `bytes` to a new or truncated file at `path`.
    private static func writeFile(_ path: String, _ bytes: [UInt8]) -> OfflineQueueError? {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return .io(errno, path: path, operation: "create") }
        defer { Glibc.close(fd) }
        return writeAll(fd, bytes, at: 0, path: path)
    }

    /// Copies the first `length` bytes of the file at `source` to a new or truncated file at
    /// `path` in the kernel (sendfile: no buffer in this process, whatever the body's size).
    private static func copyFile(_ source: String, length: UInt64, to path: String) -> OfflineQueueError? {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { return .io(errno, path: source, operation: "open") }
        defer { Glibc.close(input) }
        let output = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard output >= 0 else { return .io(errno, path: path, operation: "create") }
        defer { Glibc.close(output) }
        var offset: Int64 = 0
        let end = Int64(length)
        while offset < end {
            let sent = tinyfire_sendfile(output, input, &offset, UInt(min(Int64(1 << 30), end - offset)))
            if sent < 0 && errno == EINTR { continue }
            if sent < 0 { return .io(errno, path: path, operation: "copy \(source) into") }
            if sent == 0 { return .ioFailed(path: source, operation: "copy", message: "it is shorter than its record says") }
        }
        return nil
    }
}
