import Foundation
import Synchronization
import Testing

@testable import TinyFire

/// One line of httpbin's /stream/N.
struct StreamLine: Decodable, Sendable {
    let id: Int
    let url: String
}

/// Collects a stream's events until `.complete`.
final class EventLog<Value: Sendable, Failure: Error>: @unchecked Sendable {
    let values = Mutex<[Value]>([])
    let failures = Mutex<Int>(0)
    let completion = Mutex<DataStreamRequest.Completion?>(nil)
    let done = DispatchSemaphore(value: 0)

    func record(_ stream: DataStreamRequest.Stream<Value, Failure>) {
        switch stream.event {
        case .stream(.success(let value)): values.withLock { $0.append(value) }
        case .stream(.failure): failures.withLock { $0 += 1 }
        case .complete(let completion):
            self.completion.withLock { $0 = completion }
            done.signal()
        }
    }

    /// The completion, or nil when none came within 120 s: a hang, not slowness (under
    /// qemu-aarch64 beside every other suite a 1 MiB stream has taken more than 30 s).
    func wait() async -> DataStreamRequest.Completion? {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                _ = self.done.wait(timeout: .now() + 120)
                continuation.resume(returning: self.completion.withLock { $0 })
            }
        }
    }
}

@Suite("Streaming responses", .serialized)
struct StreamTests {
    @Test("httpbin /stream/N decodes line by line; Data and String handlers see the same bytes, then one completion")
    func decodableLines() async throws {
        let server = try httpbin()
        // Started by hand once the three handlers are in: a handler added after the body
        // arrived would see none of it (as in Alamofire).
        let request = Session(startRequestsImmediately: false).streamRequest("\(server.base)/stream/5")
        let lines = EventLog<StreamLine, TinyFireError>()
        let chunks = EventLog<Data, Never>()
        let strings = EventLog<String, Never>()
        request.responseStreamDecodable(of: StreamLine.self) { lines.record($0) }
        request.responseStream { chunks.record($0) }
        request.responseStreamString { strings.record($0) }
        request.resume()
        let completion = try #require(await lines.wait(), "no completion")
        _ = await chunks.wait()
        _ = await strings.wait()
        #expect(completion.error == nil)
        #expect(completion.response?.status.code == 200)
        #expect(lines.values.withLock { $0.map(\.id) } == [0, 1, 2, 3, 4])
        let bytes = chunks.values.withLock { $0.reduce(Data(), +) }
        #expect(String(decoding: bytes, as: UTF8.self) == strings.values.withLock { $0.joined() })
        #expect(bytes.split(separator: 0x0A).count == 5)
    }

    @Test("/drip arrives in pieces over time and each piece is handed over as it comes")
    func dripChunks() async throws {
        let server = try httpbin()
        let log = EventLog<Data, Never>()
        Session().streamRequest("\(server.base)/drip?numbytes=5&duration=1&delay=0").responseStream { log.record($0) }
        let completion = try #require(await log.wait(), "no completion")
        #expect(completion.error == nil)
        let values = log.values.withLock { $0 }
        #expect(values.reduce(0) { $0 + $1.count } == 5)
        #expect(values.count >= 3, "\(values.count) chunks: the body was not streamed")
    }

    @Test("ways to cancel: request.cancel(), stream.cancel(), a kept token, a throwing handler; a failing serializer with auto-cancel")
    func cancelling() async throws {
        let server = try httpbin()
        let slow = "\(server.base)/drip?numbytes=20&duration=4&delay=0"

        let viaRequest = Session().streamRequest(slow)
        let first = EventLog<Data, Never>()
        viaRequest.responseStream { stream in
            first.record(stream)
            if stream.value != nil { viaRequest.cancel() }
        }
        #expect(await first.wait()?.error?.isExplicitlyCancelledError == true)

        let second = EventLog<Data, Never>()
        Session().streamRequest(slow).responseStream { stream in
            second.record(stream)
            if stream.value != nil { stream.cancel() }
        }
        #expect(await second.wait()?.error?.isExplicitlyCancelledError == true)
        #expect(second.values.withLock { $0.reduce(0) { $0 + $1.count } } < 20)

        // A stream that runs until cancelled: the token is used whenever this task resumes.
        let endless = try HostileServer.endlessStream()
        let kept = Mutex<DataStreamRequest.CancellationToken?>(nil)
        let third = EventLog<Data, Never>()
        Session().streamRequest(endless.base).responseStream { stream in
            kept.withLock { $0 = stream.token }
            third.record(stream)
        }
        #expect(await eventually { kept.withLock { $0 } != nil })
        kept.withLock { $0 }?.cancel()
        #expect(await third.wait()?.error?.isExplicitlyCancelledError == true)

        // A throwing handler cancels, as in Alamofire, and its error is the outcome.
        struct Stop: Error {}
        let fourth = EventLog<Data, Never>()
        let throwing = Session().streamRequest(slow)
        throwing.responseStream { stream in
            fourth.record(stream)
            if stream.value != nil { throw Stop() }
        }
        let thrown = await fourth.wait()?.error
        guard case .responseSerializationFailed(.customSerializationFailed(let error)) = thrown, error is Stop else {
            Issue.record("completion error \(String(describing: thrown))")
            return
        }
        #expect(fourth.values.withLock { $0.reduce(0) { $0 + $1.count } } < 20)
        #expect(throwing.isCancelled)
        if case .responseSerializationFailed = throwing.error {
        } else {
            Issue.record("request.error \(String(describing: throwing.error))")
        }

        // A serializer failure cancels only with automaticallyCancelOnStreamError.
        struct Odd: Error {}
        struct Picky: DataStreamSerializer {
            func serialize(_ data: Data) throws -> Int { throw Odd() }
        }
        let fifth = EventLog<Int, TinyFireError>()
        Session().streamRequest(slow, automaticallyCancelOnStreamError: true).responseStream(using: Picky()) { fifth.record($0) }
        #expect(await fifth.wait()?.error?.isExplicitlyCancelledError == true)
        #expect(fifth.failures.withLock { $0 } >= 1)
        let sixth = EventLog<Int, TinyFireError>()
        Session().streamRequest("\(server.base)/drip?numbytes=3&duration=0.3&delay=0").responseStream(using: Picky()) {
            sixth.record($0)
        }
        let sixthEnd = try #require(await sixth.wait(), "no completion")
        #expect(sixthEnd.error == nil)
        #expect(sixth.failures.withLock { $0 } >= 2, "each chunk failed to serialize, the stream went on")
    }

    @Test("async sequences: decodables in order, and cancelling the iterating task cancels the request")
    func asyncSequences() async throws {
        let server = try httpbin()
        var ids: [Int] = []
        var completed = false
        for await stream in Session().streamRequest("\(server.base)/stream/3").streamingDecodables(StreamLine.self) {
            if let line = stream.value { ids.append(line.id) }
            if stream.completion != nil { completed = true }
        }
        #expect(ids == [0, 1, 2] && completed)

        let endless = try HostileServer.endlessStream()
        let request = Session().streamRequest(endless.base)
        let received = Mutex(0)
        let task = Task {
            for await stream in request.streamingData() { received.withLock { $0 += stream.value?.count ?? 0 } }
        }
        // Patient: under qemu, with other suites' agents running beside it, the iterating task
        // once waited more than 30 s for a thread of the cooperative pool.
        #expect(await eventually(within: .seconds(120)) { received.withLock { $0 } > 0 })
        task.cancel()
        await task.value
        #expect(await eventually(within: .seconds(120)) { request.isCancelled })
    }

    @Test("validate() runs on the head: a 418 ends the stream with the status error and no data")
    func validation() async throws {
        let server = try httpbin()
        let log = EventLog<Data, Never>()
        Session().streamRequest("\(server.base)/status/418").validate().responseStream { log.record($0) }
        let completion = await log.wait()
        #expect(completion?.error?.responseCode == 418)
        #expect(log.values.withLock { $0.isEmpty })
    }

    @Test("a slow handler pauses reading: buffered bytes stay bounded and nothing is lost")
    func backpressure() async throws {
        let server = try nginx()
        let path = server.root + "/stream-8m.bin"
        var generator = SplitMix64(seed: 5)
        let body = Data((0..<(8 << 20)).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        try body.write(to: URL(filePath: path))
        let request = Session().streamRequest("\(server.base)/stream-8m.bin")
        let maxBuffered = Mutex(0)
        let log = EventLog<Data, Never>()
        request.responseStream { stream in
            maxBuffered.withLock { $0 = max($0, request.bufferedBytes) }
            if stream.value != nil { usleep(2000) }
            log.record(stream)
        }
        let completion = try #require(await log.wait(), "no completion")
        #expect(completion.error == nil)
        #expect(log.values.withLock { $0.reduce(Data(), +) } == body)
        let bound = DataStreamRequest.streamBufferLimit + SessionConfiguration.defaultReadBufferSize * 8
        let most = maxBuffered.withLock { $0 }
        #expect(most <= bound, "buffered \(most) bytes")
        // The handler was slower than the network: the buffer did fill up to the pause point.
        #expect(most >= DataStreamRequest.streamBufferLimit / 2, "buffered only \(most) bytes: no backpressure exercised")
    }

    /// What a client that stops reading can let the server send: the kernel's socket buffers
    /// on both sides (a few MiB on loopback) plus the stream's bound; far below `FloodServer.cap`.
    static let stalledBound = 32 << 20

    @Test("a for-await loop that lags pauses reading: the server is held back, nothing is lost or reordered")
    func sequenceBackpressure() async throws {
        let flood = try FloodServer()
        defer { flood.stop() }
        let request = Session().streamRequest(flood.base)
        var received = 0
        var first = true
        var stalledAt = 0
        var complete: DataStreamRequest.Completion?
        for await stream in request.streamingData() {
            if let chunk = stream.value {
                #expect(chunk.allSatisfy { $0 == 0x61 })
                received += chunk.count
                if first {
                    // The consumer lags: it takes nothing more until the server has stalled.
                    first = false
                    stalledAt = await withCheckedContinuation { done in
                        DispatchQueue.global().async { done.resume(returning: flood.waitForStall()) }
                    }
                }
            }
            if let completion = stream.completion { complete = completion }
        }
        print("sequence: the server stalled after \(stalledAt) bytes")
        #expect(stalledAt < Self.stalledBound, "the server sent \(stalledAt) bytes to a consumer that read one chunk")
        #expect(complete?.error == nil)
        #expect(received == FloodServer.cap, "every byte arrives once the consumer catches up")
    }

    @Test("a handler that lags pauses reading too: the server is held back")
    func handlerBackpressureAgainstServer() async throws {
        let flood = try FloodServer()
        defer { flood.stop() }
        let stalled = Mutex<Int?>(nil)
        let log = EventLog<Data, Never>()
        let total = Mutex(0)
        Session().streamRequest(flood.base).responseStream { stream in
            if let chunk = stream.value {
                total.withLock { $0 += chunk.count }
                if stalled.withLock({ $0 }) == nil { stalled.withLock { $0 = flood.waitForStall() } }
            }
            if stream.completion != nil { log.record(stream) }
        }
        let completion = try #require(await log.wait(), "no completion")
        let stalledAt = try #require(stalled.withLock { $0 })
        print("handler: the server stalled after \(stalledAt) bytes")
        #expect(stalledAt < Self.stalledBound, "the server sent \(stalledAt) bytes to a handler that returned from one chunk")
        #expect(completion.error == nil)
        #expect(total.withLock { $0 } == FloodServer.cap)
    }

    @Test("responseStreamDecodable yields each JSON document as it arrives: one per chunk, no newline, 20 ms apart")
    func documentPerChunk() async throws {
        let seen = DispatchSemaphore(value: 0)
        let waits = Mutex<[Bool]>([])
        let server = try HostileServer { client in
            client.readRequest()
            guard client.send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n") else { return }
            for id in 0..<5 {
                let document = #"{"id":\#(id),"url":"u\#(id)"}"#
                client.send(String(document.utf8.count, radix: 16) + "\r\n" + document + "\r\n")
                client.sleep(0.02)
                // The next document goes only once the client decoded this one (or 10 s passed).
                waits.withLock { $0.append(seen.wait(timeout: .now() + 10) == .success) }
            }
            // A document split across chunks, and two in one chunk.
            client.send("5\r\n{\"id\"\r\n")
            client.send("E\r\n:5,\"url\":\"a\"}\r\n")
            client.send("20\r\n{\"id\":6,\"url\":\"b\"}{\"id\":7,\"url\"\r\n")
            client.send("6\r\n:\"c\"}\n\r\n0\r\n\r\n")
            client.close()
        }
        defer { server.stop() }
        let log = EventLog<StreamLine, TinyFireError>()
        Session().streamRequest(server.base).responseStreamDecodable(of: StreamLine.self) { stream in
            log.record(stream)
            if stream.value != nil { seen.signal() }
        }
        let completion = try #require(await log.wait(), "no completion")
        #expect(completion.error == nil)
        #expect(waits.withLock { $0 } == [true, true, true, true, true], "a document was not decoded before the next was sent")
        #expect(log.values.withLock { $0.map(\.id) } == [0, 1, 2, 3, 4, 5, 6, 7])
        #expect(log.failures.withLock { $0 } == 0)
    }

    @Test("streamTask(): leaving the loop cancels unless automaticallyCancelling is false; streamingResponses and streamingStrings")
    func streamTaskSequences() async throws {
        let server = try httpbin()
        // Leaving the loop early cancels the request.
        let endless = try HostileServer.endlessStream()
        defer { endless.stop() }
        let cancelling = Session().streamRequest(endless.base)
        for await stream in cancelling.streamTask().streamingData() where stream.value != nil { break }
        #expect(await eventually { cancelling.isCancelled })

        // With automaticallyCancelling: false it runs on to its end.
        let kept = Session().streamRequest("\(server.base)/drip?numbytes=4&duration=0.4&delay=0")
        let log = EventLog<Data, Never>()
        kept.responseStream { log.record($0) }
        for await stream in kept.streamTask().streamingData(automaticallyCancelling: false) where stream.value != nil { break }
        let completion = try #require(await log.wait(), "no completion")
        #expect(completion.error == nil)
        #expect(!kept.isCancelled)
        #expect(log.values.withLock { $0.reduce(0) { $0 + $1.count } } == 4)

        // A serializer per chunk, and strings.
        var text = ""
        let task = Session().streamRequest("\(server.base)/stream/3").streamTask()
        for await stream in task.streamingResponses(serializedUsing: .string) {
            if let value = stream.value { text += value }
        }
        #expect(text.split(separator: "\n").count == 3)
        var ids: [Int] = []
        for await stream in Session().streamRequest("\(server.base)/stream/4").streamTask().streamingDecodables(StreamLine.self) {
            if let line = stream.value { ids.append(line.id) }
        }
        #expect(ids == [0, 1, 2, 3])
        var joined = ""
        for await stream in Session().streamRequest("\(server.base)/stream/2").streamTask().streamingStrings() {
            joined += stream.value ?? ""
        }
        #expect(joined.split(separator: "\n").count == 2)
    }

    @Test("bufferingNewest(1) keeps only the latest unread event; the completion always arrives")
    func bufferingPolicy() async throws {
        let server = try httpbin()
        let request = Session().streamRequest("\(server.base)/stream/20")
        let sequence = request.streamingDecodables(StreamLine.self, bufferingPolicy: .bufferingNewest(1))
        // Nothing is read until the request has finished: older events are dropped.
        let log = EventLog<StreamLine, TinyFireError>()
        request.responseStreamDecodable(of: StreamLine.self) { log.record($0) }
        _ = try #require(await log.wait(), "no completion")
        var values: [Int] = []
        var completed = false
        for await stream in sequence {
            if let line = stream.value { values.append(line.id) }
            if stream.completion != nil { completed = true }
        }
        #expect(completed)
        #expect(values.count <= 1, "\(values)")
    }
}

/// A server that sends a body of `cap` bytes as fast as the client takes them, counting what
/// the kernel accepted: where the count stalls below `cap`, the client stopped reading.
final class FloodServer: Sendable {
    static let cap = 96 << 20

    final class Counter: Sendable {
        let value = Atomic<Int>(0)
    }

    let counter = Counter()
    let server: HostileServer
    var base: String { server.base }

    init() throws {
        let counter = self.counter
        server = try HostileServer { client in
            client.readRequest()
            guard client.send("HTTP/1.1 200 OK\r\nContent-Length: \(FloodServer.cap)\r\n\r\n") else { return }
            let block = Data(repeating: 0x61, count: 64 << 10)
            while counter.value.load(ordering: .relaxed) < FloodServer.cap && client.send(block) {
                counter.value.add(block.count, ordering: .relaxed)
            }
            client.close()
        }
    }

    var bytesSent: Int { counter.value.load(ordering: .relaxed) }

    /// Waits until the count has not moved for half a second, or reached the cap.
    func waitForStall() -> Int {
        var last = -1
        _ = waitUntil(within: .seconds(60)) {
            let now = bytesSent
            defer { last = now }
            if now >= FloodServer.cap || now == last { return now > 0 }
            Thread.sleep(forTimeInterval: 0.5)
            return false
        }
        return bytesSent
    }

    func stop() { server.stop() }
}
