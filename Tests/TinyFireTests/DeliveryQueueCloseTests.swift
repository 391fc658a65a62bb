import Foundation
import Synchronization
import Testing

@testable import TinyFireCore

@Suite("the core's delivery queue on a shared loop: close ends its own part, and what waits on it hears so")
struct DeliveryQueueCloseTests {
    /// A server that never answers: a send stays in flight until the queue goes.
    final class SilentSender: QueueSender {
        let sent = Mutex(0)
        func sendQueued(_ request: QueuedSend, completion: @escaping @Sendable (QueueReply) -> Void) {
            sent.withLock { $0 += 1 }
        }
    }

    final class Lines: LogSink {
        func log(_ level: LogLevel, _ message: String) {}
    }

    @Test("a flush waiting on a send ends with .closed when the queue closes; the shared loop runs on")
    func flushEndsAtClose() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-dq-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let loop = try EventLoop(name: "test-shared-q")
        defer { loop.shutdown() }
        let store = try OfflineQueueStore(
            directory: directory,
            limits: .init(maxRecords: 10, maxBytes: 1 << 20, dropOldest: false, segmentBytes: 1 << 20, cursorSyncInterval: .seconds(1)),
            logger: Lines())
        let sender = SilentSender()
        let queue = try DeliveryQueue(
            store: store,
            settings: QueueDeliverySettings(
                backoff: QueueBackoff(initial: .seconds(1), maximum: .seconds(2)), disposition: { _ in .delivered }, judge: nil,
                deadLetterDirectory: nil, maxConcurrentDeliveries: 1, inlineBodyLimit: 4096),
            sender: sender, logger: Lines(), newKey: { "k" }, onEvent: { _ in }, loop: loop)
        _ = try queue.enqueue(QueueSubmission(method: "POST", url: "http://127.0.0.1:9/w", headers: HTTPHeaders(), body: []))
        let result = Mutex<Result<QueueFlushOutcome, OfflineQueueError>?>(nil)
        queue.flush { outcome in result.withLock { $0 = outcome } }
        #expect(await eventually { sender.sent.withLock { $0 } == 1 }, "the flush sent the record")
        #expect(result.withLock { $0 } == nil, "the server never answered")
        queue.close()
        guard case .failure(.closed) = result.withLock({ $0 }) else {
            Issue.record("the flush was not ended by the close: \(String(describing: result.withLock { $0 }))")
            return
        }
        // The loop is someone else's: it runs on.
        let ran = Mutex(false)
        loop.runAndWait { ran.withLock { $0 = true } }
        #expect(ran.withLock { $0 })
        // A flush asked after the close is refused at once.
        let late = Mutex<Result<QueueFlushOutcome, OfflineQueueError>?>(nil)
        queue.flush { outcome in late.withLock { $0 = outcome } }
        guard case .failure(.closed) = late.withLock({ $0 }) else {
            Issue.record("a flush after close: \(String(describing: late.withLock { $0 }))")
            return
        }
    }
}
