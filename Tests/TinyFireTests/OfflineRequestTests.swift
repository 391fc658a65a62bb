import Foundation
import Synchronization
import Testing

@testable import TinyFire

/// A closed loopback port: connecting to it is refused at once.
private func closedPort() -> Int { freePort() }

/// Sends every attempt to a closed port on loopback, so the created request (aimed at nginx)
/// fails the way an unreachable server does; what gets queued is the created request.
private func failingAttempts() -> Adapter {
    let port = closedPort()
    return Adapter { request, _, completion in
        var attempt = request
        var components = URLComponents(url: request.url!, resolvingAgainstBaseURL: false)!
        components.host = "127.0.0.1"
        components.port = port
        attempt.url = components.url
        completion(.success(attempt))
    }
}

/// The default predicate, widened to refused connections (the stand-in for "no network" when
/// the failure is made on loopback).
private let offlineOrRefused: @Sendable (any Error) -> Bool = { error in
    OfflineRetrier.defaultIsOfflineError(error) || (error as? TinyFireError)?.transferError?.kind == .connectFailed
}

/// A stream body of one byte.
private final class OneByteStream: UploadByteStream, @unchecked Sendable {
    private var sent = false
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard !sent else { return 0 }
        sent = true
        buffer[0] = 0x78
        return 1
    }
}

/// Waits for a response on a background queue, up to `timeout`.
private func response(of request: DataRequest, within timeout: TimeInterval = 15) throws -> DataResponse<Data?, TinyFireError> {
    let done = DispatchSemaphore(value: 0)
    let box = Mutex<DataResponse<Data?, TinyFireError>?>(nil)
    request.response(queue: .global()) { response in
        box.withLock { $0 = response }
        done.signal()
    }
    guard done.wait(timeout: .now() + timeout) == .success, let response = box.withLock({ $0 }) else {
        throw FixtureError(description: "no response within \(timeout) s")
    }
    return response
}

@Suite("Offline errors, OfflineRetrier and OfflineQueueDeferrer", .serialized)
struct OfflineRequestTests {
    @Test("which transfer failures mean the network is missing")
    func offlineClassification() {
        func failure(_ reason: TransferError.Reason, _ codes: [Int32] = []) -> TransferError {
            TransferError(
                method: "GET", url: "http://h/", host: "h", phase: .connecting, reason: reason, bytesSent: 0, bytesReceived: 0,
                systemCodes: codes)
        }
        #expect(failure(.nameResolutionFailed(message: "x"), [EAI_AGAIN]).isNetworkUnavailable)
        #expect(!failure(.nameResolutionFailed(message: "x"), [EAI_NONAME]).isNetworkUnavailable)
        #expect(failure(.connectFailed(attempts: ["a", "b"]), [ENETUNREACH, EHOSTUNREACH]).isNetworkUnavailable)
        #expect(!failure(.connectFailed(attempts: ["a", "b"]), [ENETUNREACH, ECONNREFUSED]).isNetworkUnavailable)
        #expect(!failure(.connectFailed(attempts: []), []).isNetworkUnavailable)
        #expect(failure(.timedOut(.connect, limit: .seconds(1))).isNetworkUnavailable)
        #expect(!failure(.timedOut(.idle, limit: .seconds(1))).isNetworkUnavailable)
        #expect(failure(.connectionError(code: ENETDOWN, message: "down")).isNetworkUnavailable)
        #expect(!failure(.connectionError(code: ECONNRESET, message: "reset")).isNetworkUnavailable)
    }

    @Test("a refused connection is a real failure: the default retrier does not wait for it")
    func refusedIsNotOffline() throws {
        let ns = try NetworkNamespace()
        let monitor = try NetworkReachabilityManager(host: nil, networkNamespace: ns.path)
        let retrier = OfflineRetrier(monitor: monitor, maximumWait: .seconds(10))
        let started = ContinuousClock.now
        let result = try response(of: AF.request("http://127.0.0.1:\(closedPort())/", interceptor: retrier))
        #expect(result.error?.transferError?.kind == .connectFailed)
        #expect(result.error?.transferError?.isNetworkUnavailable == false)
        #expect(ContinuousClock.now - started < .seconds(2), "waited for the network on a refused connection")
        #expect(retrier.waitingCount == 0)
    }

    @Test("OfflineRetrier waits while the network is down, retries when a default route appears, then gives up after maximumWait")
    func retrierWaitsForNetwork() throws {
        let ns = try NetworkNamespace()
        let monitor = try NetworkReachabilityManager(host: nil, networkNamespace: ns.path)
        let retrier = OfflineRetrier(monitor: monitor, maximumWait: .seconds(3), isOfflineError: offlineOrRefused)
        let request = AF.request("http://127.0.0.1:\(closedPort())/", interceptor: retrier)
        let done = DispatchSemaphore(value: 0)
        request.response(queue: .global()) { _ in done.signal() }

        // The first attempt fails and reaches the retrier (seconds under an emulator), then
        // nothing may happen while the network stays down.
        let failed = ContinuousClock.now
        while retrier.waitingCount == 0 && ContinuousClock.now - failed < .seconds(5) { Thread.sleep(forTimeInterval: 0.01) }
        Thread.sleep(forTimeInterval: 0.5)
        #expect(request.performedRequests.count == 1, "retried while the network was down")
        #expect(retrier.waitingCount == 1)
        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        let routeAdded = ContinuousClock.now
        // Only the route can bring the second attempt: giving up after maximumWait ends the
        // request with one attempt. (How fast it follows is a figure, not a pass mark.)
        while request.performedRequests.count < 2 && done.wait(timeout: .now() + 0.01) == .timedOut {}
        #expect(request.performedRequests.count == 2, "the retry did not follow the route (\(ContinuousClock.now - routeAdded))")

        // The retry failed while the network is up: no loop; it waits for a change, and none comes.
        let secondWait = ContinuousClock.now
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(ContinuousClock.now - secondWait >= .milliseconds(2500), "gave up before maximumWait")
        #expect(request.performedRequests.count == 2, "retried without a change in the network")
        #expect(request.error?.transferError?.kind == .connectFailed, "not the original error: \(String(describing: request.error))")
        #expect(retrier.waitingCount == 0)
    }

    @Test(
        "OfflineRetrier: reachable when the first failure comes means one retry at once; down for longer than maximumWait means the error")
    func retrierImmediateAndTimeout() throws {
        let ns = try NetworkNamespace()
        let monitor = try NetworkReachabilityManager(host: nil, networkNamespace: ns.path)
        let retrier = OfflineRetrier(monitor: monitor, maximumWait: .milliseconds(500), isOfflineError: offlineOrRefused)

        let started = ContinuousClock.now
        let down = try response(of: AF.request("http://127.0.0.1:\(closedPort())/", interceptor: retrier))
        let waited = ContinuousClock.now - started
        #expect(down.error?.transferError?.kind == .connectFailed)
        #expect(waited >= .milliseconds(450), "waited \(waited), less than maximumWait")

        try ns.inside(["route", "add", "default", "via", ns.hostAddress])
        let request = AF.request("http://127.0.0.1:\(closedPort())/", interceptor: retrier)
        let up = try response(of: request)
        #expect(up.error?.transferError?.kind == .connectFailed)
        #expect(request.performedRequests.count == 2, "expected one immediate retry while reachable")
    }

    @Test("OfflineQueueDeferrer: a body, a file and a multipart form are queued with the request's key and delivered to nginx")
    func deferrerQueuesAndDelivers() throws {
        let nginx = try NginxFixture.shared.get()
        let directory = try makeTemporaryDirectory("deferrer")
        let queue = try OfflineQueue(directory: directory)
        defer { queue.close() }
        let session = Session(interceptor: failingAttempts())
        let deferrer = OfflineQueueDeferrer(queue: queue, isDeferrableError: offlineOrRefused)
        let token = "defer-\(UUID().uuidString.prefix(8))"

        // In-memory body.
        let small = session.request("\(nginx.base)/ingest/\(token)/small", method: .post, interceptor: deferrer) {
            $0.httpBody = Data("temperature=21.5".utf8)
        }
        let smallResult = try response(of: small)
        let smallDeferral = try #require(smallResult.error?.offlineQueueDeferral, "not deferred: \(String(describing: smallResult.error))")
        #expect(smallDeferral.record.idempotencyKey == small.id.uuidString.lowercased())
        #expect(small.request?.headers.value(for: "Idempotency-Key") == "\"\(small.id.uuidString.lowercased())\"")
        #expect(smallDeferral.record.url == "\(nginx.base)/ingest/\(token)/small", "queued the adapted request instead of the created one")
        #expect(smallDeferral.record.bodyLength == 16)
        #expect("\(smallResult.error!)".contains("deferred to the offline queue"))

        // A file larger than the inline limit: copied into the queue, the original may go.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("deferred-\(token).bin")
        try Data(repeating: 0x5A, count: 100_000).write(to: file)
        let upload = session.upload(file, to: "\(nginx.base)/ingest/\(token)/file", interceptor: deferrer)
        let uploadDeferral = try #require(try response(of: upload).error?.offlineQueueDeferral)
        #expect(uploadDeferral.record.bodyIsFile && uploadDeferral.record.bodyLength == 100_000)
        try FileManager.default.removeItem(at: file)

        // A multipart form: its encoding and boundary.
        let form = MultipartFormData()
        form.append(Data("42".utf8), withName: "device")
        form.append(Data(repeating: 0x41, count: 5000), withName: "log", fileName: "log.txt", mimeType: "text/plain")
        let formLength = try form.encode().count
        let multipart = session.upload(multipartFormData: form, to: "\(nginx.base)/ingest/\(token)/form", interceptor: deferrer)
        let formDeferral = try #require(try response(of: multipart).error?.offlineQueueDeferral)
        #expect(formDeferral.record.bodyLength == UInt64(formLength))
        #expect(formDeferral.record.headers.value(for: "Content-Type") == form.contentType)

        #expect(queue.statistics.records == 3)
        let flushed = try flushSynchronously(queue)
        #expect(flushed.delivered == 3 && flushed.remaining == 0)
        let lines = nginx.ingestLines(containing: token, expecting: 3)
        #expect(lines.count == 3)
        #expect(lines.contains { $0.contains("/small 204 16 \"\(small.id.uuidString.lowercased())\"") }, "\(lines)")
        #expect(lines.contains { $0.contains("/file 204 100000 \"\(upload.id.uuidString.lowercased())\"") }, "\(lines)")
        #expect(lines.contains { $0.contains("/form 204 \(formLength) \"\(multipart.id.uuidString.lowercased())\"") }, "\(lines)")
    }

    @Test("OfflineQueueDeferrer: a caller's key is kept; streams, other errors and a full queue are not deferred")
    func deferrerLimits() throws {
        let nginx = try NginxFixture.shared.get()
        let directory = try makeTemporaryDirectory("deferrer-limits")
        let queue = try OfflineQueue(directory: directory, configuration: .init(maxRecords: 1))
        defer { queue.close() }
        let session = Session(interceptor: failingAttempts())
        let deferrer = OfflineQueueDeferrer(queue: queue, isDeferrableError: offlineOrRefused)

        let keyed = session.request(
            "\(nginx.base)/ingest/keyed", method: .post, headers: ["Idempotency-Key": "\"caller-key\""],
            interceptor: .deferToOfflineQueue(queue, isDeferrableError: offlineOrRefused))
        #expect(try response(of: keyed).error?.offlineQueueDeferral?.record.idempotencyKey == "caller-key")

        // The queue holds one record: the next deferral is refused, and the caller is told so.
        let refused = try response(of: session.request("\(nginx.base)/ingest/refused", method: .post, interceptor: deferrer))
        guard case .requestRetryFailed(let retryError, let original)? = refused.error else {
            Issue.record("expected requestRetryFailed, got \(String(describing: refused.error))")
            return
        }
        #expect(retryError is OfflineQueueError)
        #expect("\(retryError)".contains("full"))
        #expect((original as? TinyFireError)?.transferError?.kind == .connectFailed)

        // A stream is read once: nothing to keep, the original error stands.
        let stream = OneByteStream()
        let streamed = try response(of: session.upload(stream, to: "\(nginx.base)/ingest/stream", interceptor: deferrer))
        #expect(streamed.error?.transferError?.kind == .connectFailed)

        // An answer from the server is not a missing network.
        let answered = try response(of: AF.request("\(nginx.base)/missing-\(UUID().uuidString)", interceptor: deferrer).validate())
        #expect(answered.error?.responseCode == 404)
        #expect(queue.statistics.records == 1)
    }
}

/// The network-namespace half: real offline failures (no route, DNS without a network) made by
/// fire-agent inside a namespace, against an nginx listening on the namespace's host side.
@Suite("fire-agent request --defer-to / --wait-for-network in a namespace", .serialized)
struct OfflineRequestCommandTests {
    /// `ip netns exec NS fire-agent ARGS`.
    private func fireAgentInside(_ ns: NetworkNamespace, _ arguments: [String]) throws -> CLIResult {
        guard let ip = which("ip") else { throw FixtureError(description: "ip(8) not found") }
        return try runCapturingOutput(ip, ["netns", "exec", ns.name, try fireAgentPath()] + arguments)
    }

    @Test("no route: --defer-to queues (exit 75), a DNS name without a network too; flushed later, each key once")
    func deferTo() throws {
        let ns = try NetworkNamespace()
        let nginx = try NginxFixture.dedicated(listeningOn: ns.hostAddress)
        defer { nginx.stop() }
        let directory = try makeTemporaryDirectory("defer-cli")
        let token = "defercli-\(UUID().uuidString.prefix(8))"
        try ns.inside(["link", "set", ns.innerInterface, "down"])

        let plain = try fireAgentInside(ns, ["request", "-d", "x=1", "\(nginx.base)/ingest/\(token)/plain"])
        #expect(plain.status == 7, "without --defer-to: \(plain.stderr)")
        #expect(plain.stderr.contains("Network is unreachable"), "\(plain.stderr)")

        let deferred = try fireAgentInside(
            ns, ["request", "-d", "x=2", "--defer-to", directory, "\(nginx.base)/ingest/\(token)/deferred"])
        #expect(deferred.status == 75, "\(deferred.stderr)")
        #expect(deferred.stderr.contains("deferred to the offline queue in \(directory) as record 1"), "\(deferred.stderr)")

        let named = try fireAgentInside(
            ns, ["request", "-d", "x=3", "--defer-to", directory, "http://tinyfire-offline.test:\(nginx.port)/ingest/x"])
        #expect(named.status == 75, "a name that cannot be looked up without a network: \(named.stderr)")
        #expect(named.stderr.contains("Temporary failure in name resolution"), "\(named.stderr)")

        let list = try fireAgent(["queue", "list", "--dir", directory])
        let records = String(decoding: list.stdout, as: UTF8.self).split(separator: "\n")
        #expect(records.count == 2)
        #expect(records.first?.contains("POST \(nginx.base)/ingest/\(token)/deferred 3 ") == true, "\(records)")

        // Back online (the host side reaches the dedicated nginx directly): the first record goes.
        try ns.inside(["link", "set", ns.innerInterface, "up"])
        let flush = try fireAgent(["queue", "flush", "--dir", directory, "--timeout", "5"])
        #expect(String(decoding: flush.stdout, as: UTF8.self).hasPrefix("delivered 1 "), "\(flush.stderr)")
        let lines = nginx.ingestLines(containing: token, expecting: 1)
        #expect(lines.count == 1 && lines[0].contains("/deferred 204 3 \""), "\(lines)")
    }

    @Test("--wait-for-network: the request waits for the link and completes when it returns")
    func waitForNetwork() throws {
        let ns = try NetworkNamespace()
        let nginx = try NginxFixture.dedicated(listeningOn: ns.hostAddress)
        defer { nginx.stop() }
        let token = "waitcli-\(UUID().uuidString.prefix(8))"
        try ns.inside(["link", "set", ns.innerInterface, "down"])

        let arguments = ["request", "--wait-for-network", "10", "-d", "v=1", "\(nginx.base)/ingest/\(token)"]
        let finished = DispatchSemaphore(value: 0)
        let result = Mutex<CLIResult?>(nil)
        Thread.detachNewThread {
            let outcome = try? fireAgentInside(ns, arguments)
            result.withLock { $0 = outcome }
            finished.signal()
        }
        Thread.sleep(forTimeInterval: 1)
        #expect(result.withLock { $0 } == nil, "gave up while waiting")
        try ns.inside(["link", "set", ns.innerInterface, "up"])
        let linkUp = ContinuousClock.now
        #expect(finished.wait(timeout: .now() + 60) == .success)
        let done = result.withLock { $0 }
        #expect(done?.status == 0, "\(done?.stderr ?? "no result")")
        // Exit 0 proves the link brought it: giving up after --wait-for-network fails (exit 7).
        print("--wait-for-network completed \(ContinuousClock.now - linkUp) after the link came back")
        #expect(nginx.ingestLines(containing: token, expecting: 1).count == 1)
    }
}
