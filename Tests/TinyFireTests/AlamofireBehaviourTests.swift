import Dispatch
import Foundation
import HTTPTypes
import Synchronization
import Testing

@testable import TinyFire

/// Behaviours where TinyFire answered differently from Alamofire's documented behaviour, each
/// tried the way Alamofire code meets it, against httpbin or nginx.
@Suite("Alamofire behaviours", .serialized)
struct AlamofireBehaviourTests {
    /// Times the first attempt out, then retries once, sending the second attempt to `retryURL`.
    final class TimeoutOnceInterceptor: RequestInterceptor, Sendable {
        let retryURL: URL
        let attempts = Atomic<Int>(0)
        init(retryURL: URL) { self.retryURL = retryURL }

        func adapt(_ urlRequest: URLRequest, for session: Session, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void)
        {
            var request = urlRequest
            if attempts.add(1, ordering: .relaxed).newValue == 1 {
                request.timeoutInterval = 0.5
            } else {
                request.url = retryURL
            }
            completion(.success(request))
        }

        func retry(
            _ request: Request, for session: Session, dueTo error: any Error, completion: @escaping @Sendable (RetryResult) -> Void
        ) {
            completion(request.retryCount == 0 ? .retry : .doNotRetry)
        }
    }

    @Test("a data upload retried after a timeout resends the same body", arguments: ["upload to", "upload with", "request"])
    func retriedUploadKeepsBody(kind: String) async throws {
        let server = try httpbin()
        let body = Data("the same bytes, again".utf8)
        let interceptor = TimeoutOnceInterceptor(retryURL: URL(string: "\(server.base)/post")!)
        let request: DataRequest
        if kind == "upload to" {
            request = Session().upload(body, to: "\(server.base)/delay/3", interceptor: interceptor)
        } else if kind == "upload with" {
            var urlRequest = URLRequest(url: URL(string: "\(server.base)/delay/3")!, method: .post, headers: [.contentType("text/plain")])
            urlRequest.timeoutInterval = 10
            request = Session(interceptor: interceptor).upload(body, with: urlRequest)
        } else {
            var urlRequest = URLRequest(url: URL(string: "\(server.base)/delay/3")!, method: .post)
            urlRequest.httpBody = body
            request = Session().request(urlRequest, interceptor: interceptor)
        }
        let response = await request.serializingDecodable(HttpbinEcho.self).response
        #expect(request.retryCount == 1)
        #expect(response.value?.data == "the same bytes, again", "\(response.debugDescription)")
    }

    struct HttpbinEcho: Decodable, Sendable {
        let data: String
    }

    @Test("cancelling the Swift task cancels the request it awaits (automaticallyCancelling defaults to true, as in 5.12)")
    func taskCancellation() async throws {
        let server = try httpbin()
        // A server that never answers: the test's own sleeps can resume seconds late when
        // blocking tests hold the cooperative threads, and the cancel must still come first.
        let silent = try HostileServer.neverAnswering()
        let request = Session().request(silent.base)
        let task = Task { await request.serializingDecodable(HttpbinEcho.self).result }
        try await Task.sleep(for: .milliseconds(100))
        task.cancel()
        let result = await task.value
        #expect(request.isCancelled)
        guard case .failure(let error) = result else {
            Issue.record("the request succeeded")
            return
        }
        #expect(error.isExplicitlyCancelledError)

        // Not when asked not to: the request runs to its end.
        let kept = Session().request("\(server.base)/delay/1")
        let keptTask = Task { await kept.serializingData(automaticallyCancelling: false).result }
        keptTask.cancel()
        let keptResult = await keptTask.value
        #expect(!kept.isCancelled)
        #expect((try? keptResult.get()) != nil)

        // Cancelled before the await starts: the same.
        let early = Session().request(silent.base)
        let earlyTask = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await early.serializingString().result
        }
        let earlyResult = await earlyTask.value
        #expect((try? earlyResult.get()) == nil, "the request was not cancelled")
        #expect(early.isCancelled)

        // In a task group: cancelling the group cancels every member's request.
        let requests = (0..<3).map { _ in Session().request(silent.base) }
        let errors = await withTaskGroup(of: TinyFireError?.self) { group -> [TinyFireError?] in
            for request in requests {
                group.addTask { await request.serializingData().response.error }
            }
            try? await Task.sleep(for: .milliseconds(100))
            group.cancelAll()
            var errors: [TinyFireError?] = []
            for await error in group { errors.append(error) }
            return errors
        }
        #expect(errors.count == 3)
        #expect(errors.allSatisfy { $0?.isExplicitlyCancelledError == true })
        #expect(requests.allSatisfy { $0.isCancelled })
    }

    @Test("onHTTPResponse answering .cancel delivers no body: the request fails, cancelled")
    func dispositionCancelDeliversNoBody() async throws {
        let server = try httpbin()
        let response = await withCheckedContinuation { continuation in
            Session().request("\(server.base)/get")
                .onHTTPResponse { _, completion in completion(.cancel) }
                .responseData { continuation.resume(returning: $0) }
        }
        #expect(response.data == nil || response.data?.isEmpty == true, "\(response.data?.count ?? 0) bytes delivered")
        #expect(response.error?.isExplicitlyCancelledError == true)
        #expect(response.response?.statusCode == 200)
    }

    @Test("automaticallyCancelOnStreamError cancels when a stream serializer fails to decode")
    func streamCancelsOnDecodingError() async throws {
        let server = try httpbin()
        struct NotThere: Decodable, Sendable { let missing: Int }
        let errors = Recorder<String>()
        let request = Session().streamRequest("\(server.base)/stream/50", automaticallyCancelOnStreamError: true)
        let completion = await withCheckedContinuation { (continuation: CheckedContinuation<TinyFireError?, Never>) in
            request.responseStreamDecodable(of: NotThere.self) { stream in
                switch stream.event {
                case .stream(let result):
                    if case .failure(let error) = result { errors.append("\(error)") }
                case .complete(let completion):
                    continuation.resume(returning: completion.error)
                }
            }
        }
        #expect(!errors.all.isEmpty)
        #expect(request.isCancelled)
        #expect(completion?.isExplicitlyCancelledError == true, "\(String(describing: completion))")
    }

    @Test("HTTPHeaders keep one field per name, any case, from literals, arrays, dictionaries and update/add")
    func headersUniqueByName() {
        let fromDictionaryLiteral: HTTPHeaders = ["key": "", "Key": "", "KEY": ""]
        let fromDictionary = HTTPHeaders(["key": "", "Key": "", "KEY": ""])
        let fromArrayLiteral: HTTPHeaders = [
            HTTPHeader(name: "key", value: ""), HTTPHeader(name: "Key", value: ""), HTTPHeader(name: "KEY", value: ""),
        ]
        let fromArray = HTTPHeaders([
            HTTPHeader(name: "key", value: ""), HTTPHeader(name: "Key", value: ""), HTTPHeader(name: "KEY", value: ""),
        ])
        var manual = HTTPHeaders()
        manual.update(HTTPHeader(name: "key", value: ""))
        manual.update(name: "Key", value: "")
        manual.update(name: "KEY", value: "")
        for headers in [fromDictionaryLiteral, fromDictionary, fromArrayLiteral, fromArray, manual] {
            #expect(headers.count == 1)
        }
        var ordered = HTTPHeaders()
        ordered.add(.userAgent("one"))
        ordered.add(.contentType("a"))
        ordered.add(.userAgent("two"))
        ordered.add(name: "content-type", value: "b")
        #expect(ordered.map { "\($0.name): \($0.value)" } == ["User-Agent: two", "content-type: b"])
    }

    @Test("validate() accepts a */json wildcard in Accept, and refuses a type outside it")
    func validateWildcardSubtype() async throws {
        let server = try httpbin()
        let accepted = await Session().request("\(server.base)/get", headers: [.accept("*/json")]).validate().serializingData().response
        #expect(accepted.error == nil, "\(String(describing: accepted.error))")
        let wildcardType = await Session().request("\(server.base)/get", headers: [.accept("application/*")]).validate()
            .serializingData().response
        #expect(wildcardType.error == nil)
        let refused = await Session().request("\(server.base)/xml", headers: [.accept("*/json")]).validate().serializingData().response
        #expect(refused.error?.responseContentType == "application/xml")
        #expect(refused.error?.acceptableContentTypes == ["*/json"])
    }

    @Test("a download's custom validator gets the file with the body in it, as its argument and as the request's fileURL")
    func downloadValidatorGetsFile() async throws {
        let server = try httpbin()
        let seen = Mutex<(Data?, Data?)>((nil, nil))
        let download = Session().download("\(server.base)/bytes/100")
        let response = await download.validate { [unowned download] _, _, fileURL in
            let fromArgument = fileURL.flatMap { try? Data(contentsOf: $0) }
            let fromRequest = download.fileURL.flatMap { try? Data(contentsOf: $0) }
            seen.withLock { $0 = (fromArgument, fromRequest) }
            return .success(())
        }
        .serializingData().response
        let (fromArgument, fromRequest) = seen.withLock { $0 }
        #expect(fromArgument?.count == 100)
        #expect(fromRequest?.count == 100)
        #expect(response.value == fromArgument)
    }

    @Test(
        "a GET with a body is refused before it is sent: bodyDataInGETRequest, wrapped as requestAdaptationFailed when an adapter added it"
    )
    func getWithAdaptedBodyRefused() async throws {
        let server = try httpbin()
        let adapter = Adapter { request, _, completion in
            var request = request
            request.httpBody = Data("body".utf8)
            completion(.success(request))
        }
        let request = Session().request("\(server.base)/get", interceptor: adapter)
        let response = await request.serializingData().response
        // Found after adapting: Alamofire wraps it as the adapter's failure.
        guard case .requestAdaptationFailed(let underlying) = response.error,
            case .urlRequestValidationFailed(.bodyDataInGETRequest(let body)) = underlying as? TinyFireError
        else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect(body == Data("body".utf8))
        #expect(response.metrics == nil)
        // A GET built with a body is refused as it is, before any adapter.
        var built = URLRequest(url: URL(string: "\(server.base)/get")!, method: .get)
        built.httpBody = Data("built".utf8)
        let direct = await Session().request(built, interceptor: adapter).serializingData().response
        #expect(direct.error?.isURLRequestValidationError == true, "\(String(describing: direct.error))")
    }

    @Test("URLEncodedFormEncoder encodes superEncoder(forKey:) as the key's own container")
    func formEncoderSuperEncoder() throws {
        struct Nested: Encodable {
            enum CodingKeys: String, CodingKey { case four, five }
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode("one", forKey: .four)
                try container.encode(2, forKey: .five)
            }
        }
        struct Outer: Encodable {
            enum CodingKeys: String, CodingKey { case four }
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                let nested = container.superEncoder(forKey: .four)
                try Nested().encode(to: nested)
            }
        }
        let encoded: String = try URLEncodedFormEncoder().encode(Outer())
        #expect(encoded == "four%5Bfive%5D=2&four%5Bfour%5D=one")
        // A plain superEncoder() writes in the container's own place (no "super" key), as
        // Alamofire's: a single value there replaces the keyed root, which a form cannot be.
        struct WithSuper: Encodable {
            enum CodingKeys: String, CodingKey { case a }
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(1, forKey: .a)
                var single = container.superEncoder().singleValueContainer()
                try single.encode("s")
            }
        }
        #expect(throws: (any Error).self) { let _: String = try URLEncodedFormEncoder().encode(WithSuper()) }
    }

    @Test("a download cancelled with resume data resumes against a server that sends Last-Modified and no ETag")
    func resumeDataWithLastModifiedOnly() async throws {
        let server = try nginx()
        // nginx's ETag is turned off for /no-etag/ in the fixture; Last-Modified stays.
        let url = "\(server.base)/no-etag/1m.bin"
        let head = await Session().request(url, method: .head).serializingData().response
        try #require(head.response?.headers["Last-Modified"] != nil, "the fixture serves \(url) with Last-Modified")
        #expect(head.response?.headers["ETag"] == nil)
        let download = Session().download("\(server.base)/slow-no-etag/1m.bin")
        let resumeData = await withCheckedContinuation { (continuation: CheckedContinuation<Data?, Never>) in
            download.downloadProgress { progress in
                if progress.completedUnitCount > 64 * 1024 { download.cancel { continuation.resume(returning: $0) } }
            }
            download.response { _ in }
        }
        let data = try #require(resumeData)
        let resumed = await Session().download(resumingWith: data, from: url).serializingData().response
        #expect(resumed.value?.count == 1_048_576)
        #expect(resumed.response?.statusCode == 206)
    }

    @Test("cancel(byProducingResumeData:) answers only the call that cancels: not a second one, not one after the end")
    func resumeDataAnsweredOnce() async throws {
        let server = try nginx()
        let answers = Mutex<[String]>([])
        let download = Session().download("\(server.base)/slow-no-etag/1m.bin")
        let first = await withCheckedContinuation { (continuation: CheckedContinuation<Data?, Never>) in
            download.downloadProgress { progress in
                // Every progress event past 64 KiB cancels, as ported Alamofire code does.
                guard progress.completedUnitCount > 64 * 1024 else { return }
                download.cancel { data in
                    let count = answers.withLock { list in
                        list.append("progress")
                        return list.count
                    }
                    if count == 1 { continuation.resume(returning: data) }
                }
            }
            download.response { _ in }
        }
        #expect(first != nil)
        download.cancel { _ in answers.withLock { $0.append("after cancel") } }

        let finished = Session().download("\(server.base)/no-etag/1m.bin")
        _ = await finished.serializingData().response
        finished.cancel { _ in answers.withLock { $0.append("after the end") } }
        // Answers go through the session's root queue: give a wrong one time to arrive.
        try await Task.sleep(for: .milliseconds(300))
        #expect(answers.withLock { $0 } == ["progress"])
    }

    @Test("a download into an occupied file or a missing directory fails with the file-system error that says which")
    func downloadMoveErrors() async throws {
        let server = try httpbin()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tf-move-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: directory) }
        let occupied = directory.appendingPathComponent("taken.bin")
        try Data("already here".utf8).write(to: occupied)
        let first = await Session().download("\(server.base)/bytes/10", to: { _, _ in (occupied, []) }).serializingDownloadedFileURL()
            .response
        guard case .downloadedFileMoveFailed(let error, _, let destination) = first.error else {
            Issue.record("unexpected \(String(describing: first.error))")
            return
        }
        #expect(destination == occupied)
        #expect((error as? CocoaError)?.code.rawValue == 516)
        #expect(try Data(contentsOf: occupied) == Data("already here".utf8))
        #expect(first.error?.isDownloadedFileMoveError == true && first.error?.destinationURL == occupied)

        let missing = directory.appendingPathComponent("no/such/dir/file.bin")
        let second = await Session().download("\(server.base)/bytes/10", to: { _, _ in (missing, []) }).serializingDownloadedFileURL()
            .response
        guard case .downloadedFileMoveFailed(let error, _, _) = second.error else {
            Issue.record("unexpected \(String(describing: second.error))")
            return
        }
        #expect((error as? CocoaError)?.code.rawValue == 4)
        #expect(second.error?.description.contains("No such file or directory") == true)
    }

    @Test("a multipart upload's Content-Type, with its boundary, is on request.request")
    func multipartContentTypeOnRequest() async throws {
        let server = try httpbin()
        let form = MultipartFormData(boundary: "tinyfire.test.boundary")
        form.append(Data("value".utf8), withName: "field")
        let request = Session().upload(multipartFormData: form, to: "\(server.base)/post")
        _ = await request.serializingData().response
        #expect(request.request?.headers["Content-Type"] == "multipart/form-data; boundary=tinyfire.test.boundary")
        #expect(request.uploadable != nil)
    }

    @Test("a URL without scheme or host, and file:// URLs (asked for or redirected to), fail as invalidURL before any transfer")
    func invalidAndFileURLs() async throws {
        let server = try httpbin()
        let secret = FileManager.default.temporaryDirectory.appendingPathComponent("tf-secret-\(UUID().uuidString)")
        try Data("do not read".utf8).write(to: secret)
        defer { try? FileManager.default.removeItem(at: secret) }
        for target in ["invalid", secret.absoluteString] {
            let response = await Session().request(target).serializingData().response
            guard case .invalidURL = response.error else {
                Issue.record("\(target): unexpected \(String(describing: response.error))")
                continue
            }
            #expect(response.error?.isInvalidURLError == true)
            // Refused before any name lookup or connection.
            #expect(response.data == nil && response.metrics?.nameLookup == nil && response.metrics?.connect == nil)
            #expect(response.metrics?.remoteAddress == nil)
        }
        let redirected = await Session().request("\(server.base)/redirect-to?url=\(secret.absoluteString)").serializingData().response
        #expect(redirected.error != nil)
        #expect(redirected.data.map { String(decoding: $0, as: UTF8.self) } != "do not read")
    }

    /// Counts applies and refreshes; every refreshed credential still requires a refresh.
    final class NeverFreshAuthenticator: Authenticator {
        let applies = Atomic<Int>(0)
        let refreshes = Atomic<Int>(0)

        func apply(_ credential: BasicCredential, to urlRequest: inout URLRequest) {
            applies.add(1, ordering: .relaxed)
            urlRequest.headers.update(.authorization(username: "user", password: credential.password))
        }

        func refresh(
            _ credential: BasicCredential, for session: Session,
            completion: @escaping @Sendable (Result<BasicCredential, any Error>) -> Void
        ) {
            refreshes.add(1, ordering: .relaxed)
            completion(.success(BasicCredential(password: "refreshed", expired: true)))
        }

        func didRequest(_ urlRequest: URLRequest, with response: HTTPURLResponse, failDueToAuthenticationError error: any Error) -> Bool {
            response.statusCode == 401
        }

        func isRequest(_ urlRequest: URLRequest, authenticatedWith credential: BasicCredential) -> Bool { true }
    }

    @Test("AuthenticationInterceptor: a refresh that yields a credential still needing one ends in excessiveRefresh from the adapt path")
    func excessiveRefreshFromAdapt() async throws {
        let server = try httpbin()
        let authenticator = NeverFreshAuthenticator()
        let interceptor = AuthenticationInterceptor(
            authenticator: authenticator, credential: BasicCredential(password: "old", expired: true),
            refreshWindow: .init(interval: 30, maximumAttempts: 1))
        let request = Session().request("\(server.base)/get", interceptor: interceptor)
        let response = await request.validate().serializingData().response
        guard case .requestAdaptationFailed(let underlying) = response.error else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect(underlying as? AuthenticationError == .excessiveRefresh)
        #expect(authenticator.refreshes.load(ordering: .relaxed) == 1)
        #expect(authenticator.applies.load(ordering: .relaxed) == 0)
        #expect(response.request?.headers["Authorization"] == nil)
        #expect(response.metrics == nil && request.retryCount == 0)
    }

    @Test("Basic auth with wrong credentials: a 401 with no body gives nil data, as Alamofire's")
    func wrongCredentialsNilData() async throws {
        let server = try httpbin()
        let response = await Session().request("\(server.base)/basic-auth/user/password")
            .authenticate(username: "user", password: "wrong")
            .serializingData(emptyResponseCodes: [200, 204, 205, 401]).response
        #expect(response.response?.statusCode == 401)
        #expect(response.data == nil)
    }
}
