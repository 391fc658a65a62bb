import Foundation
import Logging
import Synchronization
import Testing

@testable import TinyFire

/// Collects delivery events.
final class DeliveryRecorder: Sendable {
    let events = Mutex<[OfflineQueue.DeliveryEvent]>([])

    func attach(to queue: OfflineQueue) {
        queue.onDeliveryEvent { [self] event in events.withLock { $0.append(event) } }
    }

    /// Waits until `predicate` holds for the events so far, up to `timeout`.
    func wait(within timeout: Duration = .seconds(5), until predicate: ([OfflineQueue.DeliveryEvent]) -> Bool) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if events.withLock({ predicate($0) }) { return true }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return events.withLock { predicate($0) }
    }

    var delivered: Int {
        events.withLock { $0.filter { if case .delivered = $0 { return true } else { return false } }.count }
    }
}

@Suite("Offline queue delivery and durability", .serialized)
struct OfflineQueueDeliveryTests {
    @Test("kill -9 at random points, hundreds of times: every enqueue that returned is delivered exactly once, in order")
    func killNineDurability() throws {
        let nginx = try NginxFixture.shared.get()
        let directory = try makeTemporaryDirectory("queue-kill")
        let token = "kill-\(UUID().uuidString.prefix(8))"
        let rounds = 300
        var acknowledged: [(n: Int, key: String)] = []
        var killedMidway = 0
        var generator = SystemRandomNumberGenerator()
        for round in 0..<rounds {
            let start = round * 1_000_000
            let process = Process()
            process.executableURL = URL(fileURLWithPath: try fireAgentPath())
            process.arguments = [
                "queue", "add", "--dir", directory, "--repeat", "100000", "--start", String(start), "-d", "r{n}",
                "\(nginx.base)/ingest/\(token)/{n}",
            ]
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            try process.run()
            // TINYFIRE_TEST_TIME_SCALE stretches the window where an emulator starts processes
            // ten times slower (cross/test.sh under qemu).
            Thread.sleep(forTimeInterval: Double.random(in: 0.008...0.045, using: &generator) * testTimeScale)
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            if process.terminationReason == .uncaughtSignal { killedMidway += 1 }
            let lines = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n")
            for (index, line) in lines.enumerated() {
                let fields = line.split(separator: " ")
                guard fields.count == 3, fields[0] == "queued" else {
                    Issue.record("unexpected line \(line)")
                    continue
                }
                acknowledged.append((start + index, String(fields[2])))
            }
        }
        #expect(killedMidway > rounds * 9 / 10, "the kills mostly landed after the loop ended")
        #expect(acknowledged.count > rounds)

        let queue = try OfflineQueue(directory: directory)
        let queued = queue.statistics.records
        let flushed = try flushSynchronously(queue)
        #expect(flushed.remaining == 0 && flushed.failure == nil)
        queue.close()

        let lines = nginx.ingestLines(containing: "/\(token)/")
        let delivered = lines.map { line -> (n: Int, key: String, length: String) in
            let fields = line.split(separator: " ")
            let n = Int(fields[0].split(separator: "/").last ?? "") ?? -1
            return (n, String(fields[3]).trimmingCharacters(in: CharacterSet(charactersIn: "\"")), String(fields[2]))
        }
        let deliveredKeys = Dictionary(grouping: delivered, by: \.key)
        let lost = acknowledged.filter { deliveredKeys[$0.key] == nil }
        let duplicated = deliveredKeys.filter { $0.value.count > 1 }
        #expect(lost.isEmpty, "lost \(lost.count) acknowledged records, e.g. \(lost.prefix(3))")
        #expect(duplicated.isEmpty, "delivered twice: \(duplicated.keys.prefix(3))")
        #expect(delivered.map(\.n) == delivered.map(\.n).sorted(), "delivered out of order")
        #expect(delivered.allSatisfy { $0.length == String("r\($0.n)".utf8.count) }, "a body arrived changed")
        #expect(delivered.count == queued)
        print(
            "kill -9 durability: \(rounds) rounds (\(killedMidway) killed mid-loop), \(acknowledged.count) acknowledged, "
                + "\(queued) queued after recovery, \(delivered.count) delivered, \(lost.count) lost, \(duplicated.count) duplicated")
    }

    @Test("background delivery: in order with an Idempotency-Key, 503 retried with backoff, 422 discarded when the caller says so")
    func delivery() throws {
        let nginx = try NginxFixture.shared.get()
        let directory = try makeTemporaryDirectory("queue-deliver")
        let token = "deliver-\(UUID().uuidString.prefix(8))"
        let configuration = OfflineQueue.Configuration(
            backoff: .init(initial: .milliseconds(100), maximum: .milliseconds(200)),
            disposition: { status in (200..<300).contains(status) ? .delivered : status == 422 ? .discard : .retry })
        let queue = try OfflineQueue(directory: directory, configuration: configuration)
        let recorder = DeliveryRecorder()
        recorder.attach(to: queue)
        var keyed = try ingestRequest(nginx.base, "\(token)/1")
        keyed.headers.add(name: "Idempotency-Key", value: "\"caller-key\"")
        let first = try queue.enqueue(keyed)
        #expect(first.idempotencyKey == "caller-key")
        let second = try queue.enqueue(try ingestRequest(nginx.base, "\(token)/2"))
        let rejected = try queue.enqueue(try URLRequest(url: "\(nginx.base)/ingest-rejected/\(token)", method: .post))
        let unavailable = try queue.enqueue(try URLRequest(url: "\(nginx.base)/ingest-unavailable/\(token)", method: .post))
        queue.startDelivery()
        #expect(recorder.wait { events in events.filter { if case .failed = $0 { return true } else { return false } }.count >= 3 })
        queue.stopDelivery()
        let events = recorder.events.withLock { $0 }
        #expect(
            events.prefix(3) == [
                .delivered(sequence: first.sequence, idempotencyKey: "caller-key", status: 204),
                .delivered(sequence: second.sequence, idempotencyKey: second.idempotencyKey, status: 204),
                .discarded(sequence: rejected.sequence, idempotencyKey: rejected.idempotencyKey, status: 422),
            ])
        #expect(
            nginx.ingestLines(containing: "/ingest/\(token)/").map { $0.split(separator: " ").last.map(String.init) } == [
                "\"caller-key\"", "\"\(second.idempotencyKey)\"",
            ])
        // The 503 stays at the head, tried again with the same key each time.
        let attempts = nginx.ingestLines(containing: "/ingest-unavailable/\(token)")
        #expect(attempts.count >= 3)
        #expect(Set(attempts.map { $0.split(separator: " ").last.map(String.init) ?? "" }) == ["\"\(unavailable.idempotencyKey)\""])
        let statistics = queue.statistics
        #expect(statistics.records == 1 && statistics.delivered == 2 && statistics.discarded == 1)
        #expect(statistics.headFailures >= 3 && statistics.lastFailure?.contains("503") == true)
    }

    @Test("delivery waits while the namespace's network is down and starts within a second when it comes back")
    func reachabilityDrivesReplay() throws {
        let nginx = try NginxFixture.shared.get()
        let ns = try NetworkNamespace()
        let reachability = try NetworkReachabilityManager(host: nil, networkNamespace: ns.path)
        let directory = try makeTemporaryDirectory("queue-reach")
        let token = "reach-\(UUID().uuidString.prefix(8))"
        // A backoff far longer than the test: only reachability can make it send again.
        let queue = try OfflineQueue(
            directory: directory, configuration: .init(backoff: .init(initial: .seconds(600))), reachability: reachability)
        let recorder = DeliveryRecorder()
        recorder.attach(to: queue)
        try queue.enqueue(try ingestRequest(nginx.base, "\(token)/1"))
        queue.startDelivery()
        Thread.sleep(forTimeInterval: 0.5)
        #expect(nginx.ingestLines(containing: token).isEmpty, "sent while the network was down")
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        #expect(recorder.wait(within: .seconds(1)) { $0.count == 1 }, "not delivered within 1 s of the network coming back")
        #expect(nginx.ingestLines(containing: token).count == 1)

        // Down again: a new record waits; back up: it goes at once.
        try ns.inside(["route", "del", "default"])
        Thread.sleep(forTimeInterval: 0.3)
        try queue.enqueue(try ingestRequest(nginx.base, "\(token)/2"))
        Thread.sleep(forTimeInterval: 0.5)
        #expect(nginx.ingestLines(containing: token).count == 1)
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        #expect(recorder.wait(within: .seconds(1)) { $0.count == 2 })
        queue.stopDelivery()
        #expect(recorder.delivered == 2)
    }

    @Test("fire-agent queue add/list/stats/flush against nginx")
    func commands() throws {
        let nginx = try NginxFixture.shared.get()
        let directory = try makeTemporaryDirectory("queue-cli")
        let token = "cli-\(UUID().uuidString.prefix(8))"
        let added = try fireAgent([
            "queue", "add", "--dir", directory, "--repeat", "3", "-H", "Content-Type: text/plain", "-d", "line {n}",
            "\(nginx.base)/ingest/\(token)/{n}",
        ])
        #expect(added.status == 0)
        #expect(String(decoding: added.stdout, as: UTF8.self).split(separator: "\n").count == 3)
        let list = String(decoding: try fireAgent(["queue", "list", "--dir", directory]).stdout, as: UTF8.self)
        #expect(
            list.split(separator: "\n").map { $0.split(separator: " ")[3] } == (1...3).map { "\(nginx.base)/ingest/\(token)/\($0)"[...] })
        let stats = String(decoding: try fireAgent(["queue", "stats", "--dir", directory]).stdout, as: UTF8.self)
        #expect(stats.contains("records=3\n") && stats.contains("delivered=0\n"))
        let flush = try fireAgent(["queue", "flush", "--dir", directory])
        #expect(flush.status == 0)
        #expect(String(decoding: flush.stdout, as: UTF8.self) == "delivered 3 discarded 0 remaining 0\n")
        #expect(nginx.ingestLines(containing: token).count == 3)
        let after = String(decoding: try fireAgent(["queue", "stats", "--dir", directory]).stdout, as: UTF8.self)
        #expect(after.contains("records=0\n") && after.contains("delivered=3\n"))

        let failing = try fireAgent(["queue", "add", "--dir", directory, "-d", "x", "http://127.0.0.1:1/nowhere"])
        #expect(failing.status == 0)
        let stuck = try fireAgent(["queue", "flush", "--dir", directory])
        #expect(stuck.status == 7)
        #expect(stuck.stderr.contains("127.0.0.1:1"))
        let missing = try fireAgent(["queue", "stats", "--dir", directory + "-nope"])
        #expect(missing.status == 26 && missing.stderr.contains("no offline queue here"))
    }
}

/// How much slower than this machine the tests run: TINYFIRE_TEST_TIME_SCALE, default 1.
let testTimeScale = ProcessInfo.processInfo.environment["TINYFIRE_TEST_TIME_SCALE"].flatMap(Double.init).map { max(1, $0) } ?? 1

func flushSynchronously(_ queue: OfflineQueue) throws -> OfflineQueue.FlushResult {
    let done = DispatchSemaphore(value: 0)
    let outcome = Mutex<Result<OfflineQueue.FlushResult, OfflineQueueError>?>(nil)
    queue.flush { result in
        outcome.withLock { $0 = result }
        done.signal()
    }
    done.wait()
    guard let result = outcome.withLock({ $0 }) else { throw FixtureError(description: "flush did not finish") }
    return try result.get()
}
