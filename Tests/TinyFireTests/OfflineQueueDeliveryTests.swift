import Foundation
import HTTPTypes
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
        let arguments = { (directory: String, start: Int, count: Int) in
            [
                "queue", "add", "--dir", directory, "--repeat", String(count), "--start", String(start), "-d", "r{n}",
                // Far above what the rounds add: a full queue would refuse records and end
                // the children early, and the rounds would prove nothing.
                "--max-records", "1000000", "\(nginx.base)/ingest/\(token)/{n}",
            ]
        }
        // The kill window comes from this machine, not from a guess: how long a child takes to
        // acknowledge its first record (start-up, lock, recovery, one fdatasync) and then each
        // next one. Natively that is milliseconds; under qemu a hundred times more.
        // The calibration runs use the same queue (its recovery grows with it, as in the
        // rounds), and their records count like any other acknowledged ones.
        let calibrationRuns = 3
        let calibrationRecords = 40
        let calibration = try KillWindow.measure(runs: calibrationRuns, records: calibrationRecords) {
            try queueAdder(arguments(directory, $0 * 1_000_000, calibrationRecords))
        }
        var window = calibration.window
        // Up to 300 rounds, as many as fit in about 150 s of kill windows: 300 natively (tens of
        // milliseconds each), about a hundred under qemu (a second or two each).
        let meanWindow = (window.lowerBound + window.upperBound) / 2
        let rounds = min(300, max(60, Int(150 / meanWindow)))
        var acknowledged: [(n: Int, key: String)] = calibration.acknowledged.enumerated().flatMap { run, keys in
            keys.enumerated().map { (run * 1_000_000 + $0.offset, $0.element) }
        }
        var killedMidway = 0
        var roundsWithAcknowledgements = 0
        var generator = SystemRandomNumberGenerator()
        for round in 0..<rounds {
            // Fewer than a quarter of the rounds so far were killed after an acknowledgement:
            // the children start slower than the calibration runs did (a longer journal to
            // recover, a loaded emulator). Move the window later rather than prove less.
            if round > 0 && round % 30 == 0 && Double(roundsWithAcknowledgements) < Double(round) * 0.25 {
                window = (window.lowerBound * 1.3)...(window.upperBound * 1.3)
            }
            let start = (calibrationRuns + round) * 1_000_000
            let child = try queueAdder(arguments(directory, start, 100_000))
            Thread.sleep(forTimeInterval: Double.random(in: window, using: &generator))
            child.signal(SIGKILL)
            let text = try #require(child.collectOutput(), "no watch for a stuck start was asked for")
            if child.wasSignalled { killedMidway += 1 }
            let lines = String(decoding: text.stdout, as: UTF8.self).split(separator: "\n")
            if !lines.isEmpty { roundsWithAcknowledgements += 1 }
            for (index, line) in lines.enumerated() {
                let fields = line.split(separator: " ")
                guard fields.count == 3, fields[0] == "queued" else {
                    Issue.record("unexpected line \(line)")
                    continue
                }
                acknowledged.append((start + index, String(fields[2])))
            }
        }
        try #require(
            roundsWithAcknowledgements > 0,
            "no kill landed after an acknowledgement: \(calibration), last window \(window) s — the test proved nothing")
        #expect(
            killedMidway >= rounds * 9 / 10,
            "\(rounds - killedMidway) children ended before their kill: the rounds proved less than they claim")
        #expect(
            roundsWithAcknowledgements >= rounds / 10, "only \(roundsWithAcknowledgements) rounds acknowledged anything (\(calibration))")

        let queue = try OfflineQueue(directory: directory)
        let queued = queue.statistics.records
        let flushed = try flushSynchronously(queue)
        #expect(flushed.remaining == 0 && flushed.failure == nil)
        queue.close()

        let lines = nginx.ingestLines(containing: "/\(token)/", expecting: queued)
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
            "kill -9 durability: \(calibration); \(rounds) rounds (\(killedMidway) killed mid-loop, \(roundsWithAcknowledgements) "
                + "after an acknowledgement), \(acknowledged.count) acknowledged, "
                + "\(queued) queued after recovery, \(delivered.count) delivered, \(lost.count) lost, \(duplicated.count) duplicated")
    }

    @Test("flush right after stopDelivery() waits for the attempt background delivery still has in flight: one send, not two at once")
    func flushWaitsForAttemptInFlight() throws {
        let requests = Atomic<Int>(0)
        let server = try HostileServer { client in
            while true {
                let request = client.readRequest()
                guard request.hasPrefix("POST ") else { return }
                requests.add(1, ordering: .relaxed)
                client.sleep(1)  // the background attempt is still in flight when flush starts
                guard client.send("HTTP/1.1 204 No Content\r\n\r\n") else { return }
            }
        }
        defer { server.stop() }
        let directory = try makeTemporaryDirectory("queue-flush-in-flight")
        let queue = try OfflineQueue(directory: directory)
        let recorder = DeliveryRecorder()
        recorder.attach(to: queue)
        var request = URLRequest(url: URL(string: "\(server.base)/write")!, method: .post)
        request.httpBody = Data("m x=1\n".utf8)
        _ = try queue.enqueue(request)
        queue.startDelivery()
        let deadline = ContinuousClock.now + .seconds(10)
        while requests.load(ordering: .relaxed) == 0 && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.01) }
        queue.stopDelivery()
        let outcome = Mutex<Result<OfflineQueue.FlushResult, OfflineQueueError>?>(nil)
        queue.flush { result in outcome.withLock { $0 = result } }
        while outcome.withLock({ $0 }) == nil && ContinuousClock.now < deadline + .seconds(10) { Thread.sleep(forTimeInterval: 0.01) }
        let result = try #require(outcome.withLock { $0 }, "flush never finished")
        #expect(try result.get() == OfflineQueue.FlushResult(delivered: 0, discarded: 0, remaining: 0, failure: nil))
        #expect(requests.load(ordering: .relaxed) == 1)
        // Events reach the handler on its own queue: on a loaded machine after the flush's answer.
        _ = recorder.wait(within: .seconds(10)) { !$0.isEmpty }
        #expect(recorder.events.withLock { $0 }.count == 1 && recorder.delivered == 1, "\(recorder.events.withLock { $0 })")
        queue.close()
    }

    @Test("Retry-After: 0 at every refusal is no delay given: the backoff applies, not a busy loop")
    func retryAfterZero() throws {
        let attempts = Atomic<Int>(0)
        let server = try HostileServer { client in
            while true {
                let request = client.readRequest()
                guard request.hasPrefix("POST ") else { return }
                attempts.add(1, ordering: .relaxed)
                guard client.send("HTTP/1.1 503 Busy\r\nRetry-After: 0\r\nContent-Length: 0\r\n\r\n") else { return }
            }
        }
        defer { server.stop() }
        let directory = try makeTemporaryDirectory("queue-retry-after-zero")
        var configuration = OfflineQueue.Configuration(backoff: .init(initial: .milliseconds(500), maximum: .milliseconds(500)))
        configuration.judge = { answer in
            answer.response.status.code == 503
                ? .retryAfter(.seconds(Int64(answer.response.headerFields[HTTPField.Name("Retry-After")!] ?? "") ?? 1)) : .delivered
        }
        let queue = try OfflineQueue(directory: directory, configuration: configuration)
        var request = URLRequest(url: URL(string: "\(server.base)/write")!, method: .post)
        request.httpBody = Data("m x=1\n".utf8)
        _ = try queue.enqueue(request)
        queue.startDelivery()
        Thread.sleep(forTimeInterval: 2)
        queue.stopDelivery()
        queue.close()
        // About one attempt per 500 ms backoff (jitter may shorten a wait); a busy loop makes thousands.
        let count = attempts.load(ordering: .relaxed)
        #expect(count >= 2 && count <= 12, "\(count) attempts in 2 s")
    }

    @Test("judge: Retry-After replaces the backoff, 400 is a dead letter with the server's message, 413 is replaced by its halves")
    func judgedDelivery() throws {
        /// What the server saw: path and time of each request.
        let seen = Mutex<[(path: String, at: ContinuousClock.Instant, body: String)]>([])
        let server = try HostileServer { client in
            while true {
                let request = client.readRequest()
                guard let line = request.split(separator: "\r\n").first, line.hasPrefix("POST ") else { return }
                let path = String(line.split(separator: " ")[1])
                let body = String(decoding: client.lastBody, as: UTF8.self)
                let count = seen.withLock { state -> Int in
                    state.append((path, ContinuousClock.now, body))
                    return state.filter { $0.path == path }.count
                }
                let answer: String
                switch path {
                case "/bad":
                    let message = #"{"error":"unable to parse x"}"#
                    answer = "HTTP/1.1 400 Bad Request\r\nContent-Length: \(message.utf8.count)\r\n\r\n" + message
                case "/slow" where count == 1: answer = "HTTP/1.1 429 Too Many\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n"
                case "/big" where body.split(separator: "\n").count > 2: answer = "HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n"
                default: answer = "HTTP/1.1 204 No Content\r\n\r\n"
                }
                guard client.send(answer) else { return }
            }
        }
        defer { server.stop() }
        let directory = try makeTemporaryDirectory("queue-judge")
        let deadLetters = directory + "-dead"
        var configuration = OfflineQueue.Configuration(backoff: .init(initial: .milliseconds(20), maximum: .milliseconds(40)))
        configuration.deadLetterDirectory = deadLetters
        configuration.judge = { answer in
            let status = answer.response.status.code
            switch status {
            case 200..<300: return .delivered
            case 429: return .retryAfter(.seconds(Int64(answer.response.headerFields[HTTPField.Name("Retry-After")!] ?? "") ?? 1))
            case 400: return .deadLetter(reason: String(decoding: answer.body, as: UTF8.self))
            case 413:
                let lines = String(decoding: answer.requestBody ?? Data(), as: UTF8.self).split(separator: "\n")
                let half = lines.count / 2
                return .replace(
                    with: [lines[..<half], lines[half...]].map { part in
                        var request = URLRequest(url: URL(string: answer.record.url)!, method: .post)
                        request.httpBody = Data((part.joined(separator: "\n") + "\n").utf8)
                        return request
                    })
            default: return .retry
            }
        }
        let queue = try OfflineQueue(directory: directory, configuration: configuration)
        let recorder = DeliveryRecorder()
        recorder.attach(to: queue)
        func post(_ path: String, _ body: String) throws -> OfflineQueue.Record {
            var request = URLRequest(url: URL(string: "\(server.base)\(path)")!, method: .post)
            request.httpBody = Data(body.utf8)
            request.headers.add(name: "Authorization", value: "Token secret")
            return try queue.enqueue(request)
        }
        let bad = try post("/bad", "m x=1\n")
        let big = try post("/big", "a x=1\nb x=2\nc x=3\nd x=4\n")
        _ = try post("/slow", "s x=1\n")
        queue.startDelivery()
        #expect(
            recorder.wait(within: .seconds(30)) { $0.filter { if case .delivered = $0 { return true } else { return false } }.count >= 3 })
        queue.stopDelivery()
        let events = recorder.events.withLock { $0 }
        #expect(
            events.first
                == .deadLettered(
                    sequence: bad.sequence, idempotencyKey: bad.idempotencyKey, status: 400, reason: #"{"error":"unable to parse x"}"#))
        #expect(events.contains(.replaced(sequence: big.sequence, idempotencyKey: big.idempotencyKey, status: 413, count: 2)))
        let requests = seen.withLock { $0 }
        // The halves went to the same URL, each with half of the lines, after the 429's retry.
        #expect(requests.filter { $0.path == "/big" }.map(\.body) == ["a x=1\nb x=2\nc x=3\nd x=4\n", "a x=1\nb x=2\n", "c x=3\nd x=4\n"])
        let slow = requests.filter { $0.path == "/slow" }.map(\.at)
        #expect(slow.count == 2)
        if slow.count == 2 { #expect(slow[1] - slow[0] >= .milliseconds(1900), "Retry-After: 2 was not honoured: \(slow[1] - slow[0])") }
        // The dead letter: its body and what happened, without the credentials.
        let letter = try String(contentsOfFile: deadLetters + "/\(bad.sequence).json", encoding: .utf8)
        #expect(letter.contains("unable to parse x") && letter.contains("\"status\" : \"400\"") && !letter.contains("secret"), "\(letter)")
        #expect(try String(contentsOfFile: deadLetters + "/\(bad.sequence).body", encoding: .utf8) == "m x=1\n")
        #expect(queue.statistics.records == 0 && queue.statistics.discarded == 2)
        queue.close()
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
            nginx.ingestLines(containing: "/ingest/\(token)/", expecting: 2).map { $0.split(separator: " ").last.map(String.init) } == [
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

    @Test("delivery waits while the namespace's network is down and starts when it comes back, not on the backoff timer")
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
        // The backoff is 600 s: delivery within this test can only come from reachability.
        #expect(recorder.wait(within: .seconds(60)) { $0.count == 1 }, "not delivered when the network came back")
        #expect(nginx.ingestLines(containing: token, expecting: 1).count == 1)

        // Down again: a new record waits; back up: it goes at once.
        try ns.inside(["route", "del", "default"])
        Thread.sleep(forTimeInterval: 0.3)
        try queue.enqueue(try ingestRequest(nginx.base, "\(token)/2"))
        Thread.sleep(forTimeInterval: 0.5)
        #expect(nginx.ingestLines(containing: token, expecting: 1).count == 1)
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        #expect(recorder.wait(within: .seconds(60)) { $0.count == 2 })
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
        #expect(nginx.ingestLines(containing: token, expecting: 3).count == 3)
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

/// `fire-agent ARGUMENTS` with its stdout on a pipe (acknowledgement lines).
private func queueAdder(_ arguments: [String]) throws -> ChildProcess {
    try ChildProcess(try fireAgentPath(), arguments, stdout: .pipe)
}

/// When, after its start, a process that acknowledges records one by one on stdout is
/// acknowledging them, measured on this machine by running it to its end.
struct KillWindow: CustomStringConvertible {
    /// Seconds from spawn to the first acknowledgement, per calibration run.
    var firstAcknowledgement: [Double]
    /// Seconds per further acknowledgement (median over the runs).
    var perRecord: Double
    /// The keys each calibration run acknowledged (`queued SEQUENCE KEY` lines), in order.
    var acknowledged: [[String]]

    /// Kill times that spread from start-up (half the fastest first acknowledgement, so some
    /// kills land in start-up and recovery) to about 100 records past the slowest one — or,
    /// where start-up dwarfs the records (an emulator), as long past it as before it, so that
    /// about half the kills land among acknowledgements either way.
    var window: ClosedRange<Double> {
        let first = firstAcknowledgement.min() ?? 0.01
        let last = firstAcknowledgement.max() ?? 0.01
        return (first / 2)...(last + max(100 * perRecord, first / 2))
    }

    var description: String {
        let firsts = firstAcknowledgement.map { String(format: "%.1f", $0 * 1000) }.joined(separator: "/")
        return "first acknowledgement after \(firsts) ms, then \(String(format: "%.2f", perRecord * 1000)) ms per record"
    }

    /// Runs `spawn` `runs` times (with the run's index; each child acknowledges `records`
    /// records and exits) and
    /// times the acknowledgement lines as they arrive.
    static func measure(runs: Int, records: Int, spawn: (Int) throws -> ChildProcess) throws -> KillWindow {
        var firsts: [Double] = []
        var rates: [Double] = []
        var keys: [[String]] = []
        for run in 0..<runs {
            let started = ContinuousClock.now
            let child = try spawn(run)
            var stamps: [Double] = []
            var output: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = read(child.stdoutPipe, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                let now = (ContinuousClock.now - started).seconds
                stamps += Array(repeating: now, count: buffer[0..<n].filter { $0 == 0x0A }.count)
                output += buffer[0..<n]
            }
            keys.append(
                output.split(separator: 0x0A).compactMap { line in
                    let fields = line.split(separator: 0x20)
                    return fields.count == 3 ? String(decoding: fields[2], as: UTF8.self) : nil
                })
            child.closePipes()
            guard child.wait() == 0, stamps.count == records, let first = stamps.first, let last = stamps.last else {
                throw FixtureError(description: "calibration run \(run) acknowledged \(stamps.count) of \(records) records")
            }
            firsts.append(first)
            rates.append((last - first) / Double(records - 1))
        }
        return KillWindow(firstAcknowledgement: firsts, perRecord: rates.sorted()[rates.count / 2], acknowledged: keys)
    }
}

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
