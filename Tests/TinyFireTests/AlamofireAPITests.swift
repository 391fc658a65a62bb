import Dispatch
import Foundation
import HTTPTypes
import Logging
import Synchronization
import Testing

@testable import TinyFire

/// Awaits a closure-based response handler.
func awaitHandler<T: Sendable>(_ register: (@escaping @Sendable (T) -> Void) -> Void) async -> T {
    await withCheckedContinuation { continuation in register { continuation.resume(returning: $0) } }
}

/// httpbin's echo of a request.
struct Echo: Decodable, Sendable {
    let url: String
    let args: [String: String]?
    let headers: [String: String]
    let form: [String: FormValue]?
    let json: [String: String]?
    let data: String?
    let method: String?
}

/// httpbin's form values: one string, or a list for repeated keys.
enum FormValue: Decodable, Sendable, Equatable {
    case one(String)
    case list([String])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let list = try? container.decode([String].self) { self = .list(list) } else { self = .one(try container.decode(String.self)) }
    }
}

private struct Login: Encodable, Sendable {
    let email: String
    let password: String
}

/// A thread-safe list for collecting events.
final class Recorder<T: Sendable>: Sendable {
    private let items = Mutex<[T]>([])
    func append(_ item: T) { items.withLock { $0.append(item) } }
    var all: [T] { items.withLock { $0 } }
}

@Suite("Alamofire API: requests, encoders, headers", .serialized)
struct RequestAPITests {
    @Test("GET parameters go to the query, POST parameters to a JSON or form body")
    func parameters() async throws {
        let server = try httpbin()
        let get = try await Session().request("\(server.base)/get", parameters: ["foo": "bar", "a b": "c&d"])
            .serializingDecodable(Echo.self).value
        #expect(get.args == ["foo": "bar", "a b": "c&d"])
        #expect(get.url == "\(server.base)/get?a%20b=c%26d&foo=bar")

        let login = Login(email: "test@test.test", password: "testPassword")
        let json = try await Session().request(
            "\(server.base)/post", method: .post, parameters: login, encoder: JSONParameterEncoder.default
        ).serializingDecodable(Echo.self).value
        #expect(json.json == ["email": "test@test.test", "password": "testPassword"])
        #expect(json.headers["Content-Type"] == "application/json")

        let form = try await Session().request("\(server.base)/post", method: .post, parameters: ["qux": ["x", "y"]])
            .serializingDecodable(Echo.self).value
        #expect(form.headers["Content-Type"] == "application/x-www-form-urlencoded; charset=utf-8")
        #expect(form.data == "" && form.form?["qux[]"] == .list(["x", "y"]))
    }

    @Test("header helpers and session defaults reach the server")
    func headers() async throws {
        let server = try httpbin()
        let headers: HTTPHeaders = [.authorization(username: "Username", password: "Password"), .accept("application/json")]
        let echo = try await Session().request("\(server.base)/headers", headers: headers).serializingDecodable(HeadersEcho.self).value
        #expect(echo.headers["Authorization"] == "Basic VXNlcm5hbWU6UGFzc3dvcmQ=")
        #expect(echo.headers["Accept"] == "application/json")
        #expect(echo.headers["Accept-Encoding"] == "gzip;q=1.0, deflate;q=0.9")
        let agent = try #require(echo.headers["User-Agent"])
        #expect(agent.hasSuffix(" TinyFire/\(HTTPHeaders.tinyFireVersion) (Linux; x86_64)") || agent.contains("(Linux; aarch64)"))
        #expect(agent.contains("/"))
        #expect(echo.headers["Accept-Language"]?.contains(";q=1.0") == true)

        let bearer = try await Session().request("\(server.base)/bearer", headers: [.authorization(bearerToken: "t0k3n")])
            .validate().serializingDecodable(BearerEcho.self).value
        #expect(bearer.token == "t0k3n" && bearer.authenticated)
    }

    @Test("Accept-Language comes from the locale variables")
    func acceptLanguage() {
        #expect(HTTPHeader.preferredLanguages(environment: ["LANG": "de_DE.UTF-8"]) == ["de-DE"])
        #expect(HTTPHeader.preferredLanguages(environment: ["LANGUAGE": "fr_CA:fr:en", "LANG": "C"]) == ["fr-CA", "fr", "en"])
        #expect(HTTPHeader.preferredLanguages(environment: ["LANG": "C.UTF-8"]) == ["en"])
        #expect(["fr-CA", "fr", "en"].qualityEncoded() == "fr-CA;q=1.0, fr;q=0.9, en;q=0.8")
    }

    @Test("routers: URLRequestConvertible, and a request modifier that sets a timeout")
    func routersAndModifiers() async throws {
        let server = try httpbin()
        struct Router: URLRequestConvertible {
            let base: String
            func asURLRequest() throws -> URLRequest {
                var request = try URLRequest(url: "\(base)/anything/users", method: .put)
                request.setValue("router", forHTTPHeaderField: "X-Source")
                return try JSONParameterEncoder.sortedKeys.encode(["name": "n"], into: request)
            }
        }
        let echo = try await Session().request(Router(base: server.base)).serializingDecodable(Echo.self).value
        #expect(echo.method == "PUT" && echo.headers["X-Source"] == "router" && echo.data == #"{"name":"n"}"#)

        let slow = await Session().request("\(server.base)/delay/3") { $0.timeoutInterval = 0.5 }.serializingData().response
        #expect(slow.error?.isTimeout == true)
        if case .timedOut(.total, _) = slow.error?.transferError?.reason {
        } else {
            Issue.record("expected a total timeout, got \(String(describing: slow.error))")
        }
    }

    @Test("bad requests fail before the network with the matching error")
    func earlyFailures() async throws {
        let server = try httpbin()
        struct Broken: URLRequestConvertible {
            struct Oops: Error {}
            func asURLRequest() throws -> URLRequest { throw Oops() }
        }
        let broken = await Session().request(Broken()).serializingResponse().response
        guard case .createURLRequestFailed(let error) = broken.error, error is Broken.Oops else {
            Issue.record("unexpected \(String(describing: broken.error))")
            return
        }
        var get = URLRequest(url: URL(string: "\(server.base)/get")!)
        get.httpBody = Data("x".utf8)
        let withBody = await Session().request(get).serializingResponse().response
        guard case .urlRequestValidationFailed(.bodyDataInGETRequest) = withBody.error else {
            Issue.record("unexpected \(String(describing: withBody.error))")
            return
        }
        #expect(withBody.metrics == nil)
    }

    @Test("custom and QUERY methods are sent as given")
    func methods() async throws {
        let server = try httpbin()
        let delete = try await Session().request("\(server.base)/anything", method: .delete).serializingDecodable(Echo.self).value
        #expect(delete.method == "DELETE")
        let custom = await Session().request("\(server.base)/anything", method: HTTPMethod(rawValue: "CUSTOM")).serializingResponse()
            .response
        #expect(custom.response?.status.code == 405 || custom.response?.status.code == 200)
        #expect(custom.request?.method?.rawValue == "CUSTOM")
    }

    @Test("TF is the default session")
    func globalSession() async throws {
        let server = try nginx()
        #expect(TF === Session.default)
        let text = try await TF.request("\(server.base)/hello.txt").serializingString().value
        #expect(text == "hello\n")
    }
}

struct HeadersEcho: Decodable, Sendable { let headers: [String: String] }
struct BearerEcho: Decodable, Sendable {
    let authenticated: Bool
    let token: String
}

@Suite("Alamofire API: validation and serializers", .serialized)
struct ValidationAndSerializationTests {
    @Test("validate() checks status and Accept against Content-Type")
    func automaticValidation() async throws {
        let server = try httpbin()
        let notFound = await Session().request("\(server.base)/status/404").validate().serializingData().response
        #expect(notFound.error?.responseCode == 404)
        #expect(notFound.error?.description == "response status code 404 was unacceptable")
        let ok = await Session().request("\(server.base)/get").validate().serializingData().response
        #expect(ok.error == nil)
        let mismatch = await Session().request("\(server.base)/html", headers: [.accept("application/json")]).validate()
            .serializingData().response
        guard case .responseValidationFailed(.unacceptableContentType(let acceptable, let actual)) = mismatch.error else {
            Issue.record("unexpected \(String(describing: mismatch.error))")
            return
        }
        #expect(acceptable == ["application/json"] && actual == "text/html")
    }

    @Test("validate(statusCode:), validate(contentType:) and custom closures")
    func manualValidation() async throws {
        let server = try httpbin()
        let passes = await Session().request("\(server.base)/status/418").validate(statusCode: [418]).serializingResponse().response
        #expect(passes.error == nil)
        let json = await Session().request("\(server.base)/get").validate(statusCode: 200..<300).validate(contentType: ["application/*"])
            .serializingData().response
        #expect(json.error == nil)
        let wrongType = await Session().request("\(server.base)/get").validate(contentType: ["text/plain"]).serializingData().response
        #expect(wrongType.error?.isResponseValidationError == true)
        struct TooSmall: Error {}
        let custom = await Session().request("\(server.base)/bytes/10")
            .validate { _, _, data in (data?.count ?? 0) > 100 ? .success(()) : .failure(TooSmall()) }
            .serializingData().response
        guard case .responseValidationFailed(.customValidationFailed(let error)) = custom.error, error is TooSmall else {
            Issue.record("unexpected \(String(describing: custom.error))")
            return
        }
    }

    @Test("responseString uses the charset, else ISO-8859-1")
    func strings() async throws {
        let bin = try httpbin()
        let utf8 = try await Session().request("\(bin.base)/encoding/utf8").serializingString().value
        #expect(utf8.contains("∮ E⋅da = Q"))
        let server = try nginx()
        let latin1 = try await Session().request("\(server.base)/latin1.txt").serializingString().value
        #expect(latin1 == "café")
        let forced = await Session().request("\(server.base)/latin1.txt").serializingString(encoding: .utf8).response
        guard case .responseSerializationFailed(.stringSerializationFailed(.utf8)) = forced.error else {
            Issue.record("unexpected \(String(describing: forced.error))")
            return
        }
        #expect(TextEncoding.encoding(ofContentType: "text/plain; charset=\"Windows-1252\"") == .windowsCP1252)
        #expect(TextEncoding.decode(Data([0x80, 0x41]), as: .windowsCP1252) == "€A")
    }

    @Test("gzip and deflate responses from httpbin decode; two Content-Type fields are judged by the first")
    func encodingsFromHttpbin() async throws {
        let server = try httpbin()
        struct Compressed: Decodable, Sendable {
            let gzipped: Bool?
            let deflated: Bool?
        }
        let gzip = try await Session().request("\(server.base)/gzip").validate().serializingDecodable(Compressed.self).value
        #expect(gzip.gzipped == true)
        let deflate = try await Session().request("\(server.base)/deflate").validate().serializingDecodable(Compressed.self).value
        #expect(deflate.deflated == true)
        let url = "\(server.base)/response-headers"
        let parameters = ["Content-Type": "application/vnd.tinyfire+json; charset=utf-8"]
        let accepted = await Session().request(url, parameters: parameters).validate(contentType: ["application/*"])
            .serializingString().response
        // httpbin sends two Content-Type fields here (its own application/json first); the
        // first one is the one judged.
        #expect(accepted.error == nil && accepted.value?.contains("vnd.tinyfire") == true)
        #expect(accepted.response?.headerFields[values: .contentType].count == 2)
        let refused = await Session().request(url, parameters: parameters).validate(contentType: ["text/*"]).serializingString().response
        guard case .responseValidationFailed(.unacceptableContentType(_, let actual)) = refused.error else {
            Issue.record("unexpected \(String(describing: refused.error))")
            return
        }
        #expect(actual == "application/json")
    }

    @Test("decodable, empty responses and preprocessors")
    func decodables() async throws {
        let server = try httpbin()
        struct Url: Decodable, Sendable { let url: String }
        let value = try await Session().request("\(server.base)/get").serializingDecodable(Url.self).value
        #expect(value.url == "\(server.base)/get")
        let empty = try await Session().request("\(server.base)/status/204").serializingDecodable(Empty.self).value
        #expect(empty == Empty.value)
        let noEmptyValue = await Session().request("\(server.base)/status/204").serializingDecodable(Url.self).response
        guard case .responseSerializationFailed(.invalidEmptyResponse) = noEmptyValue.error else {
            Issue.record("unexpected \(String(describing: noEmptyValue.error))")
            return
        }
        let head = try await Session().request("\(server.base)/get", method: .head).serializingData().value
        #expect(head.isEmpty)
        let emptyNotAllowed = await Session().request("\(server.base)/bytes/0").serializingData().response
        guard case .responseSerializationFailed(.inputDataNilOrZeroLength) = emptyNotAllowed.error else {
            Issue.record("unexpected \(String(describing: emptyNotAllowed.error))")
            return
        }
        let broken = await Session().request("\(server.base)/html").serializingDecodable(Url.self).response
        guard case .responseSerializationFailed(.decodingFailed) = broken.error else {
            Issue.record("unexpected \(String(describing: broken.error))")
            return
        }
        #expect(GoogleXSSIPreprocessor().preprocess(Data(")]}',\n{}".utf8)) == Data("{}".utf8))
    }

    @Test("custom response serializers: values, thrown errors, and ResponseSerializer defaults")
    func customSerializers() async throws {
        let server = try nginx()
        struct LineCount: ResponseSerializer {
            func serialize(request: URLRequest?, response: HTTPURLResponse?, data: Data?, error: (any Error)?) throws -> Int {
                if let error { throw error }
                let data = try dataPreprocessor.preprocess(data ?? Data())
                return data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).count - 1
            }
        }
        struct Refuse: DataResponseSerializerProtocol {
            struct Refused: Error {}
            func serialize(request: URLRequest?, response: HTTPURLResponse?, data: Data?, error: (any Error)?) throws -> Int {
                throw Refused()
            }
        }
        let lines = try await Session().request("\(server.base)/hello.txt").serializingResponse(using: LineCount()).value
        #expect(lines == 1)
        let refused: DataResponse<Int, TinyFireError> = await awaitHandler { done in
            Session().request("\(server.base)/hello.txt").response(responseSerializer: Refuse()) { done($0) }
        }
        guard case .responseSerializationFailed(.customSerializationFailed(let error)) = refused.error, error is Refuse.Refused else {
            Issue.record("unexpected \(String(describing: refused.error))")
            return
        }
        #expect(LineCount().emptyResponseCodes == [204, 205] && LineCount().emptyRequestMethods == [.head])
    }

    @Test("chained handlers each serialize; one added after the finish still runs")
    func chainedHandlers() async throws {
        let server = try httpbin()
        let request = Session().request("\(server.base)/get")
        let recorder = Recorder<String>()
        // Two tasks rather than two `async let`s: awaiting a pair of `async let`s aborts Swift
        // 6.2.3's runtime on aarch64 ("freed pointer was not the last allocation",
        // swiftlang/swift#75501), and the cross-built tests run this file there.
        let string = Task { () -> DataResponse<String, TinyFireError> in await awaitHandler { done in request.responseString { done($0) } }
        }
        let decoded = Task { () -> DataResponse<Echo, TinyFireError> in
            await awaitHandler { done in request.responseDecodable(of: Echo.self) { done($0) } }
        }
        let (first, second) = (await string.value, await decoded.value)
        recorder.append(first.value ?? "")
        #expect(first.value?.contains("\"url\"") == true)
        #expect(second.value?.url == "\(server.base)/get")
        let late: DataResponse<Data, TinyFireError> = await awaitHandler { done in request.responseData { done($0) } }
        #expect(late.value?.count == first.value?.utf8.count)
        #expect(request.state == .finished && request.isFinished)
    }

    @Test("DataResponse map, tryMap, mapError and a readable debugDescription")
    func responseTransforms() async throws {
        let server = try httpbin()
        let response = await Session().request("\(server.base)/post", method: .post, parameters: ["a": "1"]).serializingString().response
        #expect(response.map(\.count).value == response.value?.count)
        struct Bad: Error {}
        #expect(response.tryMap { _ -> Int in throw Bad() }.error is Bad)
        #expect(response.mapError { _ in Bad() }.value == response.value)
        let text = response.debugDescription
        #expect(text.contains("[Request]: POST \(server.base)/post"))
        #expect(text.contains("[Status Code]: 200"))
        #expect(text.contains("[Serialization Duration]:"))
        #expect(text.contains("[Result]: success("))
        #expect(response.response?.statusCode == 200 && response.response?.headers["Content-Type"] == "application/json")
    }
}

@Suite("Alamofire API: lifecycle and concurrency", .serialized)
struct LifecycleTests {
    @Test("a suspended request reads nothing until resumed")
    func suspendResume() async throws {
        let server = try httpbin()
        let session = Session(startRequestsImmediately: false)
        let request = session.request("\(server.base)/delay/1")
        let task = request.serializingString()
        #expect(request.state == .initialized)
        request.resume()
        #expect(request.state == .resumed)
        request.suspend()
        #expect(request.state == .suspended)
        try await Task.sleep(for: .milliseconds(2000))
        #expect(!request.isFinished, "finished while suspended")
        request.resume()
        let value = try await task.value
        #expect(value.contains("delay"))
        #expect(request.state == .finished)
    }

    @Test("cancelling the awaiting task cancels the request only when asked")
    func automaticCancellation() async throws {
        let server = try httpbin()
        let session = Session()
        // A server that never answers: the 300 ms sleep below can resume many seconds late when
        // blocking tests occupy the cooperative threads (40 s under qemu), and the cancel must
        // still come first.
        let silent = try HostileServer.neverAnswering()
        let cancelling = session.request(silent.base)
        let waiter = Task { await cancelling.serializingData(automaticallyCancelling: true).response }
        try await Task.sleep(for: .milliseconds(300))
        waiter.cancel()
        let response = await waiter.value
        #expect(response.error?.isExplicitlyCancelledError == true)
        #expect(cancelling.state == .cancelled)

        let keeping = session.request("\(server.base)/delay/1")
        let keepingTask = keeping.serializingData(automaticallyCancelling: false)
        let waiter2 = Task { await keepingTask.response }
        try await Task.sleep(for: .milliseconds(200))
        waiter2.cancel()
        let kept = await waiter2.value
        #expect(kept.error == nil && kept.response?.status.code == 200)
    }

    @Test("cancelAllRequests and withAllRequests see the live requests")
    func allRequests() async throws {
        // Requests that stay in flight until cancelled, however late this task resumes.
        let server = try HostileServer.neverAnswering()
        let session = Session()
        let requests = (0..<3).map { _ in session.request(server.base) }
        let tasks = requests.map { $0.serializingData() }
        let live: Set<Request> = await awaitHandler { done in session.withAllRequests { done($0) } }
        #expect(live.count == 3)
        let _: Void = await awaitHandler { done in session.cancelAllRequests { done(()) } }
        for task in tasks { #expect(await task.response.error?.isExplicitlyCancelledError == true) }
        let after: Set<Request> = await awaitHandler { done in session.withAllRequests { done($0) } }
        #expect(after.isEmpty)
    }

    @Test("request ids are unique version-4 UUIDs; a request cancelled before start finishes")
    func idsAndEarlyCancel() async throws {
        let server = try nginx()
        let session = Session(startRequestsImmediately: false)
        let a = session.request("\(server.base)/hello.txt")
        let b = session.request("\(server.base)/hello.txt")
        #expect(a.id != b.id)
        a.cancel()
        let response = await a.serializingData().response
        #expect(response.error?.isExplicitlyCancelledError == true)
        #expect(a.requests.isEmpty)
    }

    @Test("progress reaches 1.0 in order, for downloads and uploads, closures and streams")
    func progress() async throws {
        let server = try nginx()
        let seen = Recorder<TransferProgress>()
        let request = Session().request("\(server.base)/1m.bin").downloadProgress { seen.append($0) }
        _ = try await request.serializingData().value
        // Progress closures run on the root queue, after the data task may have resumed.
        _ = await eventually { seen.all.last?.fractionCompleted == 1.0 }
        let values = seen.all
        #expect(values.last?.fractionCompleted == 1.0)
        #expect(values.last?.totalUnitCount == 1 << 20)
        #expect(zip(values, values.dropFirst()).allSatisfy { $0.completedUnitCount < $1.completedUnitCount })

        let bin = try httpbin()
        let upload = Session().upload(Data(count: 512 * 1024), to: "\(bin.base)/post")
        let stream = upload.uploadProgress()
        _ = upload.serializingData()
        var last: TransferProgress?
        for await value in stream { last = value }
        #expect(last == TransferProgress(completedUnitCount: 512 * 1024, totalUnitCount: 512 * 1024))
    }

    @Test("URL requests, responses and cURL commands as async streams")
    func streams() async throws {
        let server = try nginx()
        let request = Session().request("\(server.base)/hello.txt")
        let commands = request.cURLDescriptions()
        let responses = request.httpResponses()
        _ = await request.serializingData().response
        var all: [String] = []
        for await command in commands { all.append(command) }
        var statuses: [Int] = []
        for await response in responses { statuses.append(response.status.code) }
        #expect(all.count == 1 && all[0].hasPrefix("$ curl -v"))
        #expect(statuses == [200])
        // Asked for after the response arrived (a fast server, a slow caller): still there.
        let late = Session().request("\(server.base)/hello.txt")
        _ = await late.serializingData().response
        var lateStatuses: [Int] = []
        for await response in late.httpResponses() { lateStatuses.append(response.status.code) }
        #expect(lateStatuses == [200])
    }
}

@Suite("Alamofire API: interceptors, retry, authentication, compression", .serialized)
struct InterceptorTests {
    @Test("adapters run in order, session first; a failing adapter fails the request")
    func adapters() async throws {
        let server = try httpbin()
        let tag = { (value: String) in
            Adapter { request, _, completion in
                var request = request
                // `add` replaces a field of the same name (as Alamofire's does): extend it.
                let order = request.headers["X-Order"].map { $0 + "," + value } ?? value
                request.headers.update(name: "X-Order", value: order)
                completion(.success(request))
            }
        }
        let session = Session(interceptor: tag("session"))
        let interceptor = Interceptor(adapters: [tag("first"), tag("second")])
        let echo = try await session.request("\(server.base)/headers", interceptor: interceptor).serializingDecodable(HeadersEcho.self)
            .value
        #expect(echo.headers["X-Order"] == "session,first,second")

        struct Denied: Error {}
        let failing = await Session().request(
            "\(server.base)/get", interceptor: .adapter { _, _, completion in completion(.failure(Denied())) }
        )
        .serializingData().response
        guard case .requestAdaptationFailed(let error) = failing.error, error is Denied else {
            Issue.record("unexpected \(String(describing: failing.error))")
            return
        }
    }

    @Test("adapters get the request's id in their state")
    func adapterState() async throws {
        let server = try nginx()
        struct StateAdapter: RequestInterceptor {
            let seen: Recorder<UUID>
            func adapt(
                _ urlRequest: URLRequest, for session: Session, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
            ) {
                completion(.success(urlRequest))
            }
            func adapt(
                _ urlRequest: URLRequest, using state: RequestAdapterState,
                completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
            ) {
                seen.append(state.requestID)
                completion(.success(urlRequest))
            }
        }
        let seen = Recorder<UUID>()
        let request = Session().request("\(server.base)/hello.txt", interceptor: StateAdapter(seen: seen))
        _ = await request.serializingData().response
        #expect(seen.all == [request.id])
    }

    @Test("RetryPolicy retries 503 with backoff up to its limit")
    func retryPolicy() async throws {
        let server = try httpbin()
        let policy = RetryPolicy(retryLimit: 2, exponentialBackoffScale: 0.1)
        let request = Session().request("\(server.base)/status/503", interceptor: policy).validate()
        let started = ContinuousClock.now
        let response = await request.serializingData().response
        let elapsed = ContinuousClock.now - started
        #expect(response.error?.responseCode == 503)
        #expect(request.retryCount == 2)
        #expect(request.allMetrics.count == 3 && request.performedRequests.count == 3 && request.requests.count == 6)
        #expect(elapsed >= .milliseconds(300), "backoff 0.1 s then 0.2 s")
        let metrics = try #require(request.metrics)
        #expect(metrics.requestSent != nil && metrics.timeToFirstByte != nil && metrics.tlsHandshake == nil)
        #expect(metrics.requestSent! <= metrics.timeToFirstByte! && metrics.timeToFirstByte! <= metrics.total)
        #expect(metrics.requestBytesSent > 0 && metrics.responseBytesReceived > 0)
        // POST is not retryable by default.
        let post = Session().request("\(server.base)/status/503", method: .post, interceptor: policy).validate()
        _ = await post.serializingData().response
        #expect(post.retryCount == 0)
        // Connection refused is a retryable transfer failure.
        let refused = Session().request(
            "http://127.0.0.1:\(freePort())/", interceptor: RetryPolicy(retryLimit: 1, exponentialBackoffScale: 0.01))
        _ = await refused.serializingData().response
        #expect(refused.retryCount == 1)
    }

    @Test("a retrier may retry a serialization failure, or fail with its own error")
    func retriers() async throws {
        let server = try httpbin()
        let attempts = Recorder<Int>()
        let retrier = Retrier { request, _, error, completion in
            attempts.append(request.retryCount)
            completion(request.retryCount < 1 && (error as? TinyFireError)?.isResponseSerializationError == true ? .retry : .doNotRetry)
        }
        struct Url: Decodable, Sendable { let url: String }
        let request = Session().request("\(server.base)/html", interceptor: retrier)
        let response = await request.serializingDecodable(Url.self).response
        #expect(request.retryCount == 1)
        #expect(attempts.all == [0, 1])
        #expect(response.error?.isResponseSerializationError == true)

        struct GiveUp: Error {}
        let failing = await Session().request(
            "\(server.base)/status/500",
            interceptor: .retrier { _, _, _, completion in
                completion(.doNotRetryWithError(GiveUp()))
            }
        ).validate().serializingData().response
        guard case .requestRetryFailed(let retryError, let original) = failing.error, retryError is GiveUp,
            (original as? TinyFireError)?.responseCode == 500
        else {
            Issue.record("unexpected \(String(describing: failing.error))")
            return
        }
    }

    @Test("ConnectionLostRetryPolicy retries a dropped connection")
    func connectionLost() async throws {
        let server = try HostileServer { client in
            client.readRequest()
            if client.index == 0 {
                client.send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
                client.reset()
            } else {
                client.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            }
        }
        let request = Session().request("http://127.0.0.1:\(server.port)/", interceptor: .connectionLostRetryPolicy)
        let value = try await request.serializingString().value
        #expect(value == "ok" && request.retryCount == 1)
    }

    @Test("AuthenticationInterceptor refreshes once for concurrent requests and retries 401s")
    func authentication() async throws {
        let server = try httpbin()
        let authenticator = BasicAuthenticator()
        let interceptor = AuthenticationInterceptor(
            authenticator: authenticator, credential: BasicCredential(password: "stale", expired: true))
        let session = Session(interceptor: interceptor)
        let results = await withTaskGroup(of: Int?.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    await session.request("\(server.base)/basic-auth/user/secret").validate().serializingData().response.response?.status
                        .code
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results == [200, 200, 200, 200])
        #expect(authenticator.refreshes.all.count == 1)

        // A refused credential (401) is refreshed and the request retried.
        interceptor.credential = BasicCredential(password: "wrong", expired: false)
        let retried = session.request("\(server.base)/basic-auth/user/secret").validate()
        let code = await retried.serializingData().response.response?.status.code
        #expect(code == 200 && retried.retryCount == 1)
        #expect(authenticator.refreshes.all.count == 2)

        // A refresh that never helps is stopped by the refresh window.
        let looping = BasicAuthenticator(refreshedPassword: "still-wrong")
        let loopSession = Session(
            interceptor: AuthenticationInterceptor(
                authenticator: looping, credential: BasicCredential(password: "wrong", expired: false),
                refreshWindow: .init(interval: 30, maximumAttempts: 2)))
        let loop = await loopSession.request("\(server.base)/basic-auth/user/secret").validate().serializingData().response
        guard case .requestRetryFailed(let error, _) = loop.error, case .excessiveRefresh = error as? AuthenticationError else {
            Issue.record("unexpected \(String(describing: loop.error))")
            return
        }
        #expect(looping.refreshes.all.count == 2)

        let missing = await Session(interceptor: AuthenticationInterceptor(authenticator: BasicAuthenticator()))
            .request("\(server.base)/get").serializingData().response
        guard case .requestAdaptationFailed(let reason) = missing.error, case .missingCredential = reason as? AuthenticationError else {
            Issue.record("unexpected \(String(describing: missing.error))")
            return
        }
    }

    @Test("authenticate(username:password:) answers a Basic challenge once")
    func basicChallenge() async throws {
        let server = try httpbin()
        let request = Session(requestQueue: DispatchQueue(label: "requests")).request("\(server.base)/basic-auth/user/passwd")
            .authenticate(username: "user", password: "passwd").validate()
        let response = await request.serializingData().response
        #expect(response.response?.status.code == 200)
        #expect(request.requests.count == 2 && request.requests[0].headers["Authorization"] == nil)
        #expect(request.retryCount == 0)
        let wrong = Session().request("\(server.base)/basic-auth/user/passwd").authenticate(username: "user", password: "nope").validate()
        let refused = await wrong.serializingData().response
        #expect(refused.error?.responseCode == 401 && wrong.requests.count == 2)
    }

    @Test("DeflateRequestCompressor sends a zlib body and handles an existing Content-Encoding")
    func compression() async throws {
        let server = try httpbin()
        let body = Data(String(repeating: "compress me ", count: 200).utf8)
        let echo = try await Session().upload(body, to: "\(server.base)/anything", interceptor: .deflateCompressor)
            .serializingDecodable(Echo.self).value
        #expect(echo.headers["Content-Encoding"] == "deflate")
        let sent = try #require(echo.data.flatMap { $0.split(separator: ",").last }.flatMap { Data(base64Encoded: String($0)) })
        #expect(sent.count < body.count / 4)
        #expect(try inflateZlib(sent) == body)

        let preset: HTTPHeaders = [.contentEncoding("identity")]
        let failing = await Session().upload(body, to: "\(server.base)/anything", headers: preset, interceptor: .deflateCompressor)
            .serializingData().response
        guard case .requestAdaptationFailed(let error) = failing.error, error is DeflateRequestCompressor.DuplicateHeaderError else {
            Issue.record("unexpected \(String(describing: failing.error))")
            return
        }
        let skipped = try await Session().upload(
            body, to: "\(server.base)/anything", headers: preset,
            interceptor: .deflateCompressor(duplicateHeaderBehavior: .skip)
        ).serializingDecodable(Echo.self).value
        #expect(skipped.data == String(decoding: body, as: UTF8.self))
        let small = try await Session().upload(
            Data("tiny".utf8), to: "\(server.base)/anything",
            interceptor: .deflateCompressor(shouldCompressBodyData: { $0.count > 1024 })
        ).serializingDecodable(Echo.self).value
        #expect(small.data == "tiny" && small.headers["Content-Encoding"] == nil)
    }
}

final class BasicCredential: AuthenticationCredential {
    let password: String
    let expired: Bool
    init(password: String, expired: Bool) {
        self.password = password
        self.expired = expired
    }
    var requiresRefresh: Bool { expired }
}

final class BasicAuthenticator: Authenticator {
    let refreshes = Recorder<String>()
    let refreshedPassword: String
    init(refreshedPassword: String = "secret") { self.refreshedPassword = refreshedPassword }

    func apply(_ credential: BasicCredential, to urlRequest: inout URLRequest) {
        urlRequest.headers.update(.authorization(username: "user", password: credential.password))
    }

    func refresh(
        _ credential: BasicCredential, for session: Session, completion: @escaping @Sendable (Result<BasicCredential, any Error>) -> Void
    ) {
        refreshes.append(credential.password)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.1) { [refreshedPassword] in
            completion(.success(BasicCredential(password: refreshedPassword, expired: false)))
        }
    }

    func didRequest(_ urlRequest: URLRequest, with response: HTTPURLResponse, failDueToAuthenticationError error: any Error) -> Bool {
        response.status.code == 401
    }

    func isRequest(_ urlRequest: URLRequest, authenticatedWith credential: BasicCredential) -> Bool {
        urlRequest.headers["Authorization"] == HTTPHeader.authorization(username: "user", password: credential.password).value
    }
}

@Suite("Alamofire API: redirects, monitors, cURL", .serialized)
struct RedirectMonitorTests {
    @Test("Redirector: follow, doNotFollow, modify; per request over per session")
    func redirectors() async throws {
        let server = try httpbin()
        let stopped = await Session(redirectHandler: .doNotFollow).request("\(server.base)/redirect/2").serializingResponse().response
        #expect(stopped.response?.status.code == 302)
        #expect(stopped.metrics?.redirects.isEmpty == true)
        let followed = await Session(redirectHandler: .doNotFollow).request("\(server.base)/redirect/2").redirect(using: .follow)
            .serializingResponse().response
        #expect(followed.response?.status.code == 200 && followed.metrics?.redirects.count == 2)
        let modified = try await Session().request("\(server.base)/redirect-to?url=/get").redirect(
            using: .modify { _, request, _ in
                var request = request
                request.url = URL(string: "\(server.base)/anything/modified")
                return request
            }
        ).serializingDecodable(Echo.self).value
        #expect(modified.url == "\(server.base)/anything/modified")
    }

    @Test("a redirect handler may answer later, from another thread")
    func asyncRedirectHandler() async throws {
        let server = try httpbin()
        struct Later: RedirectHandler {
            let follow: Bool
            func request(
                _ request: Request, willBeRedirectedTo redirect: URLRequest, for response: HTTPURLResponse,
                completion: @escaping @Sendable (URLRequest?) -> Void
            ) {
                DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { completion(follow ? redirect : nil) }
            }
        }
        let followed = await Session(redirectHandler: Later(follow: true)).request("\(server.base)/redirect/1").serializingResponse()
            .response
        #expect(followed.response?.status.code == 200)
        let kept = await Session(redirectHandler: Later(follow: false)).request("\(server.base)/redirect/1").serializingResponse().response
        #expect(kept.response?.status.code == 302)
        #expect(kept.response?.headerFields[.location] == "/get")
    }

    @Test("event monitors see the lifecycle in order; LoggingEventMonitor logs through swift-log")
    func monitors() async throws {
        let server = try nginx()
        let events = Recorder<String>()
        let monitor = ClosureEventMonitor()
        monitor.update {
            $0.requestDidResume = { _ in events.append("resume") }
            $0.requestDidCreateInitialURLRequest = { _, _ in events.append("initial") }
            $0.requestDidCreateURLRequest = { _, _ in events.append("created") }
            $0.requestDidStartTransfer = { _, _ in events.append("transfer") }
            $0.requestDidReceiveResponse = { _, response in events.append("response \(response.status.code)") }
            $0.requestDidGatherMetrics = { _, _ in events.append("metrics") }
            $0.requestDidCompleteTransferWithError = { _, error in events.append("complete \(error == nil)") }
            $0.requestDidValidateRequestResponseDataWithResult = { _, _, _, _, _ in events.append("validated") }
            $0.requestDidFinish = { _ in events.append("finish") }
            $0.requestDidParseResponse = { _, _ in events.append("parsed") }
        }
        let logs = LogCapture()
        let session = Session(eventMonitors: [monitor, LoggingEventMonitor(logger: logs.logger)])
        _ =
            await awaitHandler { done in session.request("\(server.base)/hello.txt").validate().response { done($0) } }
            as DataResponse<Data?, TinyFireError>
        // Monitors get events on their own queue: wait for the last one.
        _ = await eventually { events.all.last == "parsed" }
        #expect(
            events.all == [
                "resume", "initial", "created", "transfer", "response 200", "metrics", "complete true", "validated", "finish", "parsed",
            ])
        #expect(logs.messages.contains { $0.hasPrefix("transfer complete") && $0.contains("status=200") })
    }

    @Test("cURLDescription is a command that runs in a shell and sends the same request")
    func curlDescription() async throws {
        let server = try httpbin()
        let request = Session().request(
            "\(server.base)/post", method: .post, parameters: ["quote": "it's \"quoted\" $HOME"], encoder: JSONParameterEncoder.sortedKeys,
            headers: ["X-Test": "a'b"])
        let task = request.serializingData()
        let described: String = await awaitHandler { done in request.cURLDescription { done($0) } }
        _ = await task.response
        #expect(described.hasPrefix("$ curl -v \\\n\t-X POST \\\n\t-H "))
        #expect(described == request.cURLDescription())
        let command = String(described.dropFirst(2)).replacingOccurrences(of: "curl -v", with: "curl -s --compressed")
        let output = try runCapturingOutput("/bin/sh", ["-c", command]).stdout
        let echo = try JSONDecoder().decode(Echo.self, from: output)
        #expect(echo.data == #"{"quote":"it's \"quoted\" $HOME"}"#)
        #expect(echo.headers["X-Test"] == "a'b")
        #expect(Session().request("\(server.base)/get").cURLDescription().contains("could not be created"))
    }
}

/// zlib-format inflate for checking compressed request bodies.
func inflateZlib(_ data: Data) throws -> Data {
    let decoder = try ContentDecoder(coding: .deflate)
    var output = Data()
    try data.withUnsafeBytes { raw in
        try decoder.decode(raw) { output.append(contentsOf: $0) }
    }
    try decoder.finish()
    return output
}

/// Collects swift-log messages with their metadata, as `message key=value …`.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])

    var messages: [String] { lines.withLock { $0 } }

    /// Records one line.
    func append(_ line: String) {
        lines.withLock { $0.append(line) }
    }

    var logger: Logger {
        Logger(label: "test") { _ in Handler(capture: self) }
    }

    struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let fields = (event.metadata ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            capture.lines.withLock { $0.append("\(event.message) \(fields)") }
        }
    }
}

@Suite("Server trust manager")
struct ServerTrustManagerTests {
    struct Named: ServerTrustEvaluating {
        let name: String
        func evaluate(_ trust: ServerTrust, forHost host: String) throws {}
    }

    @Test("exact names win over wildcards; unknown hosts fail only when every host must be evaluated")
    func lookup() throws {
        let manager = ServerTrustManager(evaluators: ["api.example.com": Named(name: "exact"), "*.example.com": Named(name: "wild")])
        #expect((try manager.serverTrustEvaluator(forHost: "API.example.com") as? Named)?.name == "exact")
        #expect((try manager.serverTrustEvaluator(forHost: "fw.example.com") as? Named)?.name == "wild")
        #expect((try? manager.serverTrustEvaluator(forHost: "a.b.example.com")) == nil)
        do {
            _ = try manager.serverTrustEvaluator(forHost: "other.org")
            Issue.record("expected a failure")
        } catch let error as TinyFireError {
            #expect(error.description.contains("other.org"))
        }
        let lenient = ServerTrustManager(allHostsMustBeEvaluated: false, evaluators: [:])
        #expect(try lenient.serverTrustEvaluator(forHost: "other.org") == nil)
    }
}

@Suite("AuthenticationInterceptor ordering")
struct AuthenticationOrderingTests {
    /// Refreshes only when told to, so the test controls when the refresh ends.
    final class ManualAuthenticator: Authenticator {
        let pending = Mutex<[@Sendable (Result<BasicCredential, any Error>) -> Void]>([])

        func apply(_ credential: BasicCredential, to urlRequest: inout URLRequest) {
            urlRequest.headers.update(.authorization(bearerToken: credential.password))
        }

        func refresh(
            _ credential: BasicCredential, for session: Session,
            completion: @escaping @Sendable (Result<BasicCredential, any Error>) -> Void
        ) {
            pending.withLock { $0.append(completion) }
        }

        func didRequest(_ urlRequest: URLRequest, with response: HTTPURLResponse, failDueToAuthenticationError error: any Error) -> Bool {
            true
        }

        func isRequest(_ urlRequest: URLRequest, authenticatedWith credential: BasicCredential) -> Bool { true }

        func finishRefresh(with password: String) {
            for completion in pending.withLock({ list in
                defer { list = [] }; return list
            }) {
                completion(.success(BasicCredential(password: password, expired: false)))
            }
        }
    }

    @Test("requests waiting for a refresh are adapted in the order they arrived, with one refresh")
    func queuedInOrder() throws {
        let authenticator = ManualAuthenticator()
        let interceptor = AuthenticationInterceptor(
            authenticator: authenticator, credential: BasicCredential(password: "old", expired: true))
        let session = Session()
        let order = Recorder<String>()
        for name in ["a", "b", "c", "d"] {
            var request = URLRequest(url: URL(string: "http://example.com/\(name)")!)
            request.headers.add(name: "X-Name", value: name)
            interceptor.adapt(request, for: session) { result in
                if case .success(let adapted) = result {
                    order.append("\(adapted.headers["X-Name"] ?? "?") \(adapted.headers["Authorization"] ?? "none")")
                }
            }
        }
        #expect(order.all.isEmpty)
        #expect(authenticator.pending.withLock { $0.count } == 1)
        authenticator.finishRefresh(with: "new")
        #expect(order.all == ["a Bearer new", "b Bearer new", "c Bearer new", "d Bearer new"])
    }
}
