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

    func wait() async -> DataStreamRequest.Completion? {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                _ = self.done.wait(timeout: .now() + 30)
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
        let request = Session().streamRequest("\(server.base)/stream/5")
        let lines = EventLog<StreamLine, TinyFireError>()
        let chunks = EventLog<Data, Never>()
        let strings = EventLog<String, Never>()
        request.responseStreamDecodable(of: StreamLine.self) { lines.record($0) }
        request.responseStream { chunks.record($0) }
        request.responseStreamString { strings.record($0) }
        let completion = await lines.wait()
        _ = await chunks.wait()
        _ = await strings.wait()
        #expect(completion?.error == nil)
        #expect(completion?.response?.status.code == 200)
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
        let completion = await log.wait()
        #expect(completion?.error == nil)
        let values = log.values.withLock { $0 }
        #expect(values.reduce(0) { $0 + $1.count } == 5)
        #expect(values.count >= 3, "\(values.count) chunks: the body was not streamed")
    }

    @Test("the four ways to cancel: request.cancel(), stream.cancel(), a kept token, a throwing handler with auto-cancel")
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

        struct Stop: Error {}
        let fourth = EventLog<Data, Never>()
        Session().streamRequest(slow, automaticallyCancelOnStreamError: true).responseStream { stream in
            fourth.record(stream)
            if stream.value != nil { throw Stop() }
        }
        #expect(await fourth.wait()?.error?.isExplicitlyCancelledError == true)

        // Without the flag a throwing handler does not stop the stream.
        let fifth = EventLog<Data, Never>()
        Session().streamRequest("\(server.base)/drip?numbytes=3&duration=0.3&delay=0").responseStream { stream in
            fifth.record(stream)
            if stream.value != nil { throw Stop() }
        }
        #expect(await fifth.wait()?.error == nil)
        #expect(fifth.values.withLock { $0.reduce(0) { $0 + $1.count } } == 3)
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
        #expect(await eventually { received.withLock { $0 } > 0 })
        task.cancel()
        await task.value
        #expect(await eventually { request.isCancelled })
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
        let completion = await log.wait()
        #expect(completion?.error == nil)
        #expect(log.values.withLock { $0.reduce(Data(), +) } == body)
        let bound = DataStreamRequest.streamBufferLimit + SessionConfiguration.defaultReadBufferSize * 8
        let most = maxBuffered.withLock { $0 }
        #expect(most <= bound, "buffered \(most) bytes")
        // The handler was slower than the network: the buffer did fill up to the pause point.
        #expect(most >= DataStreamRequest.streamBufferLimit / 2, "buffered only \(most) bytes: no backpressure exercised")
    }
}
