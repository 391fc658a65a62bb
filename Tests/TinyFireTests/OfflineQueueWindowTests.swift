import Foundation
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
}
