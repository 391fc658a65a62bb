import Foundation
import HTTPTypes
import Synchronization
import Testing

@testable import TinyFire

/// A server that answers each POST after `delay`, records when each started and ended, and
/// answers 503 to a path under `/fail/N/` for its first N attempts.
final class SlowRecorder: @unchecked Sendable {
    let port: Int
    let log: String
    private let process: ChildProcess

    init(directory: String, delay: Double) throws {
        port = freePort()
        log = directory + "/slow.log"
        let script = """
            import http.server, sys, threading, time
            lock = threading.Lock()
            attempts = {}
            class Handler(http.server.BaseHTTPRequestHandler):
                protocol_version = "HTTP/1.1"
                def do_POST(self):
                    self.rfile.read(int(self.headers.get("Content-Length", "0")))
                    start = time.monotonic()
                    time.sleep(\(delay))
                    status = 204
                    parts = self.path.split("/")
                    with lock:
                        attempts[self.path] = attempts.get(self.path, 0) + 1
                        if len(parts) > 2 and parts[1] == "fail" and attempts[self.path] <= int(parts[2]):
                            status = 503
                        with open(sys.argv[2], "a") as log:
                            log.write("%f %f %s %d %s\\n" % (start, time.monotonic(), self.path, status, self.headers.get("Idempotency-Key")))
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                def log_message(self, *args):
                    pass
            http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
            """
        try Data(script.utf8).write(to: URL(filePath: directory + "/slow.py"))
        process = try ChildProcess(which("python3") ?? "/usr/bin/python3", [directory + "/slow.py", String(port), log])
        try waitForPort(port)
    }

    struct Entry {
        var start: Double
        var end: Double
        var path: String
        var status: Int
        var key: String
    }

    var entries: [Entry] {
        ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 5, let start = Double(fields[0]), let end = Double(fields[1]), let status = Int(fields[3]) else {
                return nil
            }
            return Entry(start: start, end: end, path: String(fields[2]), status: status, key: String(fields[4]))
        }
    }

    func stop() { process.stop() }
}

@Suite("Offline queue: records in flight at once (maxConcurrentDeliveries)", .serialized)
struct OfflineQueueWindowTests {
    func queue(_ directory: String, concurrent: Int) throws -> OfflineQueue {
        var configuration = OfflineQueue.Configuration(backoff: .init(initial: .milliseconds(300), maximum: .milliseconds(300)))
        configuration.maxConcurrentDeliveries = concurrent
        return try OfflineQueue(directory: directory, configuration: configuration)
    }

    func delivered(_ events: [OfflineQueue.DeliveryEvent]) -> [UInt64] {
        events.compactMap { if case .delivered(let sequence, _, _) = $0 { return sequence } else { return nil } }
    }

    /// A request as the server saw it: path, body, when it arrived, the status it got and when
    /// that was sent.
    struct Arrival {
        var path: String
        var body: String
        var at: ContinuousClock.Instant
        var status: Int
        var answeredAt: ContinuousClock.Instant
    }

    /// The requests a `recordingServer` saw.
    final class Arrivals: Sendable {
        let list = Mutex<[Arrival]>([])

        func withLock<T>(_ body: (inout [Arrival]) -> T) -> T { list.withLock { body(&$0) } }
    }

    /// A server that keeps every request's arrival, answers each with `answer(path, body,
    /// attempt)`: the status, the extra header lines, and how long it waits first.
    func recordingServer(
        _ arrivals: Arrivals, answer: @escaping @Sendable (String, String, Int) -> (Int, String, Double)
    ) throws -> HostileServer {
        try HostileServer { client in
            while true {
                let request = client.readRequest()
                guard let line = request.split(separator: "\r\n").first, line.hasPrefix("POST ") else { return }
                let at = ContinuousClock.now
                let path = String(line.split(separator: " ")[1])
                let body = String(decoding: client.lastBody, as: UTF8.self)
                let attempt = arrivals.withLock { list in list.filter { $0.path == path }.count + 1 }
                let (status, headers, delay) = answer(path, body, attempt)
                client.sleep(delay)
                let reason = status == 204 ? "No Content" : status == 429 ? "Too Many Requests" : "Refused"
                let sent = client.send("HTTP/1.1 \(status) \(reason)\r\n\(headers)Content-Length: 0\r\n\r\n")
                arrivals.withLock { $0.append(Arrival(path: path, body: body, at: at, status: status, answeredAt: .now)) }
                guard sent else { return }
            }
        }
    }

    /// The window's configuration with a judge: 429 waits its Retry-After, 413 is replaced by
    /// the body's two halves (lines), 2xx is delivered.
    func judgedQueue(_ directory: String) throws -> OfflineQueue {
        var configuration = OfflineQueue.Configuration(backoff: .init(initial: .milliseconds(300), maximum: .milliseconds(300)))
        configuration.maxConcurrentDeliveries = 4
        configuration.judge = { answer in
            switch answer.response.status.code {
            case 200..<300: return .delivered
            case 429: return .retryAfter(.seconds(Int64(answer.response.headerFields[HTTPField.Name("Retry-After")!] ?? "") ?? 1))
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
        return try OfflineQueue(directory: directory, configuration: configuration)
    }

    @Test(
        "four in flight at once over a slow server: each record once, removed and reported in the queue's order; one at a time by default")
    func window() throws {
        let directory = try makeTemporaryDirectory("queue-window")
        // Each answer takes long enough that the window's four are sent while the first waits
        // (longer under an emulator).
        let server = try SlowRecorder(directory: directory, delay: SpoolBigFileTests.emulated ? 1.5 : 0.3)
        defer { server.stop() }
        for (name, concurrent) in [("strict", 1), ("window", 4)] {
            let queue = try queue(directory + "/" + name, concurrent: concurrent)
            let recorder = DeliveryRecorder()
            recorder.attach(to: queue)
            let records = try (0..<12).map { index in
                try queue.enqueue(try URLRequest(url: "http://127.0.0.1:\(server.port)/\(name)/\(index)", method: .post))
            }
            queue.startDelivery()
            #expect(recorder.wait(within: .seconds(60)) { self.delivered($0).count == 12 }, "\(recorder.events.withLock { $0 })")
            queue.stopDelivery()
            #expect(delivered(recorder.events.withLock { $0 }) == records.map(\.sequence), "removed out of order")
            #expect(queue.statistics.records == 0)
            queue.close()
        }
        let strict = server.entries.filter { $0.path.hasPrefix("/strict/") }
        let window = server.entries.filter { $0.path.hasPrefix("/window/") }
        #expect(strict.count == 12 && window.count == 12, "each record sent once")
        /// The most requests under way at one moment (at each request's start).
        func concurrency(_ list: [SlowRecorder.Entry]) -> Int {
            list.map { entry in list.filter { $0.start <= entry.start && $0.end > entry.start }.count }.max() ?? 0
        }
        #expect(concurrency(strict) == 1, "strict order sends one at a time")
        #expect(concurrency(window) == 4, "the window keeps four in flight: \(concurrency(window))")
    }

    @Test("a failing head holds the removal of the records taken after it; closed then, those are sent again (at least once, same key)")
    func failingHead() throws {
        let directory = try makeTemporaryDirectory("queue-window-head")
        let server = try SlowRecorder(directory: directory, delay: 0.05)
        defer { server.stop() }
        var queue = try queue(directory + "/queue", concurrent: 4)
        let recorder = DeliveryRecorder()
        recorder.attach(to: queue)
        let head = try queue.enqueue(try URLRequest(url: "http://127.0.0.1:\(server.port)/fail/100/head", method: .post))
        let later = try (1...3).map { try queue.enqueue(try URLRequest(url: "http://127.0.0.1:\(server.port)/ok/\($0)", method: .post)) }
        queue.startDelivery()
        // The three behind it reach the server; the head keeps failing: nothing is removed.
        #expect(waitUntil(within: .seconds(30)) { server.entries.filter { $0.path.hasPrefix("/fail/") }.count >= 3 })
        #expect(Set(server.entries.filter { $0.path.hasPrefix("/ok/") }.map(\.path)) == ["/ok/1", "/ok/2", "/ok/3"])
        #expect(server.entries.filter { $0.path.hasPrefix("/ok/") }.count == 3, "not sent again while the head retries")
        #expect(delivered(recorder.events.withLock { $0 }).isEmpty && queue.statistics.records == 4)
        queue.stopDelivery()
        queue.close()

        // Reopened (as after a crash or a restart): the head is served now; the three are sent
        // again with the keys they had, then all four removed in order.
        queue = try self.queue(directory + "/queue", concurrent: 4)
        let again = DeliveryRecorder()
        again.attach(to: queue)
        let fixed = try OfflineQueue.inspect(directory: directory + "/queue").records.map(\.sequence)
        #expect(fixed == [head.sequence] + later.map(\.sequence))
        queue.startDelivery()
        // The head still fails (100 attempts): stop; the window resent the three once more.
        #expect(waitUntil(within: .seconds(30)) { server.entries.filter { $0.path.hasPrefix("/ok/") }.count >= 6 })
        let keys = Dictionary(grouping: server.entries.filter { $0.path.hasPrefix("/ok/") }, by: \.path).mapValues { Set($0.map(\.key)) }
        #expect(keys.values.allSatisfy { $0.count == 1 }, "a record sent again carries its key: \(keys)")
        queue.stopDelivery()
        queue.close()
    }

    @Test(
        "a 429 with Retry-After: 2 for a record in the window holds the whole queue: nothing starts for 2 s, then the head first; each record delivered once"
    )
    func throttleHoldsTheQueue() throws {
        let arrivals = Arrivals()
        // Every answer takes 0.6 s, the 429 0.3 s: the window's second round is sent together,
        // the 429 comes while the others of that round are in flight, and no answer (and so no
        // new request) falls near it.
        let server = try recordingServer(arrivals) { path, _, attempt in
            path == "/r/5" && attempt == 1 ? (429, "Retry-After: 2\r\n", 0.3) : (204, "", 0.6)
        }
        defer { server.stop() }
        let directory = try makeTemporaryDirectory("queue-window-throttle")
        let queue = try judgedQueue(directory)
        let recorder = DeliveryRecorder()
        recorder.attach(to: queue)
        let records = try (0..<12).map { index in
            try queue.enqueue(try URLRequest(url: "\(server.base)/r/\(index)", method: .post))
        }
        queue.startDelivery()
        #expect(recorder.wait(within: .seconds(60)) { self.delivered($0).count == 12 }, "\(recorder.events.withLock { $0 })")
        queue.stopDelivery()
        queue.close()
        #expect(delivered(recorder.events.withLock { $0 }) == records.map(\.sequence), "removed out of order")

        let seen = arrivals.withLock { $0 }.sorted { $0.at < $1.at }
        let throttle = try #require(seen.first { $0.status == 429 }, "the server never throttled")
        let start = seen[0].at
        let timeline = seen.map { "\($0.path) \($0.status) at \($0.at - start)" }.joined(separator: "; ")
        // Nothing starts while the server's throttle lasts: not the head, not the window.
        let during = seen.filter { $0.at > throttle.answeredAt && $0.at - throttle.answeredAt < .seconds(2) }
        #expect(during.isEmpty, "sent during the 2 s of Retry-After: \(during.map(\.path)) — \(timeline)")
        // Then the head goes first: the throttled record, whose turn it is by then.
        let after = seen.filter { $0.at > throttle.answeredAt }
        #expect(after.first?.path == "/r/5", "\(timeline)")
        let again = seen.filter { $0.path == "/r/5" }
        #expect(again.count == 2 && again.last.map { $0.at - throttle.answeredAt >= .seconds(2) } == true, "\(timeline)")
        // Every record arrived and was taken once.
        let taken = Dictionary(grouping: seen.filter { $0.status == 204 }, by: \.path).mapValues(\.count)
        #expect(taken == Dictionary(uniqueKeysWithValues: (0..<12).map { ("/r/\($0)", 1) }), "\(timeline)")
    }

    @Test("a 413 for a record in the window: it is replaced by its halves when it is the head, never sent whole again")
    func splitInTheWindow() throws {
        let arrivals = Arrivals()
        // The big record is answered at once, while the head before it is still in flight.
        let server = try recordingServer(arrivals) { _, body, _ in
            body.split(separator: "\n").count > 2 ? (413, "", 0.05) : (204, "", 0.5)
        }
        defer { server.stop() }
        let directory = try makeTemporaryDirectory("queue-window-split")
        let queue = try judgedQueue(directory)
        let recorder = DeliveryRecorder()
        recorder.attach(to: queue)
        func post(_ path: String, _ body: String) throws -> OfflineQueue.Record {
            var request = URLRequest(url: URL(string: "\(server.base)\(path)")!, method: .post)
            request.httpBody = Data(body.utf8)
            return try queue.enqueue(request)
        }
        let whole = "a x=1\nb x=2\nc x=3\nd x=4\n"
        let head = try post("/r/0", "h x=0\n")
        let big = try post("/big", whole)
        let rest = try (2..<6).map { try post("/r/\($0)", "r x=\($0)\n") }
        queue.startDelivery()
        // The four small records and the two halves.
        #expect(recorder.wait(within: .seconds(60)) { self.delivered($0).count == 7 }, "\(recorder.events.withLock { $0 })")
        queue.stopDelivery()
        let events = recorder.events.withLock { $0 }
        queue.close()
        #expect(events.contains(.replaced(sequence: big.sequence, idempotencyKey: big.idempotencyKey, status: 413, count: 2)))
        #expect(Array(delivered(events).prefix(5)) == [head.sequence] + rest.map(\.sequence), "removed out of order")

        let seen = arrivals.withLock { $0 }.sorted { $0.at < $1.at }
        let timeline = seen.map { "\($0.path) \($0.status) \($0.body.split(separator: "\n").count) lines" }.joined(separator: "; ")
        let bigOnes = seen.filter { $0.path == "/big" }
        #expect(bigOnes.filter { $0.body == whole }.count == 1, "the whole record was sent again: \(timeline)")
        #expect(bigOnes.map(\.body).sorted() == [whole, "a x=1\nb x=2\n", "c x=3\nd x=4\n"].sorted(), "\(timeline)")
        // Before its halves, nothing of it went again.
        #expect(bigOnes.first?.body == whole && bigOnes.dropFirst().allSatisfy { $0.status == 204 }, "\(timeline)")
    }
}
