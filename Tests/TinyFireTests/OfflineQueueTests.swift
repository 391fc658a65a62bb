import Foundation
import Logging
import Synchronization
import Testing

@testable import TinyFire

/// A fresh directory under the temporary directory.
func makeTemporaryDirectory(_ label: String) throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-\(label)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// A POST to nginx's /ingest/ with a small body.
func ingestRequest(_ base: String, _ name: String, body: String? = nil) throws -> URLRequest {
    var request = try URLRequest(url: "\(base)/ingest/\(name)", method: .post)
    request.httpBody = Data((body ?? "body of \(name)").utf8)
    return request
}

@Suite("Offline queue journal format")
struct OfflineQueueJournalTests {
    let payload = OfflineQueueJournal.Payload(
        method: "POST", url: "http://example.test/a?b=c", idempotencyKey: "k-1",
        headers: [(name: "Content-Type", value: "text/plain"), (name: "X-Empty", value: "")], body: .inline(Array("hello".utf8)))

    @Test("a record decodes to what was encoded, and any changed byte is detected")
    func roundTripAndChecksums() throws {
        let record = OfflineQueueJournal.encode(sequence: 7, enqueuedAtMilliseconds: 1234, payload: payload)
        let header = try #require(record.withUnsafeBytes { OfflineQueueJournal.intactRecord(in: $0, at: 0) })
        #expect(header.sequence == 7 && header.enqueuedAtMilliseconds == 1234 && header.recordLength == record.count)
        let decoded = try record.withUnsafeBytes {
            try OfflineQueueJournal.decodePayload(UnsafeRawBufferPointer(rebasing: $0[OfflineQueueJournal.headerLength...]))
        }
        #expect(decoded == payload)
        for index in record.indices {
            var damaged = record
            damaged[index] ^= 0x40
            #expect(damaged.withUnsafeBytes { OfflineQueueJournal.intactRecord(in: $0, at: 0) } == nil, "byte \(index)")
        }
    }

    @Test("the scanner skips damage and finds every intact record behind it")
    func scanResynchronises() {
        let records = (1...4).map { OfflineQueueJournal.encode(sequence: UInt64($0), enqueuedAtMilliseconds: 0, payload: payload) }
        var bytes = records.flatMap { $0 }
        let second = records[0].count
        bytes[second + 5] ^= 0xFF  // the length field of record 2
        let entries = bytes.withUnsafeBytes { OfflineQueueJournal.scan($0) }
        let sequences = entries.compactMap { entry -> UInt64? in
            if case .record(_, let header) = entry { return header.sequence }
            return nil
        }
        #expect(sequences == [1, 3, 4])
        #expect(entries.contains(.damaged(range: second..<(second + records[1].count), atEnd: false)))
    }

    @Test("the cursor survives a torn slot: the other slot is used")
    func cursorSlots() {
        var cursor = OfflineQueueJournal.Cursor(generation: 1, removedThrough: 5, delivered: 5)
        var file = [UInt8](repeating: 0, count: 2 * OfflineQueueJournal.cursorSlotLength)
        file.replaceSubrange(80..<160, with: OfflineQueueJournal.encode(cursor))
        cursor.generation = 2
        cursor.removedThrough = 6
        file.replaceSubrange(0..<80, with: OfflineQueueJournal.encode(cursor))
        #expect(file.withUnsafeBytes { OfflineQueueJournal.decodeCursor($0) }?.removedThrough == 6)
        file[20] ^= 1  // tear the newer slot
        #expect(file.withUnsafeBytes { OfflineQueueJournal.decodeCursor($0) }?.removedThrough == 5)
    }

    @Test("backoff grows, caps and spreads within its jitter")
    func backoff() {
        let backoff = OfflineQueue.Backoff(initial: .seconds(1), maximum: .seconds(10), multiplier: 2, jitter: 0.2)
        #expect(backoff.delay(afterFailure: 1, random: 0.5) == .seconds(1))
        #expect(backoff.delay(afterFailure: 3, random: 0.5) == .seconds(4))
        #expect(backoff.delay(afterFailure: 30, random: 0.5) == .seconds(10))
        #expect(backoff.delay(afterFailure: 1, random: 0) == .milliseconds(800))
        #expect(backoff.delay(afterFailure: 1, random: 1) == .milliseconds(1200))
    }
}

@Suite("Offline queue replay state machine")
struct OfflineQueueReplayTests {
    @Test("sends in order, backs off after a failure, and goes at once when the network returns")
    func transitions() {
        var replay = OfflineQueueReplay()
        #expect(replay.handle(.recordsAvailable) == [])
        #expect(replay.handle(.start(hasRecords: true)) == [.sendHead])
        #expect(replay.handle(.recordsAvailable) == [])  // one in flight at a time
        #expect(replay.handle(.attemptFailed) == [.scheduleRetry(failure: 1)])
        #expect(replay.handle(.timerFired) == [.sendHead])
        #expect(replay.handle(.attemptFailed) == [.scheduleRetry(failure: 2)])
        #expect(replay.handle(.network(.notReachable)) == [.cancelRetry])
        #expect(replay.phase == .waitingForNetwork)
        #expect(replay.handle(.timerFired) == [])
        #expect(replay.handle(.network(.reachable)) == [.sendHead])
        #expect(replay.failures == 0)
        #expect(replay.handle(.headRemoved(more: true)) == [.sendHead])
        #expect(replay.handle(.headRemoved(more: false)) == [])
        #expect(replay.phase == .idle)
        #expect(replay.handle(.network(.notReachable)) == [])
        #expect(replay.handle(.recordsAvailable) == [])
        #expect(replay.phase == .waitingForNetwork)
        #expect(replay.handle(.network(.reachable)) == [.sendHead])
        #expect(replay.handle(.attemptFailed) == [.scheduleRetry(failure: 1)])
        #expect(replay.handle(.network(.reachable)) == [.cancelRetry, .sendHead])
        #expect(replay.handle(.stop) == [])
        #expect(replay.handle(.headRemoved(more: true)) == [])
        #expect(replay.phase == .stopped)
    }

    @Test("a failure while the network is down waits for it instead of a timer")
    func failureWhileDown() {
        var replay = OfflineQueueReplay()
        _ = replay.handle(.start(hasRecords: true))
        _ = replay.handle(.network(.notReachable))
        #expect(replay.handle(.attemptFailed) == [])
        #expect(replay.phase == .waitingForNetwork)
        #expect(replay.handle(.network(.unknown)) == [.sendHead])
    }
}

@Suite("Offline queue on disk", .serialized)
struct OfflineQueueStoreTests {
    private func segmentFile(_ directory: String) throws -> String {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory + "/journal").filter { $0.hasSuffix(".log") }.sorted()
        return directory + "/journal/" + (try #require(names.last))
    }

    @Test("records survive reopening, with method, URL, headers and inline or file bodies intact")
    func reopen() throws {
        let directory = try makeTemporaryDirectory("queue-reopen")
        let large = Data((0..<200_000).map { UInt8($0 % 251) })
        let largeFile = directory + "-large.bin"
        try large.write(to: URL(fileURLWithPath: largeFile))
        do {
            let queue = try OfflineQueue(directory: directory)
            var request = try URLRequest(url: "http://example.test/a", method: .put, headers: ["X-Trace": "1"])
            request.httpBody = Data("small".utf8)
            let first = try queue.enqueue(request)
            let second = try queue.enqueue(try URLRequest(url: "http://example.test/b", method: .post), bodyFile: largeFile)
            #expect(!first.bodyIsFile && second.bodyIsFile && second.bodyLength == 200_000)
            queue.close()
        }
        try FileManager.default.removeItem(atPath: largeFile)  // the queue kept its own copy
        let queue = try OfflineQueue(directory: directory)
        let records = queue.records()
        #expect(records.map(\.url) == ["http://example.test/a", "http://example.test/b"])
        #expect(records.map(\.method) == [.put, .post])
        #expect(records[0].headers.value(for: "X-Trace") == "1")
        let entries = queue.store.entries()
        let bodies = try entries.map { try queue.store.read($0).body }
        #expect(bodies[0] == .inline(Array("small".utf8)))
        guard case .file(let name, 200_000) = bodies[1] else {
            Issue.record("expected a body file, got \(bodies[1])")
            return
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: queue.store.bodyPath(name))) == large)
        #expect(queue.statistics.records == 2 && queue.statistics.bytes > 200_000)
    }

    @Test("a second process cannot open a queue that is open; inspection still works")
    func locked() throws {
        let directory = try makeTemporaryDirectory("queue-lock")
        let queue = try OfflineQueue(directory: directory)
        try queue.enqueue(try URLRequest(url: "http://example.test/x", method: .post))
        let result = try fireAgent(["queue", "add", "--dir", directory, "http://example.test/y"])
        #expect(result.status == 23)
        #expect(result.stderr.contains("in use by process \(getpid())"))
        let list = try fireAgent(["queue", "list", "--dir", directory])
        #expect(list.status == 0)
        #expect(String(decoding: list.stdout, as: UTF8.self).contains("POST http://example.test/x 0 "))
        queue.close()
    }

    @Test(
        "a journal cut at every byte of its last record (an append a kill cut short, never acknowledged): cut off, not counted as damage, the others stay, appends continue"
    )
    func tornTailAtEveryOffset() throws {
        let original = try makeTemporaryDirectory("queue-torn")
        do {
            let queue = try OfflineQueue(directory: original)
            for n in 1...5 { try queue.enqueue(try ingestRequest("http://example.test", "\(n)")) }
            queue.close()
        }
        let segment = try segmentFile(original)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: segment))
        let entries = [UInt8](bytes).withUnsafeBytes { OfflineQueueJournal.scan($0) }
        guard case .record(let lastOffset, _) = entries.last else {
            Issue.record("no records")
            return
        }
        var cuts = 0
        for cut in lastOffset..<bytes.count {
            let copy = original + "-cut"
            try? FileManager.default.removeItem(atPath: copy)
            try FileManager.default.copyItem(atPath: original, toPath: copy)
            let copySegment = copy + "/journal/" + URL(fileURLWithPath: segment).lastPathComponent
            try bytes.prefix(cut).write(to: URL(fileURLWithPath: copySegment))
            let queue = try OfflineQueue(directory: copy)
            #expect(queue.records().map(\.url) == (1...4).map { "http://example.test/ingest/\($0)" }, "cut at \(cut)")
            #expect(queue.statistics.quarantined == 0, "cut at \(cut)")
            #expect((try FileManager.default.contentsOfDirectory(atPath: copy + "/quarantine")).isEmpty, "cut at \(cut)")
            let attributes = try FileManager.default.attributesOfItem(atPath: copySegment)
            #expect((attributes[.size] as? Int) == lastOffset, "cut at \(cut): the unfinished bytes are cut off")
            try queue.enqueue(try ingestRequest("http://example.test", "new"))
            queue.close()
            let reopened = try OfflineQueue(directory: copy)
            #expect(reopened.records().map(\.url).last == "http://example.test/ingest/new", "cut at \(cut)")
            #expect(reopened.records().count == 5)
            reopened.close()
            cuts += 1
        }
        #expect(cuts == bytes.count - lastOffset && cuts > 50)
    }

    /// A queue of five records (`…/ingest/1` … `5`) whose record `index` (from 0) has one payload
    /// byte flipped on disk.
    func queueWithCorruptRecord(_ index: Int, name: String) throws -> String {
        let directory = try makeTemporaryDirectory(name)
        do {
            let queue = try OfflineQueue(directory: directory)
            for n in 1...5 { try queue.enqueue(try ingestRequest("http://example.test", "\(n)")) }
            queue.close()
        }
        let segment = try segmentFile(directory)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: segment)))
        let offsets = bytes.withUnsafeBytes { OfflineQueueJournal.scan($0) }.compactMap { entry -> Int? in
            if case .record(let offset, _) = entry { return offset }
            return nil
        }
        bytes[offsets[index] + 40] ^= 0x55  // inside the record's payload
        try Data(bytes).write(to: URL(fileURLWithPath: segment))
        return directory
    }

    @Test("a last record of full length whose payload is corrupt is damage, not an unfinished append: set aside and counted")
    func corruptLastRecord() throws {
        let directory = try queueWithCorruptRecord(4, name: "queue-corrupt-last")
        let queue = try OfflineQueue(directory: directory)
        #expect(queue.records().count == 4)
        #expect(queue.statistics.quarantined == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/quarantine").count == 1)
        queue.close()
    }

    @Test("a corrupt record in the middle is quarantined once; the records behind it are delivered")
    func corruptMiddleRecord() throws {
        let directory = try queueWithCorruptRecord(2, name: "queue-corrupt")
        let queue = try OfflineQueue(directory: directory)
        #expect(queue.records().map(\.url).map { $0.split(separator: "/").last.map(String.init) ?? "" } == ["1", "2", "4", "5"])
        #expect(queue.statistics.quarantined == 1)
        let quarantined = try FileManager.default.contentsOfDirectory(atPath: directory + "/quarantine")
        #expect(quarantined.count == 1)
        queue.close()
        let again = try OfflineQueue(directory: directory)
        #expect(again.records().count == 4)
        #expect(again.statistics.quarantined == 1, "quarantined again on the second open")
    }

    @Test("crafted numbers with valid checksums (sequence UInt64.max, a cursor at UInt64.max) are quarantined, never a trap")
    func craftedNumbersAreDamage() throws {
        let directory = try makeTemporaryDirectory("queue-crafted")
        do {
            let queue = try OfflineQueue(directory: directory)
            for n in 1...3 { try queue.enqueue(try ingestRequest("http://example.test", "\(n)")) }
            queue.close()
        }
        // A record appended by someone else: the largest sequence, every checksum right.
        let payload = OfflineQueueJournal.Payload(
            method: "POST", url: "http://example.test/evil", idempotencyKey: "k", headers: [], body: .none)
        let segment = try segmentFile(directory)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: segment))
        try handle.seekToEnd()
        try handle.write(contentsOf: OfflineQueueJournal.encode(sequence: .max, enqueuedAtMilliseconds: .max, payload: payload))
        try handle.close()
        // Both cursor slots at the largest generation and counters, checksums right.
        let state = directory + "/state"
        let cursor = OfflineQueueJournal.Cursor(
            generation: .max, removedThrough: 0, delivered: .max, droppedOldest: .max, rejectedNew: .max, discarded: .max, quarantined: .max
        )
        try Data(OfflineQueueJournal.encode(cursor) + OfflineQueueJournal.encode(cursor)).write(to: URL(fileURLWithPath: state))

        // Read-only inspection in another process, then the library: neither traps.
        let stats = try fireAgent(["queue", "stats", "--dir", directory])
        #expect(stats.status == 0, "queue stats: exit \(stats.status) \(stats.stderr.prefix(300))")
        #expect(String(decoding: stats.stdout, as: UTF8.self).contains("records=3\n"), "\(String(decoding: stats.stdout, as: UTF8.self))")
        let queue = try OfflineQueue(directory: directory)
        #expect(queue.records().map(\.url).map { $0.split(separator: "/").last.map(String.init) ?? "" } == ["1", "2", "3"])
        #expect(queue.statistics.quarantined >= 1)
        // Appends go on with ordinary numbers.
        let next = try queue.enqueue(try ingestRequest("http://example.test", "4"))
        #expect(next.sequence == 4)
        queue.close()
    }

    @Test("bounds: rejectNew refuses and counts; dropOldest drops the oldest and counts")
    func bounds() throws {
        let rejecting = try makeTemporaryDirectory("queue-reject")
        do {
            let queue = try OfflineQueue(directory: rejecting, configuration: .init(maxRecords: 3))
            for n in 1...3 { try queue.enqueue(try ingestRequest("http://example.test", "\(n)")) }
            #expect(throws: OfflineQueueError.self) { try queue.enqueue(try ingestRequest("http://example.test", "4")) }
            do {
                try queue.enqueue(try ingestRequest("http://example.test", "4"))
            } catch {
                #expect("\(error)".contains("full") && "\(error)".contains("limits 3 records"))
            }
            queue.close()
        }
        let reopened = try OfflineQueue(directory: rejecting, configuration: .init(maxRecords: 3))
        #expect(reopened.records().count == 3 && reopened.statistics.rejectedNew == 2)
        reopened.close()

        let dropping = try makeTemporaryDirectory("queue-drop")
        let queue = try OfflineQueue(directory: dropping, configuration: .init(maxRecords: 3, overflowPolicy: .dropOldest))
        for n in 1...5 { try queue.enqueue(try ingestRequest("http://example.test", "\(n)")) }
        #expect(queue.records().map(\.url).map { $0.suffix(1) } == ["3", "4", "5"])
        #expect(queue.statistics.droppedOldest == 2)

        let tooLarge = try makeTemporaryDirectory("queue-large")
        let small = try OfflineQueue(directory: tooLarge, configuration: .init(maxBytes: 1000))
        #expect(throws: OfflineQueueError.self) {
            try small.enqueue(try ingestRequest("http://example.test", "big", body: String(repeating: "x", count: 2000)))
        }
    }

    @Test("disk full (a small tmpfs): a clear error, and nothing queued before is lost")
    func diskFull() throws {
        let mountPoint = try makeTemporaryDirectory("queue-tmpfs")
        try runCommand("/bin/mount", ["-t", "tmpfs", "-o", "size=96k", "tinyfire-test", mountPoint])
        defer { _ = try? runCommand("/bin/umount", [mountPoint]) }
        let directory = mountPoint + "/queue"
        var accepted: [String] = []
        var failure: OfflineQueueError?
        do {
            let queue = try OfflineQueue(directory: directory, configuration: .init(inlineBodyLimit: 4096))
            for n in 1...200 {
                do {
                    try queue.enqueue(try ingestRequest("http://example.test", "\(n)", body: String(repeating: "\(n % 10)", count: 3000)))
                    accepted.append("http://example.test/ingest/\(n)")
                } catch {
                    failure = error as? OfflineQueueError
                    break
                }
            }
            // A large body (a body file) fails too, and leaves no partial file behind.
            let big = mountPoint + "-big.bin"
            try Data(count: 300_000).write(to: URL(fileURLWithPath: big))
            #expect(throws: OfflineQueueError.self) {
                try queue.enqueue(try URLRequest(url: "http://example.test/big", method: .post), bodyFile: big)
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/bodies").isEmpty)
            queue.close()
        }
        guard case .diskFull(let path) = failure else {
            Issue.record("expected diskFull, got \(String(describing: failure))")
            return
        }
        #expect(path.hasPrefix(directory))
        #expect(failure?.description.contains("no space left") == true)
        #expect(accepted.count > 5)
        let queue = try OfflineQueue(directory: directory)
        #expect(queue.records().map(\.url) == accepted)
        for (entry, n) in zip(queue.store.entries(), 1...) {
            #expect(try queue.store.read(entry).body == .inline(Array(String(repeating: "\(n % 10)", count: 3000).utf8)))
        }
    }
}

/// Runs a program; throws with its stderr when it fails.
@discardableResult
func runCommand(_ executable: String, _ arguments: [String]) throws -> String {
    let result = try runCapturingOutput(executable, arguments)
    guard result.status == 0 else {
        throw FixtureError(description: "\(executable) \(arguments.joined(separator: " ")) failed: \(result.stderr)")
    }
    return String(decoding: result.stdout, as: UTF8.self)
}
