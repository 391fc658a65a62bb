import CTinyFireSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The offline queue's files: a directory with a lock file, a cursor (`state`), journal
/// segments (`journal/<first sequence>.log`), body files (`bodies/`) and damaged bytes set
/// aside (`quarantine/`). Appends are group-committed: concurrent enqueues share one write
/// and one `fdatasync`, and each returns only after its record is durable.
///
/// Memory: the index of live records (about 100 bytes each, so `maxRecords` bounds it), the
/// pending batch (the records of enqueues in flight), and at start-up one segment at a time
/// (`segmentBytes` plus one record).
package final class OfflineQueueStore: @unchecked Sendable {
    /// One live record: where it is and what it costs.
    package struct Entry: Sendable, Equatable {
        package var sequence: UInt64
        package var segment: UInt64
        package var offset: Int64
        package var length: Int
        package var enqueuedAtMilliseconds: UInt64
        package var bodyFile: String?
        package var bodyBytes: Int64
        /// What counts against `maxBytes`: the record plus its body file.
        package var bytes: Int64 { Int64(length) + bodyBytes }
    }

    /// Why a record leaves the queue.
    package enum Removal: Sendable {
        case delivered, discarded, droppedOldest, quarantined
    }

    package struct Limits: Sendable {
        package var maxRecords: Int
        package var maxBytes: Int64
        package var dropOldest: Bool
        package var segmentBytes: Int
        package var cursorSyncInterval: Duration

        package init(maxRecords: Int, maxBytes: Int64, dropOldest: Bool, segmentBytes: Int, cursorSyncInterval: Duration) {
            self.maxRecords = maxRecords
            self.maxBytes = maxBytes
            self.dropOldest = dropOldest
            self.segmentBytes = segmentBytes
            self.cursorSyncInterval = cursorSyncInterval
        }
    }

    /// Bytes copied into `quarantine/` at most; past it damage is only logged and counted.
    package static let quarantineLimit: Int64 = 16 << 20

    package let directory: String
    package let journalDirectory: String
    package let bodiesDirectory: String
    package let quarantineDirectory: String
    package let limits: Limits
    package let logger: any LogSink
    /// Opened for inspection only: no lock, nothing written, damage skipped but left in place.
    package let readOnly: Bool
    private let state: Locked<State>

    private struct Segment {
        var first: UInt64
        var last: UInt64
        var path: String
    }

    private struct Pending {
        var bytes: [UInt8] = []
        var entries: [Entry] = []
    }

    private struct State {
        var closed = false
        var lockFD: Int32 = -1
        var stateFD: Int32 = -1
        var cursor = OfflineQueueJournal.Cursor()
        var cursorDirty = false
        var lastCursorSync = Instant.now()
        var segments: [Segment] = []
        var activeFD: Int32 = -1
        var activeSize: Int64 = 0
        var nextSequence: UInt64 = 1
        var index: [Entry] = []
        var head = 0
        var liveBytes: Int64 = 0
        var reservedRecords = 0
        var reservedBytes: Int64 = 0
        var pending = Pending()
        var flushing = false
        /// Each appended record's committed entry, or why it failed, until its enqueue collects it.
        var outcomes: [UInt64: Result<Entry, OfflineQueueError>] = [:]
        var waiters: [UInt64: WakeSignal] = [:]

        var count: Int { index.count - head }
        var first: Entry? { head < index.count ? index[head] : nil }
    }

    /// The journal's default segment size: 4 MiB.
    package static let defaultSegmentBytes = 4 << 20

    /// Opens (creating when missing) the queue at `directory`, takes its lock and recovers it:
    /// damaged bytes are quarantined, a torn tail is cut, orphan body files and fully removed
    /// segments are deleted.
    /// - Throws: `OfflineQueueError` when the directory cannot be used or is locked.
    package init(directory: String, limits: Limits, logger: any LogSink, readOnly: Bool = false) throws(OfflineQueueError) {
        self.readOnly = readOnly
        self.directory = directory
        journalDirectory = directory + "/journal"
        bodiesDirectory = directory + "/bodies"
        quarantineDirectory = directory + "/quarantine"
        self.limits = limits
        self.logger = logger
        state = Locked(State())
        for path in [directory, journalDirectory, bodiesDirectory, quarantineDirectory] where !readOnly {
            if mkdir(path, 0o700) != 0 && errno != EEXIST {
                throw .directoryUnusable(path: path, message: errnoMessage(errno))
            }
        }
        var recovered = State()
        do {
            if !readOnly { recovered.lockFD = try Self.lock(directory + "/lock") }
            try recover(into: &recovered)
        } catch {
            Self.closeDescriptors(recovered)
            throw error
        }
        state.withLock { $0 = recovered }
    }

    deinit { close() }

    /// Syncs the cursor and closes every file; later calls fail with `.closed`.
    package func close() {
        let snapshot = state.withLock { state -> State? in
            guard !state.closed else { return nil }
            state.closed = true
            for waiter in state.waiters.values { waiter.signal() }
            return state
        }
        guard let snapshot else { return }
        if snapshot.cursorDirty { fdatasync(snapshot.stateFD) }
        Self.closeDescriptors(snapshot)
    }

    private static func closeDescriptors(_ state: State) {
        for fd in [state.activeFD, state.stateFD, state.lockFD] where fd >= 0 { Glibc.close(fd) }
    }

    // MARK: - Reading

    package var count: Int { state.withLock { $0.count } }
    package var first: Entry? { state.withLock { $0.first } }

    /// Live records in order, at most `limit`.
    package func entries(limit: Int = .max) -> [Entry] {
        state.withLock { Array($0.index[$0.head...].prefix(limit)) }
    }

    /// Records, bytes and the cursor's counters.
    package func totals() -> (records: Int, bytes: Int64, oldest: UInt64?, cursor: OfflineQueueJournal.Cursor) {
        state.withLock { ($0.count, $0.liveBytes, $0.first?.enqueuedAtMilliseconds, $0.cursor) }
    }

    /// Reads and decodes a live record from its segment.
    /// - Throws: `OfflineQueueError.ioFailed` when the bytes cannot be read or no longer
    ///   check out (damaged after start-up).
    package func read(_ entry: Entry) throws(OfflineQueueError) -> OfflineQueueJournal.Payload {
        let path = segmentPath(entry.segment)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .io(errno, path: path, operation: "open") }
        defer { Glibc.close(fd) }
        let bytes: [UInt8]
        switch preadFully(fd, count: entry.length, at: entry.offset) {
        case .success(let read): bytes = read
        case .failure(let failure):
            throw .ioFailed(
                path: path, operation: "read record \(entry.sequence) from",
                message: failure.code == 0 ? "short read" : errnoMessage(failure.code))
        }
        let decoded = bytes.withUnsafeBytes { raw -> Result<OfflineQueueJournal.Payload, OfflineQueueJournal.DecodeError>? in
            guard let header = OfflineQueueJournal.intactRecord(in: raw, at: 0), header.sequence == entry.sequence else { return nil }
            do throws(OfflineQueueJournal.DecodeError) {
                return .success(
                    try OfflineQueueJournal.decodePayload(UnsafeRawBufferPointer(rebasing: raw[OfflineQueueJournal.headerLength...])))
            } catch {
                return .failure(error)
            }
        }
        switch decoded {
        case .none: throw .ioFailed(path: path, operation: "verify record \(entry.sequence) in", message: "checksum mismatch")
        case .failure(let error)?: throw .ioFailed(path: path, operation: "decode record \(entry.sequence) in", message: error.description)
        case .success(let payload)?: return payload
        }
    }

    package func segmentPath(_ first: UInt64) -> String { journalDirectory + "/" + Self.segmentName(first) }

    package func bodyPath(_ name: String) -> String { bodiesDirectory + "/" + name }

    package static func segmentName(_ first: UInt64) -> String {
        let digits = String(first)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + ".log"
    }

    // MARK: - Appending

    /// Counts a record of `bytes` against the bounds before its body is written. With
    /// `.rejectNew` a full queue refuses it (and counts the refusal); with `.dropOldest` it
    /// is accepted and the oldest records go after it commits.
    /// - Throws: `.queueFull`, `.recordTooLarge`, `.closed`.
    package func reserve(bytes: Int64) throws(OfflineQueueError) {
        let error = state.withLock { state -> OfflineQueueError? in
            if state.closed || readOnly { return .closed }
            if bytes > limits.maxBytes { return .recordTooLarge(bytes: bytes, limit: limits.maxBytes) }
            let records = state.count + state.reservedRecords
            let total = state.liveBytes + state.reservedBytes
            if !limits.dropOldest && (records + 1 > limits.maxRecords || total + bytes > limits.maxBytes) {
                state.cursor.rejectedNew += 1
                writeCursor(&state)
                return .queueFull(records: records, bytes: total, maxRecords: limits.maxRecords, maxBytes: limits.maxBytes)
            }
            state.reservedRecords += 1
            state.reservedBytes += bytes
            return nil
        }
        if let error { throw error }
    }

    /// Gives back a reservation whose record was not appended.
    package func release(bytes: Int64) {
        state.withLock {
            $0.reservedRecords -= 1
            $0.reservedBytes -= bytes
        }
    }

    /// Appends one record (its body file, if any, already durable) and returns once it is on
    /// disk: written and `fdatasync`'d together with whatever other enqueues were waiting.
    /// Consumes the reservation of `reservedBytes` either way.
    /// - Returns: the record's entry, and the entries dropped to make room (`.dropOldest`).
    /// - Throws: `.diskFull` / `.ioFailed` when the write or the sync failed; the segment is
    ///   cut back, so nothing before is affected.
    package func append(
        payload: [UInt8], payloadChecksum: UInt32, enqueuedAt: UInt64, bodyFile: String?, bodyBytes: Int64, reservedBytes: Int64
    )
        throws(OfflineQueueError) -> (entry: Entry, dropped: [Entry])
    {
        let recordLength = OfflineQueueJournal.headerLength + payload.count
        let (sequence, leader, waiter) = state.withLock { state -> (UInt64, Bool, WakeSignal?) in
            let sequence = state.nextSequence
            state.nextSequence += 1
            let header = OfflineQueueJournal.encodeHeader(
                payloadLength: payload.count, sequence: sequence, enqueuedAtMilliseconds: enqueuedAt, payloadChecksum: payloadChecksum)
            state.pending.entries.append(
                Entry(
                    sequence: sequence, segment: 0, offset: Int64(state.pending.bytes.count), length: recordLength,
                    enqueuedAtMilliseconds: enqueuedAt, bodyFile: bodyFile, bodyBytes: bodyBytes))
            state.pending.bytes.append(contentsOf: header)
            state.pending.bytes.append(contentsOf: payload)
            state.reservedRecords -= 1
            state.reservedBytes -= reservedBytes
            if state.closed {
                state.outcomes[sequence] = .failure(.closed)
                return (sequence, false, nil)
            }
            if state.flushing {
                let semaphore = WakeSignal()
                state.waiters[sequence] = semaphore
                return (sequence, false, semaphore)
            }
            state.flushing = true
            return (sequence, true, nil)
        }
        if leader { commitPending() } else { waiter?.wait() }
        let outcome = state.withLock { state -> Result<Entry, OfflineQueueError> in
            state.waiters.removeValue(forKey: sequence)
            return state.outcomes.removeValue(forKey: sequence) ?? .failure(.closed)
        }
        let entry = try outcome.get()
        return (entry, limits.dropOldest ? enforceBounds() : [])
    }

    /// Writes pending batches until none is left. Runs on the thread that became the leader.
    private func commitPending() {
        while true {
            let batch = state.withLock { state -> (Pending, Int32, Int64, Bool)? in
                guard !state.pending.entries.isEmpty, !state.closed else {
                    state.flushing = false
                    if state.closed {
                        for entry in state.pending.entries { state.outcomes[entry.sequence] = .failure(.closed) }
                        state.pending = Pending()
                    }
                    return nil
                }
                let batch = state.pending
                state.pending = Pending()
                let rotate = state.activeSize > 0 && state.activeSize + Int64(batch.bytes.count) > Int64(limits.segmentBytes)
                return (batch, state.activeFD, state.activeSize, rotate)
            }
            guard let (batch, currentFD, currentSize, rotate) = batch else { return }
            var fd = currentFD
            var base = currentSize
            var newSegment: Segment?
            var failure: OfflineQueueError?
            let firstSequence = batch.entries[0].sequence
            if rotate {
                let path = segmentPath(firstSequence)
                let created = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                if created < 0 {
                    failure = .io(errno, path: path, operation: "create journal segment")
                } else if let error = syncQueueDirectory(journalDirectory) {
                    Glibc.close(created)
                    unlink(path)
                    failure = error
                } else {
                    fd = created
                    base = 0
                    newSegment = Segment(first: firstSequence, last: firstSequence, path: path)
                }
            }
            let segmentFirst = newSegment?.first ?? state.withLock { $0.segments.last?.first ?? 0 }
            if failure == nil {
                failure = writeAll(fd, batch.bytes, at: base, path: segmentPath(segmentFirst))
                if failure == nil, fdatasync(fd) != 0 { failure = .io(errno, path: segmentPath(segmentFirst), operation: "sync") }
                if failure != nil {
                    // Cut the segment back: a half-written batch must not sit in front of later ones.
                    _ = ftruncate(fd, off_t(base))
                    _ = fdatasync(fd)
                }
            }
            let outcome = failure
            let waiters = state.withLock { state -> [WakeSignal] in
                if let outcome {
                    if newSegment != nil, fd != currentFD {
                        Glibc.close(fd)
                        unlink(segmentPath(firstSequence))
                    }
                    for entry in batch.entries { state.outcomes[entry.sequence] = .failure(outcome) }
                } else {
                    if let newSegment {
                        Glibc.close(state.activeFD)
                        state.activeFD = fd
                        state.segments.append(newSegment)
                    }
                    for var entry in batch.entries {
                        entry.segment = segmentFirst
                        entry.offset += base
                        state.index.append(entry)
                        state.liveBytes += entry.bytes
                        state.outcomes[entry.sequence] = .success(entry)
                    }
                    state.activeSize = base + Int64(batch.bytes.count)
                    if let last = batch.entries.last, !state.segments.isEmpty {
                        state.segments[state.segments.count - 1].last = last.sequence
                    }
                }
                return batch.entries.compactMap { state.waiters[$0.sequence] }
            }
            if let failure {
                logger.error("offline queue: \(failure)")
                for entry in batch.entries { if let file = entry.bodyFile { unlink(bodyPath(file)) } }
            }
            for waiter in waiters { waiter.signal() }
        }
    }

    /// Drops the oldest records while the queue is over a bound (`.dropOldest`).
    private func enforceBounds() -> [Entry] {
        var dropped: [Entry] = []
        while true {
            let over = state.withLock { state -> UInt64? in
                guard state.count > limits.maxRecords || state.liveBytes > limits.maxBytes, state.count > 1 else { return nil }
                return state.first?.sequence
            }
            guard let sequence = over, let entry = removeHead(sequence: sequence, reason: .droppedOldest) else { return dropped }
            logger.warning("offline queue: dropped the oldest record \(sequence) to stay within its bounds")
            dropped.append(entry)
        }
    }

    // MARK: - Removing

    /// Removes the head if it is still `sequence`: advances the cursor (a `pwrite`, synced at
    /// most every `cursorSyncInterval`), deletes its body file and any segment now wholly
    /// removed. Returns the entry, or nil when the head has moved on.
    @discardableResult
    package func removeHead(sequence: UInt64, reason: Removal) -> Entry? {
        let result = state.withLock { state -> (Entry, [String], Int32?)? in
            guard !state.closed, !readOnly, let first = state.first, first.sequence == sequence else { return nil }
            state.head += 1
            if state.head > 1024 && state.head * 2 > state.index.count {
                state.index.removeFirst(state.head)
                state.head = 0
            }
            state.liveBytes -= first.bytes
            state.cursor.removedThrough = sequence
            switch reason {
            case .delivered: state.cursor.delivered += 1
            case .discarded: state.cursor.discarded += 1
            case .droppedOldest: state.cursor.droppedOldest += 1
            case .quarantined: state.cursor.quarantined += 1
            }
            writeCursor(&state)
            var unlinks: [String] = []
            if let file = first.bodyFile { unlinks.append(bodyPath(file)) }
            while state.segments.count > 1, state.segments[0].last <= sequence {
                unlinks.append(state.segments.removeFirst().path)
            }
            let due = state.count == 0 || Instant.now().since(state.lastCursorSync) >= limits.cursorSyncInterval
            if due {
                state.cursorDirty = false
                state.lastCursorSync = Instant.now()
            }
            return (first, unlinks, due ? state.stateFD : nil)
        }
        guard let (entry, unlinks, syncFD) = result else { return nil }
        if let syncFD { fdatasync(syncFD) }
        for path in unlinks { unlink(path) }
        return entry
    }

    /// Writes the cursor into its next slot (no sync). Call with the lock held.
    private func writeCursor(_ state: inout State) {
        state.cursor.generation += 1
        let slot = OfflineQueueJournal.encode(state.cursor)
        let offset = off_t(Int(state.cursor.generation % 2) * OfflineQueueJournal.cursorSlotLength)
        let written = slot.withUnsafeBytes { pwrite(state.stateFD, $0.baseAddress, $0.count, offset) }
        if written != slot.count { logger.error("offline queue: cannot write \(directory)/state: \(errnoMessage(errno))") }
        state.cursorDirty = true
    }

    /// Syncs the cursor now (`fdatasync`), e.g. before a planned shutdown.
    package func syncCursor() {
        let fd = state.withLock { state -> Int32? in
            guard !state.closed, state.cursorDirty else { return nil }
            state.cursorDirty = false
            state.lastCursorSync = Instant.now()
            return state.stateFD
        }
        if let fd { fdatasync(fd) }
    }

    // MARK: - Recovery

    /// Takes the queue's lock. A lock that is busy is tried again for up to 200 ms before the
    /// queue is reported locked: a child process being spawned holds copies of its parent's
    /// descriptors until it execs (close-on-exec or not), so a queue closed and reopened while
    /// any thread of the process spawns something can find its own old lock still held.
    private static func lock(_ path: String) throws(OfflineQueueError) -> Int32 {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .directoryUnusable(path: path, message: errnoMessage(errno)) }
        var code = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno
        for _ in 0..<20 where code == EWOULDBLOCK {
            usleep(10_000)
            code = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno
        }
        if code != 0 {
            var bytes = [UInt8](repeating: 0, count: 32)
            let count = pread(fd, &bytes, bytes.count, 0)
            Glibc.close(fd)
            if code == EWOULDBLOCK {
                let pid = count > 0 ? String(decoding: bytes.prefix(count).prefix { $0 >= 48 && $0 <= 57 }, as: UTF8.self) : "?"
                throw .locked(path: path, holder: "process \(pid)")
            }
            throw .directoryUnusable(path: path, message: errnoMessage(code))
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        return fd
    }

    private func recover(into state: inout State) throws(OfflineQueueError) {
        let statePath = directory + "/state"
        state.stateFD = readOnly ? open(statePath, O_RDONLY | O_CLOEXEC) : open(statePath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if readOnly && state.stateFD < 0 && errno == ENOENT {
            var info = stat()
            guard stat(journalDirectory, &info) == 0 else { throw .directoryUnusable(path: directory, message: "no offline queue here") }
        } else if state.stateFD < 0 {
            throw .directoryUnusable(path: statePath, message: errnoMessage(errno))
        }
        var slots = [UInt8](repeating: 0, count: 2 * OfflineQueueJournal.cursorSlotLength)
        let got = slots.withUnsafeMutableBytes { pread(state.stateFD, $0.baseAddress, $0.count, 0) }
        if let cursor = slots.withUnsafeBytes({ OfflineQueueJournal.decodeCursor(UnsafeRawBufferPointer(rebasing: $0.prefix(max(0, got)))) }
        ) {
            state.cursor = cursor
        } else if got > 0 {
            logger.error("offline queue: \(statePath) has no intact slot; records already delivered may be sent again")
        }

        let names = try listDirectory(journalDirectory)
        var firsts: [UInt64] = []
        for name in names {
            if name.hasSuffix(".log"), name.count == 24, let first = UInt64(name.dropLast(4)) {
                firsts.append(first)
            } else if name.hasSuffix(".rewrite") && !readOnly {
                unlink(journalDirectory + "/" + name)
            }
        }
        firsts.sort()
        var quarantineBytes = directorySize(quarantineDirectory)
        var lastSequence = state.cursor.removedThrough
        var live: [Entry] = []
        var referenced = Set<String>()
        for (position, first) in firsts.enumerated() {
            let path = segmentPath(first)
            var bytes = try readWholeFile(path)
            var kept: [Range<Int>] = []
            var damaged = false
            var tailOnly = true
            var segmentLast = first
            var segmentEntries: [Entry] = []
            let isLast = position == firsts.count - 1
            let scan = bytes.withUnsafeBytes { OfflineQueueJournal.scan($0) }
            var newOffset = 0
            for item in scan {
                switch item {
                case .damaged(let range, let atEnd):
                    damaged = true
                    if !atEnd { tailOnly = false }
                    if atEnd && isLast && bytes.withUnsafeBytes({ OfflineQueueJournal.isUnfinishedAppend(in: $0, at: range.lowerBound) }) {
                        // A write cut short by a kill or a power cut: never acknowledged, so
                        // nothing accepted is in it. Cut it off (below), as a crash leaves it.
                        if !readOnly {
                            logger.notice(
                                "offline queue: an append that never finished cut from \(path) at \(range.lowerBound) (\(range.count) bytes, never acknowledged)"
                            )
                        }
                        continue
                    }
                    let what = atEnd && isLast ? "a damaged tail" : "damaged bytes"
                    quarantine(bytes[range], name: "\(Self.segmentName(first))-\(range.lowerBound).bad", budget: &quarantineBytes)
                    if readOnly { continue }
                    logger.warning(
                        "offline queue: \(what) in \(path) at \(range.lowerBound)..<\(range.upperBound) (\(range.count) bytes) quarantined"
                    )
                    state.cursor.quarantined += 1
                case .record(let offset, let header):
                    let range = offset..<offset + header.recordLength
                    let payload = bytes.withUnsafeBytes {
                        try? OfflineQueueJournal.decodePayload(
                            UnsafeRawBufferPointer(rebasing: $0[(offset + OfflineQueueJournal.headerLength)..<range.upperBound]))
                    }
                    var problem: String?
                    if payload == nil { problem = "cannot be decoded" }
                    if header.sequence <= lastSequence && header.sequence > state.cursor.removedThrough {
                        problem = "is out of order (sequence \(header.sequence) after \(lastSequence))"
                    }
                    var bodyFile: String?
                    var bodyBytes: Int64 = 0
                    if problem == nil, case .file(let name, let length) = payload?.body, header.sequence > state.cursor.removedThrough {
                        var info = stat()
                        if stat(bodyPath(name), &info) != 0 || UInt64(info.st_size) != length {
                            problem = "has lost its body file \(name)"
                        } else {
                            bodyFile = name
                            bodyBytes = Int64(length)
                        }
                    }
                    if let problem {
                        damaged = true
                        tailOnly = false
                        if readOnly { continue }
                        quarantine(bytes[range], name: "\(Self.segmentName(first))-\(offset).bad", budget: &quarantineBytes)
                        logger.warning("offline queue: record \(header.sequence) in \(path) \(problem); quarantined")
                        state.cursor.quarantined += 1
                        continue
                    }
                    kept.append(range)
                    lastSequence = max(lastSequence, header.sequence)
                    segmentLast = max(segmentLast, header.sequence)
                    if header.sequence > state.cursor.removedThrough {
                        if let bodyFile { referenced.insert(bodyFile) }
                        segmentEntries.append(
                            Entry(
                                sequence: header.sequence, segment: first, offset: Int64(newOffset), length: header.recordLength,
                                enqueuedAtMilliseconds: header.enqueuedAtMilliseconds, bodyFile: bodyFile, bodyBytes: bodyBytes))
                    }
                    newOffset += header.recordLength
                }
            }
            if damaged && !readOnly {
                if tailOnly {
                    // Only the end is bad (an append that never finished): cut it off.
                    let end = kept.last?.upperBound ?? 0
                    if truncate(path, off_t(end)) != 0 { throw .io(errno, path: path, operation: "truncate") }
                    bytes.removeSubrange(end...)
                } else {
                    try rewrite(path, keeping: kept, of: bytes)
                }
            }
            if !isLast && segmentEntries.isEmpty && segmentLast <= state.cursor.removedThrough {
                if !readOnly { unlink(path) }
                continue
            }
            live.append(contentsOf: segmentEntries)
            state.segments.append(Segment(first: first, last: segmentLast, path: path))
        }
        // Body files nobody refers to: left by an enqueue that died before its record was
        // written, or by a removal that died before deleting them.
        for name in try listDirectory(bodiesDirectory) where !referenced.contains(name) && !readOnly {
            unlink(bodiesDirectory + "/" + name)
        }
        state.nextSequence = lastSequence + 1
        state.index = live
        state.liveBytes = live.reduce(0) { $0 + $1.bytes }
        if readOnly { return }
        if state.segments.isEmpty {
            let path = segmentPath(state.nextSequence)
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw .io(errno, path: path, operation: "create journal segment") }
            Glibc.close(fd)
            if let error = syncQueueDirectory(journalDirectory) { throw error }
            state.segments.append(Segment(first: state.nextSequence, last: state.nextSequence, path: path))
        }
        guard let active = state.segments.last else { return }
        state.activeFD = open(active.path, O_RDWR | O_CLOEXEC)
        guard state.activeFD >= 0 else { throw .io(errno, path: active.path, operation: "open") }
        var info = stat()
        fstat(state.activeFD, &info)
        state.activeSize = Int64(info.st_size)
        writeCursor(&state)
        fdatasync(state.stateFD)
        state.cursorDirty = false
        if state.count > limits.maxRecords || state.liveBytes > limits.maxBytes {
            logger.warning(
                "offline queue: \(state.count) records, \(state.liveBytes) bytes exceed the limits (\(limits.maxRecords), \(limits.maxBytes))"
            )
        }
    }

    /// Drops records over the bounds after opening (`.dropOldest` only).
    package func enforceBoundsAfterOpen() -> [Entry] { limits.dropOldest ? enforceBounds() : [] }

    private func quarantine(_ bytes: ArraySlice<UInt8>, name: String, budget: inout Int64) {
        guard !readOnly else { return }
        guard budget + Int64(bytes.count) <= Self.quarantineLimit else {
            logger.warning("offline queue: quarantine is full (\(Self.quarantineLimit) bytes); \(name) not kept")
            return
        }
        let path = quarantineDirectory + "/" + name
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        defer { Glibc.close(fd) }
        if writeAll(fd, Array(bytes), at: 0, path: path) == nil {
            fsync(fd)
            budget += Int64(bytes.count)
        }
    }

    private func rewrite(_ path: String, keeping ranges: [Range<Int>], of bytes: [UInt8]) throws(OfflineQueueError) {
        var kept: [UInt8] = []
        for range in ranges { kept.append(contentsOf: bytes[range]) }
        if let failure = replaceFile(path, with: kept, durability: .durable, temporarySuffix: ".rewrite") {
            throw .io(failure.code, path: failure.path, operation: failure.operation)
        }
    }
}

// MARK: - File helpers

/// Writes all of `bytes` at `offset`; nil, or the error.
package func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int64, path: String) -> OfflineQueueError? {
    bytes.withUnsafeBytes { raw in pwriteAll(fd, raw, at: offset).map { .io($0, path: path, operation: "write") } }
}

/// `fsync` on the directory at `path`; nil, or the error.
package func syncQueueDirectory(_ path: String) -> OfflineQueueError? {
    syncDirectory(path).map { .io($0.code, path: path, operation: $0.operation) }
}

/// The names in the directory at `path` (without `.` and `..`).
/// - Throws: `.directoryUnusable` when it cannot be opened, `.ioFailed` when the listing stops
///   on an error (EOVERFLOW: an inode number a 32-bit `readdir` cannot hold) — never a short
///   list that would pass for the whole.
package func listDirectory(_ path: String) throws(OfflineQueueError) -> [String] {
    guard let dir = opendir(path) else { throw .directoryUnusable(path: path, message: errnoMessage(errno)) }
    defer { closedir(dir) }
    var names: [String] = []
    if let code = readDirectoryNames(dir, { names.append($0) }) { throw .io(code, path: path, operation: "list") }
    return names
}

package func directorySize(_ path: String) -> Int64 {
    guard let names = try? listDirectory(path) else { return 0 }
    var total: Int64 = 0
    for name in names {
        var info = stat()
        if stat(path + "/" + name, &info) == 0 { total += Int64(info.st_size) }
    }
    return total
}

package func readWholeFile(_ path: String) throws(OfflineQueueError) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw .io(errno, path: path, operation: "open") }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw .io(errno, path: path, operation: "stat") }
    switch preadFully(fd, count: Int(info.st_size), at: 0) {
    case .success(let bytes): return bytes
    case .failure(let failure): throw .io(failure.code == 0 ? EIO : failure.code, path: path, operation: "read")
    }
}
