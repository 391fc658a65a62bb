import Dispatch
import Foundation
import HTTPTypes
import Synchronization
import Testing

@testable import TinyFire

/// Alamofire code from its documentation, spelled as there: each test is a case that did not
/// compile or behaved differently before.
@Suite("Alamofire parity: spellings and behaviours", .serialized)
struct AlamofireParityTests {
    @Test("HTTPHeaders is a Collection of HTTPHeader: count, indices, subscripts, sorted()")
    func headersCollection() {
        var headers: HTTPHeaders = [
            .authorization(username: "Username", password: "Password"),
            .accept("application/json"),
        ]
        headers.add(name: "X-Trace", value: "1")
        #expect(headers.count == 3)
        #expect(headers.indices == 0..<3)
        #expect(headers[0].name == "Authorization")
        #expect(headers.first?.value == "application/json" || headers[1].value == "application/json")
        #expect(headers.map(\.name) == ["Authorization", "Accept", "X-Trace"])
        #expect(headers.sorted().map(\.name) == ["Accept", "Authorization", "X-Trace"])
        var names: [String] = []
        for header in headers { names.append("\(header.name): \(header.value)") }
        #expect(names.last == "X-Trace: 1")
        #expect(Set([headers, headers]).count == 1)
        let empty = HTTPHeaders()
        #expect(empty.isEmpty && empty.startIndex == empty.endIndex)
    }

    @Test("HTTPHeaders.add replaces a field of the same name in place, any case, as Alamofire's does; append repeats one")
    func headersAddUpdatesInPlace() {
        var headers: HTTPHeaders = [.accept("application/json"), .contentType("text/plain")]
        headers.add(name: "ACCEPT", value: "text/html")
        #expect(headers.map { "\($0.name): \($0.value)" } == ["ACCEPT: text/html", "Content-Type: text/plain"])
        headers.add(.accept("*/*"))
        #expect(headers.map { "\($0.name): \($0.value)" } == ["Accept: */*", "Content-Type: text/plain"])
        headers.add(name: "X-New", value: "1")
        #expect(headers.count == 3 && headers["x-new"] == "1")
        // A field sent twice is TinyFire's own `append` (Alamofire's headers never repeat a name).
        headers.append(name: "X-New", value: "2")
        #expect(headers.count == 4 && headers.map(\.value).suffix(2) == ["1", "2"])
        let literal: HTTPHeaders = [HTTPHeader(name: "Accept", value: "a"), HTTPHeader(name: "accept", value: "b")]
        #expect(literal.map { "\($0.name): \($0.value)" } == ["accept: b"])
    }

    @Test("ClosureEventMonitor(): closures set as properties, before or after the session has it, run on the monitor's queue")
    func closureMonitorProperties() async throws {
        let server = try nginx()
        let queue = DispatchQueue(label: "parity.monitor")
        let key = DispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 7)
        let events = Recorder<String>()
        let onQueue = Recorder<Bool>()
        let monitor = ClosureEventMonitor(queue: queue)
        monitor.requestDidResume = { _ in
            events.append("resume")
            onQueue.append(DispatchQueue.getSpecific(key: key) == 7)
        }
        monitor.requestDidCreateInitialURLRequest = { _, _ in events.append("initial") }
        let session = Session(eventMonitors: [monitor])
        // Set after the session has the monitor: still used.
        monitor.requestDidFinish = { _ in
            events.append("finish")
            onQueue.append(DispatchQueue.getSpecific(key: key) == 7)
        }
        monitor.requestDidParseResponse = { _, _ in events.append("parsed") }
        _ = await session.request("\(server.base)/hello.txt").serializingResponse().response
        #expect(await eventually { events.all.contains("parsed") })
        #expect(events.all == ["resume", "initial", "finish", "parsed"])
        #expect(onQueue.all == [true, true])

        // Suspend, cancel, retry and adapt events.
        struct Adapter: RequestAdapter {
            func adapt(
                _ urlRequest: URLRequest, for session: Session, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
            ) {
                var adapted = urlRequest
                adapted.headers.add(name: "X-Adapted", value: "1")
                completion(.success(adapted))
            }
        }
        let more = Recorder<String>()
        let second = ClosureEventMonitor()
        second.requestDidSuspend = { _ in more.append("suspend") }
        second.requestDidCancel = { _ in more.append("cancel") }
        second.requestDidAdaptInitialRequestToAdaptedRequest = { _, initial, adapted in
            more.append("adapted \(initial.headers["X-Adapted"] == nil) \(adapted.headers["X-Adapted"] == "1")")
        }
        second.requestIsRetrying = { _ in more.append("retrying") }
        let manual = Session(startRequestsImmediately: false, interceptor: Interceptor(adapters: [Adapter()]), eventMonitors: [second])
        let held = manual.request("\(server.base)/hello.txt")
        held.suspend()
        held.cancel()
        _ = await held.serializingResponse().response
        let retried = Session(interceptor: RetryPolicy(retryLimit: 1, exponentialBackoffScale: 0.01), eventMonitors: [second])
            .request("\(server.base)/ingest-unavailable/x").validate()
        _ = await retried.serializingResponse().response
        let adapted = Session(interceptor: Interceptor(adapters: [Adapter()]), eventMonitors: [second]).request("\(server.base)/hello.txt")
        _ = await adapted.serializingResponse().response
        #expect(await eventually { more.all.contains("adapted true true") && more.all.contains("retrying") })
        #expect(more.all.contains("suspend") && more.all.contains("cancel") && more.all.contains("retrying"), "\(more.all)")
    }

    @Test("onHTTPResponse with a disposition: .allow later lets the body flow, .cancel cancels before any body, only the last is called")
    func responseDisposition() async throws {
        let server = try nginx()
        let calls = Recorder<String>()
        let request = Session().request("\(server.base)/1m.bin")
        request.onHTTPResponse { _ in calls.append("first") }
        request.onHTTPResponse(on: .global()) { response, completionHandler in
            calls.append("second \(response.status.code)")
            // Answers later, from another queue: the body waits.
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { completionHandler(.allow) }
        }
        let allowed = await request.serializingData().response
        #expect(allowed.error == nil)
        #expect(allowed.data == server.oneMiB)
        #expect(calls.all == ["second 200"])

        let cancelled = Session().request("\(server.base)/1m.bin").onHTTPResponse { _, completionHandler in completionHandler(.cancel) }
        let refused = await cancelled.serializingData().response
        #expect(refused.error?.isExplicitlyCancelledError == true)

        // Small responses arrive whole with their head: the outcome still waits for the answer.
        let session = Session()
        for round in 0..<40 {
            let small = session.request("\(server.base)/hello.txt").onHTTPResponse { _, completionHandler in
                completionHandler(round % 2 == 0 ? .cancel : .allow)
            }
            let outcome = await small.serializingString().response
            if round % 2 == 0 {
                #expect(outcome.error?.isExplicitlyCancelledError == true, "round \(round)")
            } else {
                #expect(outcome.value == "hello\n", "round \(round): \(String(describing: outcome.error))")
            }
        }

        // A stream gets no chunk of a cancelled response, and every chunk of an allowed one.
        let log = EventLog<Data, Never>()
        let stream = Session().streamRequest("\(server.base)/1m.bin")
        stream.onHTTPResponse { _, completionHandler in completionHandler(.cancel) }
        stream.responseStream { log.record($0) }
        let end = try #require(await log.wait(), "no completion")
        #expect(end.error?.isExplicitlyCancelledError == true)
        #expect(log.values.withLock { $0.isEmpty }, "a chunk reached the handler before the disposition")

        let allowedLog = EventLog<Data, Never>()
        let allowedStream = Session().streamRequest("\(server.base)/1m.bin")
        allowedStream.onHTTPResponse { (_: HTTPURLResponse) async -> Request.ResponseDisposition in
            try? await Task.sleep(for: .milliseconds(100))
            return .allow
        }
        allowedStream.responseStream { allowedLog.record($0) }
        let allowedEnd = try #require(await allowedLog.wait(), "no completion")
        #expect(allowedEnd.error == nil)
        #expect(allowedLog.values.withLock { $0.reduce(Data(), +) } == server.oneMiB)
    }

    @Test("ConnectionLostRetryPolicy retries a connection lost in the middle of the body: FIN or RST, Content-Length or chunked")
    func connectionLostMidBody() async throws {
        for cut in ["fin-length", "fin-chunked", "rst-length"] {
            let server = try HostileServer { client in
                client.readRequest()
                if client.index == 0 {
                    if cut.hasSuffix("chunked") {
                        client.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + String(repeating: "x", count: 300))
                    } else {
                        client.send("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + String(repeating: "x", count: 300))
                    }
                    client.sleep(0.05)
                    if cut.hasPrefix("rst") { client.reset() } else { client.close() }
                } else {
                    client.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                }
            }
            defer { server.stop() }
            let request = Session().request(server.base, interceptor: .connectionLostRetryPolicy)
            let response = await request.serializingString().response
            #expect(response.value == "ok", "\(cut): \(String(describing: response.error))")
            #expect(request.retryCount == 1, "\(cut)")
            // POST is not retried by default, as in Alamofire.
            let post = Session().request(server.base, method: .post, interceptor: .connectionLostRetryPolicy)
            _ = await post.serializingString().response
            #expect(post.retryCount == 0)
        }
    }

    @Test("Request.requests holds each attempt's created and adapted URLRequest; performedRequests what was sent")
    func requestsInitialAndAdapted() async throws {
        let server = try httpbin()
        let adapter = Adapter { request, _, completion in
            var adapted = request
            adapted.headers.add(name: "X-Adapted", value: "yes")
            completion(.success(adapted))
        }
        let request = Session().request("\(server.base)/get", interceptor: adapter)
        let echo = try await request.serializingDecodable(Echo.self).value
        #expect(echo.headers["X-Adapted"] == "yes")
        #expect(request.requests.count == 2)
        #expect(request.firstRequest?.headers["X-Adapted"] == nil)
        #expect(request.request?.headers["X-Adapted"] == "yes")
        #expect(request.performedRequests.map { $0.headers["X-Adapted"] } == ["yes"])
        // Without an adapter: the one created.
        let plain = Session().request("\(server.base)/get")
        _ = await plain.serializingData().response
        #expect(plain.requests.count == 1 && plain.performedRequests.count == 1)
    }

    @Test("download(_:method:parameters:encoder:headers:interceptor:requestModifier:to:) and the async download family")
    func downloadsAsync() async throws {
        let server = try httpbin()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-parity-dl-\(getpid())")
        try? FileManager.default.removeItem(at: directory)
        let destination: DownloadRequest.Destination = { _, response in
            (
                directory.appendingPathComponent(DownloadRequest.suggestedFilename(for: response, url: nil)),
                [.createIntermediateDirectories, .removePreviousFile]
            )
        }
        let parameters = ["foo": "bar"]
        let query = TF.download("\(server.base)/get", parameters: parameters, to: destination)
        let echo = try await query.serializingDecodable(Echo.self).value
        #expect(echo.args == ["foo": "bar"])
        let posted = TF.download(
            "\(server.base)/post", method: .post, parameters: parameters, encoder: JSONParameterEncoder.default,
            headers: [.accept("application/json")], requestModifier: { $0.timeoutInterval = 10 }, to: destination)
        let text = try await posted.serializingString().value
        #expect(text.contains("\"foo\": \"bar\""))
        #expect(posted.request?.timeoutInterval == 10)
        let data = try await TF.download("\(server.base)/bytes/1000").serializingData().value
        #expect(data.count == 1000)
        let fileURL = try await TF.download("\(server.base)/bytes/10", to: destination).serializingDownloadedFileURL().value
        #expect(FileManager.default.fileExists(atPath: fileURL.path))
        let response = await TF.download("\(server.base)/status/404").validate().serializingData().response
        #expect(response.error?.responseCode == 404)
        let result = await TF.download("\(server.base)/bytes/5").serializingData().result
        #expect((try? result.get())?.count == 5)

        // Cancelling: the DownloadTask, or the awaiting Swift task (automaticallyCancelling by default).
        let silent = try HostileServer.neverAnswering()
        defer { silent.stop() }
        let task = TF.download(silent.base).serializingData()
        task.cancel()
        #expect(await task.result.failure?.isExplicitlyCancelledError == true)
        let awaiting = Task { await TF.download(silent.base).serializingData().response }
        awaiting.cancel()
        #expect(await awaiting.value.error?.isExplicitlyCancelledError == true)
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
