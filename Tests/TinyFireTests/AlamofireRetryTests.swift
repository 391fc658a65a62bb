import Dispatch
import Foundation
import Synchronization
import Testing

@testable import TinyFire

/// Retries as Alamofire makes them: every attempt built afresh from the request's convertible
/// (its request modifier runs again) and adapted again, whatever an adapter throws wrapped as
/// `.requestAdaptationFailed`; and, TinyFire's own rule, no retrier keeps a request going past
/// `SessionConfiguration.maxRetries`. Against httpbin.
@Suite("Alamofire: every retry rebuilds the request", .serialized, .timeLimit(.minutes(2)))
struct AlamofireRetryTests {
    /// Counts the modifier's calls; each attempt times out after 0.2 s on httpbin's /delay/2.
    final class Counter: Sendable {
        let value = Atomic<Int>(0)
        func bump() { value.add(1, ordering: .relaxed) }
        var count: Int { value.load(ordering: .relaxed) }
    }

    static func timedOut(_ error: TinyFireError?) -> Bool {
        error?.transferError?.kind == .timedOut
    }

    @Test("the request modifier runs once per attempt: request, upload, download and stream, each retried once by RetryPolicy")
    func modifierRunsPerAttempt() async throws {
        let server = try httpbin()
        let url = "\(server.base)/delay/2"
        let policy = RetryPolicy(retryLimit: 1, exponentialBackoffScale: 0, retryableHTTPMethods: [.get, .post])
        let session = Session(interceptor: policy)

        let data = Counter()
        let dataRequest = session.request(url) { request in
            request.timeoutInterval = 0.2
            data.bump()
        }
        let dataResponse = await dataRequest.serializingData().response
        #expect(data.count == 2, "request modifier ran \(data.count) times")
        #expect(dataRequest.retryCount == 1)
        #expect(Self.timedOut(dataResponse.error), "\(String(describing: dataResponse.error))")

        let upload = Counter()
        let uploadRequest = session.upload(Data("data".utf8), to: url, method: .post) { request in
            request.timeoutInterval = 0.2
            upload.bump()
        }
        let uploadResponse = await uploadRequest.serializingData().response
        #expect(upload.count == 2, "upload modifier ran \(upload.count) times")
        #expect(Self.timedOut(uploadResponse.error), "\(String(describing: uploadResponse.error))")

        let download = Counter()
        let downloadRequest = session.download(
            url,
            requestModifier: { request in
                request.timeoutInterval = 0.2
                download.bump()
            })
        let downloadResponse = await downloadRequest.serializingDownloadedFileURL().response
        #expect(download.count == 2, "download modifier ran \(download.count) times")
        #expect(Self.timedOut(downloadResponse.error), "\(String(describing: downloadResponse.error))")

        let stream = Counter()
        let streamRequest = session.streamRequest(url) { request in
            request.timeoutInterval = 0.2
            stream.bump()
        }
        let completion = Mutex<DataStreamRequest.Completion?>(nil)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            streamRequest.responseStream { event in
                if case .complete(let end) = event.event {
                    completion.withLock { $0 = end }
                    done.resume()
                }
            }
        }
        #expect(stream.count == 2, "stream modifier ran \(stream.count) times")
        #expect(Self.timedOut(completion.withLock { $0 }?.error))
    }

    @Test("with a request queue, every attempt is built there, retries included")
    func retriesBuiltOnRequestQueue() async throws {
        let server = try httpbin()
        let key = DispatchSpecificKey<String>()
        let builder = DispatchQueue(label: "builder")
        builder.setSpecific(key: key, value: "builder")
        let seen = Mutex<[String]>([])
        let session = Session(requestQueue: builder, interceptor: RetryPolicy(retryLimit: 2, exponentialBackoffScale: 0))
        let request = session.request("\(server.base)/status/503") { _ in
            seen.withLock { $0.append(DispatchQueue.getSpecific(key: key) ?? "elsewhere") }
        }.validate()
        _ = await request.serializingData().response
        #expect(seen.withLock { $0 } == ["builder", "builder", "builder"])
    }

    /// Answers 500 until its own state says the next attempt may succeed: only a rebuilt
    /// request reaches the good URL.
    struct SecondTimeLucky: URLRequestConvertible {
        let base: String
        let built = Counter()
        func asURLRequest() throws -> URLRequest {
            built.bump()
            let path = built.count == 1 ? "/status/500" : "/get"
            return URLRequest(url: URL(string: base + path)!, method: .get)
        }
    }

    @Test("a retrier that always retries ends when the rebuilt request succeeds (the convertible's second request is another URL)")
    func alwaysRetryEndsOnRebuiltRequest() async throws {
        let server = try httpbin()
        let convertible = SecondTimeLucky(base: server.base)
        let retrier = Retrier { _, _, _, completion in completion(.retry) }
        let request = Session().request(convertible, interceptor: retrier).validate()
        let response = await request.serializingData().response
        #expect(response.error == nil, "\(String(describing: response.error))")
        #expect(response.response?.statusCode == 200)
        #expect(convertible.built.count == 2)
        #expect(request.retryCount == 1)
        #expect(request.performedRequests.map { $0.url?.path } == ["/status/500", "/get"])
    }

    @Test(
        "a retrier that always retries a request that always fails stops at maxRetries: requestRetryFailed(RetryLimitReached), the last error kept"
    )
    func alwaysRetryIsBounded() async throws {
        let server = try httpbin()
        let attempts = Counter()
        let retrier = Retrier { _, _, _, completion in completion(.retry) }
        let session = Session(configuration: SessionConfiguration(maxRetries: 3), interceptor: retrier)
        let request = session.request("\(server.base)/status/500") { _ in attempts.bump() }.validate()
        let response = await request.serializingData().response
        #expect(attempts.count == 4, "\(attempts.count) attempts")
        #expect(request.retryCount == 3)
        guard case .requestRetryFailed(let retryError, let original) = response.error else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect((retryError as? RetryLimitReached)?.limit == 3)
        #expect((original as? TinyFireError)?.responseCode == 500)
        #expect("\(retryError)".contains("maxRetries"))
        // The default bound, with the default configuration.
        #expect(SessionConfiguration().maxRetries == SessionConfiguration.defaultMaxRetries)
        #expect(SessionConfiguration(maxRetries: -1).maxRetries == 0)
    }

    @Test("a retrier that always retries a body that never decodes stops at maxRetries too: requestRetryFailed(RetryLimitReached)")
    func serializerRetryIsBounded() async throws {
        let server = try httpbin()
        let retrier = Retrier { _, _, _, completion in completion(.retry) }
        let session = Session(configuration: SessionConfiguration(maxRetries: 2), interceptor: retrier)
        let request = session.request("\(server.base)/html")
        let response = await request.serializingDecodable([String: String].self).response
        #expect(request.retryCount == 2)
        #expect(request.performedRequests.count == 3)
        guard case .requestRetryFailed(let retryError, let original) = response.error else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect((retryError as? RetryLimitReached)?.limit == 2)
        #expect((original as? TinyFireError)?.isResponseSerializationError == true)
    }

    @Test("a retried upload(Data) whose adapter replaces the request still sends its body")
    func uploadBodySurvivesReplacedRequest() async throws {
        let server = try httpbin()
        let body = Data("the upload's own bytes".utf8)
        let adapted = Counter()
        let adapter = Adapter { request, _, completion in
            adapted.bump()
            // The retry goes to another URL, in a request made from scratch, without a body.
            if adapted.count > 1 {
                completion(.success(URLRequest(url: URL(string: "\(server.base)/post")!, method: .post)))
            } else {
                completion(.success(request))
            }
        }
        let retrier = Retrier { request, _, _, completion in completion(request.retryCount == 0 ? .retry : .doNotRetry) }
        let upload = Session(interceptor: Interceptor(adapters: [adapter], retriers: [retrier]))
            .upload(body, to: "\(server.base)/status/500").validate()
        let response = await upload.serializingDecodable(AlamofireBehaviourTests.HttpbinEcho.self).response
        #expect(upload.retryCount == 1)
        #expect(response.value?.data == "the upload's own bytes", "\(response.debugDescription)")
    }

    struct AdapterFailure: Error, Equatable {}

    @Test("whatever an adapter throws is requestAdaptationFailed, a TinyFireError too, and the retrier sees it so")
    func adapterErrorsAreWrapped() async throws {
        let server = try httpbin()
        let seen = Mutex<[String]>([])
        let retrier = Retrier { _, _, error, completion in
            seen.withLock { $0.append("\(error)") }
            completion(.doNotRetry)
        }
        for thrown in [TinyFireError.invalidURL(url: "/adapt/error/1", reason: "the adapter says"), AdapterFailure()] as [any Error] {
            let adapter = Adapter { _, _, completion in completion(.failure(thrown)) }
            let request = Session(interceptor: Interceptor(adapters: [adapter], retriers: [retrier])).request("\(server.base)/get")
            let response = await request.serializingData().response
            guard case .requestAdaptationFailed(let underlying) = response.error else {
                Issue.record("unexpected \(String(describing: response.error))")
                continue
            }
            #expect(response.error?.isRequestAdaptationError == true)
            if thrown is AdapterFailure {
                #expect(underlying as? AdapterFailure == AdapterFailure())
            } else {
                guard case .invalidURL = underlying as? TinyFireError else {
                    Issue.record("underlying \(underlying)")
                    continue
                }
            }
        }
        #expect(seen.withLock { $0.count } == 2)
        #expect(seen.withLock { $0 }.allSatisfy { $0.contains("adapt") })
    }

    @Test("an adapter that throws on the first attempt only: the retry adapts again and succeeds (Alamofire's UploadHandler)")
    func adaptErrorThenRetry() async throws {
        let server = try httpbin()
        let adapted = Counter()
        let adapter = Adapter { request, _, completion in
            adapted.bump()
            completion(adapted.count == 1 ? .failure(AdapterFailure()) : .success(request))
        }
        let retrier = Retrier { _, _, _, completion in completion(.retry) }
        let upload = Session(interceptor: Interceptor(adapters: [adapter], retriers: [retrier]))
            .upload(Data("upload data".utf8), to: "\(server.base)/post").validate()
        let response = await upload.serializingDecodable(AlamofireBehaviourTests.HttpbinEcho.self).response
        #expect(adapted.count == 2)
        #expect(upload.retryCount == 1)
        #expect(response.value?.data == "upload data", "\(response.debugDescription)")
    }
}
