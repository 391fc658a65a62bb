import Dispatch
import Foundation
import HTTPTypes
import Synchronization
import Testing
import TinyFireFoundation

@testable import TinyFire

/// Alamofire API that code written for it still missed: the 4.x-style `Parameters` with a
/// `ParameterEncoding` and `responseJSON` (deprecated in Alamofire 5, shipped and documented),
/// `HTTPURLResponse`, `RequestSetup`, download serializers, request-level interceptors,
/// `InputStream` uploads, AFError's accessors. Written from Alamofire's documentation and
/// against httpbin where a server answers.
@Suite("Alamofire legacy and 5.12 API")
struct AlamofireLegacyAPITests {
    static let base = URLRequest(url: URL(string: "https://example.com/path?existing=1")!)

    // MARK: URLEncoding

    @Test("URLEncoding: the query for GET/HEAD/DELETE, a form body otherwise; keys sorted, nested keys, arrays, booleans")
    func urlEncoding() throws {
        let parameters: Parameters = [
            "foo": "bar", "baz": ["a", 1], "qux": ["x": 1, "y": 2, "z": 3], "flag": true, "space": "a b&c=d", "half": 0.5, "one": 1.0,
        ]
        let get = try URLEncoding.default.encode(Self.base, with: parameters)
        #expect(
            get.url?.absoluteString
                == "https://example.com/path?existing=1&baz%5B%5D=a&baz%5B%5D=1&flag=1&foo=bar&half=0.5&one=1&qux%5Bx%5D=1&qux%5By%5D=2&qux%5Bz%5D=3&space=a%20b%26c%3Dd"
        )
        #expect(get.httpBody == nil)

        var post = Self.base
        post.method = .post
        let form = try URLEncoding.default.encode(post, with: ["b": "2", "a": "1"])
        #expect(form.url == Self.base.url)
        #expect(form.httpBody == Data("a=1&b=2".utf8))
        #expect(form.headers["Content-Type"] == "application/x-www-form-urlencoded; charset=utf-8")

        var typed = post
        typed.headers.update(.contentType("application/vnd.custom"))
        #expect(try URLEncoding.httpBody.encode(typed, with: ["a": 1]).headers["Content-Type"] == "application/vnd.custom")
        #expect(try URLEncoding.queryString.encode(post, with: ["a": 1]).url?.query == "existing=1&a=1")

        let arrays = URLEncoding(destination: .queryString, arrayEncoding: .noBrackets, boolEncoding: .literal)
        #expect(try arrays.encode(Self.base, with: ["k": [1, 2], "b": false]).url?.query == "existing=1&b=false&k=1&k=2")
        let indexed = URLEncoding(arrayEncoding: .indexInBrackets)
        #expect(try indexed.encode(Self.base, with: ["k": ["x", "y"]]).url?.query == "existing=1&k%5B0%5D=x&k%5B1%5D=y")
        let custom = URLEncoding(arrayEncoding: .custom { key, index in "\(key).\(index)" })
        #expect(try custom.encode(Self.base, with: ["k": ["x"]]).url?.query == "existing=1&k.0=x")

        // Empty parameters leave the URL alone; nil leaves the whole request alone.
        #expect(try URLEncoding.default.encode(Self.base, with: [:]).url == Self.base.url)
        #expect(try URLEncoding.default.encode(post, with: nil).httpBody == nil)
        #expect(URLEncoding.default.escape("é /?") == "%C3%A9%20/?")
    }

    @Test("URLEncoding into the query of a request without a URL fails with parameterEncodingFailed(.missingURL)")
    func urlEncodingMissingURL() {
        var request = Self.base
        request.url = nil
        do {
            _ = try URLEncoding.queryString.encode(request, with: ["a": 1])
            Issue.record("encoded without a URL")
        } catch {
            guard case .parameterEncodingFailed(.missingURL) = error as? TinyFireError else {
                Issue.record("unexpected \(error)")
                return
            }
            #expect((error as? TinyFireError)?.isParameterEncodingError == true)
        }
    }

    // MARK: JSONEncoding

    @Test("JSONEncoding: compact and pretty-printed JSON, keys sorted, escapes, null, nested values; Content-Type only when absent")
    func jsonEncoding() throws {
        let parameters: Parameters = [
            "name": "tiny \"fire\"/\n", "count": 3, "ratio": 0.25, "whole": 2.0, "on": true, "none": String?.none as Any,
            "list": [1, "two", ["three": 3]], "unicode": "é✓",
        ]
        let compact = try JSONEncoding.default.encode(Self.base, with: parameters)
        #expect(
            String(decoding: compact.httpBody ?? Data(), as: UTF8.self)
                == #"{"count":3,"list":[1,"two",{"three":3}],"name":"tiny \"fire\"\/\n","none":null,"on":true,"ratio":0.25,"unicode":"é✓","whole":2}"#
        )
        #expect(compact.headers["Content-Type"] == "application/json")

        let pretty = try JSONEncoding.prettyPrinted.encode(Self.base, with: ["b": [1, 2], "a": [:] as [String: Any]])
        #expect(String(decoding: pretty.httpBody ?? Data(), as: UTF8.self) == "{\n  \"a\" : {},\n  \"b\" : [\n    1,\n    2\n  ]\n}")

        let slashes = try JSONEncoding(options: .withoutEscapingSlashes).encode(Self.base, with: ["u": "a/b"])
        #expect(slashes.httpBody == Data(#"{"u":"a/b"}"#.utf8))

        var typed = Self.base
        typed.headers.update(.contentType("application/merge-patch+json"))
        #expect(try JSONEncoding.default.encode(typed, with: ["a": 1]).headers["Content-Type"] == "application/merge-patch+json")

        let array = try JSONEncoding.default.encode(Self.base, withJSONObject: [["id": 1], ["id": 2]])
        #expect(array.httpBody == Data(#"[{"id":1},{"id":2}]"#.utf8))
        #expect(try JSONEncoding.default.encode(Self.base, withJSONObject: nil).httpBody == nil)
    }

    @Test(
        "JSONEncoding refuses what is not JSON with an error naming the value and its path",
        arguments: [
            ("class", "$.when is a Date"), ("nan", "$.ratio is NaN or infinite"), ("deep", "nested deeper than 512 levels"),
            ("fragment", "top-level value is a String"),
        ])
    func jsonEncodingRefuses(kind: String, message: String) {
        let value: Any
        switch kind {
        case "class": value = ["when": Date(timeIntervalSince1970: 0)] as [String: Any]
        case "nan": value = ["ratio": Double.nan] as [String: Any]
        case "deep":
            var nested: Any = 1
            for _ in 0..<600 { nested = [nested] }
            value = ["deep": nested] as [String: Any]
        default: value = "just a string"
        }
        do {
            _ = try JSONEncoding.default.encode(Self.base, withJSONObject: value)
            Issue.record("encoded \(kind)")
        } catch {
            guard case .parameterEncodingFailed(.jsonEncodingFailed(let underlying)) = error as? TinyFireError else {
                Issue.record("unexpected \(error)")
                return
            }
            #expect(underlying is JSONEncoding.Error)
            #expect("\(error)".contains(message), "\(error)")
        }
        // A fragment is fine when allowed.
        if kind == "fragment" {
            let allowed = try? JSONEncoding(options: .fragmentsAllowed).encode(Self.base, withJSONObject: value)
            #expect(allowed?.httpBody == Data(#""just a string""#.utf8))
        }
    }

    @Test("request(_:method:parameters:encoding:) and download(…encoding:…) send the parameters to httpbin")
    func parametersAgainstHttpbin() async throws {
        let server = try httpbin()
        let parameters: Parameters = ["foo": "bar", "baz": ["a", 1], "qux": ["x": 1]]
        let json = await Session().request("\(server.base)/post", method: .post, parameters: parameters, encoding: JSONEncoding.default)
            .serializingDecodable(Echo.self).response
        #expect(json.value?.json == ["foo": .string("bar"), "baz": .array([.string("a"), .number(1)]), "qux": .object(["x": .number(1)])])

        let query = await Session().request("\(server.base)/get", parameters: ["foo": "bar", "n": [1, 2]])
            .serializingDecodable(Echo.self).response
        #expect(query.value?.url == "\(server.base)/get?foo=bar&n[]=1&n[]=2")

        let form = await Session().request("\(server.base)/post", method: .post, parameters: ["a": "1", "b": true]).serializingDecodable(
            Echo.self
        )
        .response
        #expect(form.value?.form == ["a": .string("1"), "b": .string("1")])

        let download = await Session().download("\(server.base)/get", parameters: ["d": 4], encoding: URLEncoding.default)
            .serializingDecodable(Echo.self).response
        #expect(download.value?.args == ["d": .string("4")])

        // A runtime-built [String: Any], as Alamofire 4's documents write it.
        var built: [String: Any] = [:]
        built["when"] = "now"
        let runtime = await Session().request("\(server.base)/get", parameters: built).serializingDecodable(Echo.self).response
        #expect(runtime.value?.args == ["when": .string("now")])
    }

    struct Echo: Decodable, Sendable {
        let url: String?
        let args: [String: JSONScalar]?
        let form: [String: JSONScalar]?
        let json: [String: JSONScalar]?
        let data: String?
        let files: [String: String]?
    }

    indirect enum JSONScalar: Decodable, Equatable, Sendable {
        case string(String)
        case number(Double)
        case bool(Bool)
        case array([JSONScalar])
        case object([String: JSONScalar])
        case null

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if container.decodeNil() {
                self = .null
            } else if let value = try? container.decode(Bool.self) {
                self = .bool(value)
            } else if let value = try? container.decode(Double.self) {
                self = .number(value)
            } else if let value = try? container.decode(String.self) {
                self = .string(value)
            } else if let value = try? container.decode([JSONScalar].self) {
                self = .array(value)
            } else {
                self = .object(try container.decode([String: JSONScalar].self))
            }
        }
    }

    // MARK: responseJSON

    @Test("responseJSON: an httpbin document as [String: Any], with nested values, numbers and booleans")
    func responseJSON() async throws {
        let server = try httpbin()
        let response = await withCheckedContinuation { continuation in
            Session().request("\(server.base)/get", parameters: ["q": "1"]).responseJSON { continuation.resume(returning: $0) }
        }
        let object = try #require(response.value as? [String: Any])
        #expect(object["url"] as? String == "\(server.base)/get?q=1")
        #expect((object["args"] as? [String: Any])?["q"] as? String == "1")
        #expect((object["headers"] as? [String: Any])?["Host"] != nil)

        let download = await withCheckedContinuation { continuation in
            Session().download("\(server.base)/json").responseJSON { continuation.resume(returning: $0) }
        }
        #expect((download.value as? [String: Any])?["slideshow"] != nil)
    }

    @Test("JSONResponseSerializer reads fragments, numbers, null and empty bodies as JSONSerialization does")
    func jsonSerializer() throws {
        let serializer = JSONResponseSerializer()
        func read(_ text: String, _ serializer: JSONResponseSerializer = JSONResponseSerializer()) throws -> any Sendable {
            try serializer.serialize(request: nil, response: nil, data: Data(text.utf8), error: nil)
        }
        #expect(try read("12") as? Int == 12)
        #expect(try read("\"text\"") as? String == "text")
        #expect(try read("1.5e3") as? Double == 1500)
        #expect(try read("18446744073709551616") as? Double == 18_446_744_073_709_551_616)
        #expect(try read(#"{"a":1,"a":2}"#) as? [String: Int] == ["a": 2])
        let withNull = try #require(try read(#"{"n":null,"list":[true,false]}"#) as? [String: Any])
        #expect(withNull["list"] as? [Bool] == [true, false])
        #expect(withNull["n"].map { "\($0)" } == "nil")
        #expect(try read("\u{FEFF}[1]") as? [Int] == [1])

        let strict = JSONResponseSerializer(options: [])
        #expect(throws: TinyFireError.self) { try read("12", strict) }

        // Empty: allowed for 204 and HEAD, refused otherwise.
        let noContent = HTTPURLResponse(url: URL(string: "http://x/")!, statusCode: 204, httpVersion: nil, headerFields: nil)
        let empty = try serializer.serialize(request: nil, response: noContent, data: nil, error: nil)
        #expect("\(empty)" == "nil")
        do {
            _ = try serializer.serialize(request: nil, response: nil, data: Data(), error: nil)
            Issue.record("an empty 200 body was accepted")
        } catch {
            guard case .responseSerializationFailed(.inputDataNilOrZeroLength) = error as? TinyFireError else {
                Issue.record("unexpected \(error)")
                return
            }
        }
        do {
            _ = try read("{\"a\": tru}")
            Issue.record("invalid JSON was accepted")
        } catch {
            guard case .responseSerializationFailed(.jsonSerializationFailed(let underlying)) = error as? TinyFireError else {
                Issue.record("unexpected \(error)")
                return
            }
            #expect("\(underlying)".contains("line 1, column 7"), "\(underlying)")
        }
        let deep = String(repeating: "[", count: 600) + String(repeating: "]", count: 600)
        #expect(throws: TinyFireError.self) { try read(deep) }
    }

    // MARK: HTTPURLResponse

    @Test("response.response is an HTTPURLResponse: the final URL after redirects, Foundation's members, a description")
    func httpURLResponse() async throws {
        let server = try httpbin()
        let response = await Session().request("\(server.base)/redirect/2").serializingData().response
        let http = try #require(response.response)
        #expect(http.url?.absoluteString == "\(server.base)/get")
        #expect(http.statusCode == 200 && http.status == .ok)
        #expect(http.mimeType == "application/json")
        #expect(http.value(forHTTPHeaderField: "content-type") == "application/json")
        #expect(http.allHeaderFields["Content-Type"] as? String == "application/json")
        #expect(http.expectedContentLength == Int64(response.data?.count ?? -2))
        #expect(http.description.contains("URL: \(server.base)/get") && http.description.contains("Status Code: 200"))
        #expect(http.headers["Content-Type"] == "application/json")

        let made = try #require(
            HTTPURLResponse(
                url: URL(string: "http://x/f.txt")!, statusCode: 200, httpVersion: "HTTP/1.1",
                headerFields: ["Content-Type": "text/plain; charset=\"UTF-8\""]))
        #expect(made.textEncodingName == "utf-8" && made.mimeType == "text/plain" && made.expectedContentLength == -1)
        #expect(made.suggestedFilename == "f.txt")
        #expect(HTTPURLResponse(url: URL(string: "http://x/")!, statusCode: 42, httpVersion: nil, headerFields: nil) == nil)
    }

    // MARK: RequestSetup

    @Test("Session(requestSetup: .eager) builds and adapts a request before resume(); .lazy waits for it")
    func requestSetup() async throws {
        let server = try httpbin()
        let adapted = Atomic<Int>(0)
        let adapter = Adapter { request, _, completion in
            adapted.add(1, ordering: .relaxed)
            completion(.success(request))
        }
        let eager = Session(startRequestsImmediately: false, requestSetup: .eager)
        let request = eager.request("\(server.base)/get", interceptor: adapter)
        // The initial request is recorded before the adapter runs (as in Alamofire): wait for
        // the adapted one, the second entry, rather than for the first.
        #expect(await eventually(within: .seconds(10)) { request.requests.count == 2 })
        #expect(request.cURLDescription().contains("\(server.base)/get"))
        #expect(adapted.load(ordering: .relaxed) == 1)
        #expect(request.metrics == nil && request.state == .initialized)
        let response = await request.resume().serializingData().response
        #expect(response.response?.statusCode == 200)
        #expect(adapted.load(ordering: .relaxed) == 1)

        let lazy = Session(startRequestsImmediately: false)
        let later = lazy.request("\(server.base)/get")
        try await Task.sleep(for: .milliseconds(100))
        #expect(later.request == nil)
        #expect(await later.resume().serializingData().response.response?.statusCode == 200)

        // Eager and cancelled before resume: nothing is sent.
        let cancelled = eager.request("\(server.base)/get")
        cancelled.cancel()
        let cancelledResponse = await cancelled.serializingData().response
        #expect(cancelledResponse.error?.isExplicitlyCancelledError == true && cancelledResponse.metrics == nil)
    }

    // MARK: Download serializers

    /// A download serializer that never reads the file: its size from the file system.
    struct FileSize: DownloadResponseSerializerProtocol {
        func serializeDownload(request: URLRequest?, response: HTTPURLResponse?, fileURL: URL?, error: (any Error)?) throws -> Int {
            if let error { throw error }
            guard let fileURL else { throw TinyFireError.responseSerializationFailed(reason: .inputFileNil) }
            return (try FileManager.default.attributesOfItem(atPath: fileURL.path)[.size] as? Int) ?? -1
        }
    }

    @Test("custom DownloadResponseSerializerProtocol serializers, URLResponseSerializer, and serializeDownload on ResponseSerializers")
    func downloadSerializers() async throws {
        let server = try nginx()
        let size = await withCheckedContinuation { continuation in
            Session().download("\(server.base)/1m.bin").response(responseSerializer: FileSize()) { continuation.resume(returning: $0) }
        }
        #expect(size.value == 1_048_576)
        let url = await withCheckedContinuation { continuation in
            Session().download("\(server.base)/hello.txt").response(responseSerializer: .url) { continuation.resume(returning: $0) }
        }
        #expect(url.value.flatMap { try? String(contentsOf: $0, encoding: .utf8) } == "hello\n")

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("tf-serialize-\(UUID().uuidString)")
        try Data("text".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        #expect(try StringResponseSerializer().serializeDownload(request: nil, response: nil, fileURL: file, error: nil) == "text")
        #expect(throws: TinyFireError.self) {
            try DataResponseSerializer().serializeDownload(request: nil, response: nil, fileURL: nil, error: nil)
        }
        do {
            _ = try DataResponseSerializer().serializeDownload(
                request: nil, response: nil, fileURL: file.appendingPathExtension("gone"), error: nil)
            Issue.record("read a missing file")
        } catch {
            guard case .responseSerializationFailed(.inputFileReadFailed) = error as? TinyFireError else {
                Issue.record("unexpected \(error)")
                return
            }
        }

        // The read is bounded by the downloading session's maxInMemoryBodyBytes.
        var small = SessionConfiguration.default
        small.maxInMemoryBodyBytes = 1024
        let bounded = await Session(configuration: small).download("\(server.base)/1m.bin").serializingData().response
        #expect(bounded.error?.isResponseSerializationError == true)
        #expect("\(bounded.error.map { "\($0)" } ?? "")".contains("maxInMemoryBodyBytes (1024)"))
    }

    @Test("DownloadResponse map, tryMap, mapError and tryMapError")
    func downloadResponseMaps() {
        struct Failed: Error {}
        let success = DownloadResponse<Int, TinyFireError>(
            request: nil, response: nil, fileURL: URL(filePath: "/tmp/x"), metrics: nil, result: .success(2))
        #expect(success.map { $0 * 2 }.value == 4)
        #expect(success.tryMap { _ -> Int in throw Failed() }.error is Failed)
        #expect(success.tryMap { $0 + 1 }.value == 3)
        #expect(success.map { $0 }.fileURL == URL(filePath: "/tmp/x"))
        let failure = DownloadResponse<Int, TinyFireError>(
            request: nil, response: nil, fileURL: nil, metrics: nil, result: .failure(.explicitlyCancelled))
        #expect(failure.mapError { _ in Failed() }.error != nil)
        #expect(failure.tryMapError { _ -> Failed in throw CancellationError() }.error is CancellationError)
        #expect(failure.tryMapError { _ in Failed() }.error is Failed)
    }

    // MARK: AFError

    @Test("AFError's accessors: URLs, content types, encodings, kinds")
    func afErrorAccessors() async throws {
        let server = try httpbin()
        let refused = await Session().request("\(server.base)/xml").validate(contentType: ["application/json"]).serializingData().response
        let error: AFError = try #require(refused.error)
        #expect(error.acceptableContentTypes == ["application/json"] && error.responseContentType == "application/xml")
        #expect(error.isResponseValidationError && error.asAFError != nil)

        let invalid: AFError = .invalidURL(url: "not a url", reason: "no scheme")
        #expect(invalid.isInvalidURLError && invalid.urlConvertible as? String == "not a url")
        let encoding: AFError = .responseSerializationFailed(reason: .stringSerializationFailed(encoding: .utf8))
        #expect(encoding.failedStringEncoding == .utf8)
        let directory = URL(filePath: "/tmp")
        let multipart: AFError = .multipartEncodingFailed(reason: .bodyPartFileIsDirectory(at: directory))
        #expect(multipart.url == directory && multipart.isMultipartEncodingError)
        let form = MultipartFormData()
        do {
            try form.writeEncodedData(to: URL(string: "https://example.com/form")!)
            Issue.record("wrote to a web URL")
        } catch {
            guard case .multipartEncodingFailed(.outputStreamURLInvalid) = error else {
                Issue.record("unexpected \(error)")
                return
            }
        }
        #expect(AFInfo.version == HTTPHeaders.tinyFireVersion)
    }

    // MARK: URLConvertible

    struct Router: URLConvertible {
        struct Unknown: Error {}
        let path: String?
        func asURL() throws -> URL {
            guard let path else { throw Unknown() }
            return URL(string: path)!
        }
    }

    @Test("a URLConvertible written for Alamofire (untyped throws) works; its error fails the request as createURLRequestFailed")
    func untypedURLConvertible() async throws {
        let server = try httpbin()
        let ok = await Session().request(Router(path: "\(server.base)/get")).serializingData().response
        #expect(ok.response?.statusCode == 200)
        let failed = await Session().request(Router(path: nil)).serializingData().response
        guard case .createURLRequestFailed(let underlying) = failed.error else {
            Issue.record("unexpected \(String(describing: failed.error))")
            return
        }
        #expect(underlying is Router.Unknown)
        #expect(failed.error?.isCreateURLRequestError == true)
    }

    // MARK: Request-level interceptors

    @Test("adapt(using:), retry(using:) and interceptor(_:) on a request run after the session's interceptor")
    func requestLevelInterceptors() async throws {
        let server = try httpbin()
        let order = Recorder<String>()
        let sessionAdapter = Adapter { request, _, completion in
            order.append("session")
            var request = request
            request.headers.add(name: "X-Order", value: "session")
            completion(.success(request))
        }
        let session = Session(interceptor: sessionAdapter)
        let request = session.request("\(server.base)/status/500")
            .adapt(
                using: Adapter { request, _, completion in
                    order.append("request")
                    var request = request
                    request.headers.add(name: "X-Order", value: "request")
                    completion(.success(request))
                }
            )
            .retry(using: Retrier { request, _, _, completion in completion(request.retryCount < 2 ? .retry : .doNotRetry) })
            .interceptor(
                Interceptor(adapters: [
                    Adapter { request, _, completion in
                        order.append("added")
                        completion(.success(request))
                    }
                ]))
        let response = await request.serializingData().response
        #expect(request.retryCount == 2)
        #expect(response.response?.statusCode == 500)
        #expect(Array(order.all.prefix(3)) == ["session", "request", "added"])
        #expect(request.request?.headers["X-Order"] == "request")
    }

    // MARK: Smaller spellings

    @Test(
        "smaller spellings: .data/.string serializers, RetryResult.error, .connectionLostRetryPolicy(), .adapter/.retrier, description, afURLQueryAllowed, DateFormatter"
    )
    func smallerSpellings() async throws {
        let server = try httpbin()
        let request = Session().request("\(server.base)/get")
        #expect(request.description == "No request created yet.")
        let data = try await request.serializingResponse(using: .data).value
        #expect(!data.isEmpty)
        #expect(request.description == "GET \(server.base)/get (200)")
        let text = await Session().request("\(server.base)/encoding/utf8").serializingResponse(using: .string).result
        #expect((try? text.get())?.contains("∮") == true)
        let downloaded = await Session().download("\(server.base)/get").serializingDownload(using: .string).result
        #expect((try? downloaded.get())?.contains("/get") == true)

        struct Refused: Error {}
        #expect(RetryResult.doNotRetryWithError(Refused()).error is Refused)
        #expect(RetryResult.retry.error == nil && RetryResult.retryWithDelay(1).retryRequired && !RetryResult.doNotRetry.retryRequired)
        let policy: ConnectionLostRetryPolicy = .connectionLostRetryPolicy(retryLimit: 5)
        #expect(policy.retryLimit == 5)
        let interceptor = Interceptor(
            adapters: [.adapter { request, _, completion in completion(.success(request)) }],
            retriers: [.retrier { _, _, _, completion in completion(.doNotRetry) }])
        #expect(interceptor.adapters.count == 1 && interceptor.retriers.count == 1)

        #expect("a b/?&=[]".addingPercentEncoding(withAllowedCharacters: .afURLQueryAllowed) == "a%20b/?%26%3D%5B%5D")
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd"
        struct When: Encodable { let day: Date }
        let encoder = URLEncodedFormEncoder(dateEncoding: .formatted(formatter))
        let encoded: String = try encoder.encode(When(day: Date(timeIntervalSince1970: 86_400)))
        #expect(encoded == "day=1970-01-02")
    }

    @Test("AlamofireNotifications posts Request.didResumeNotification and the others to NotificationCenter")
    func notifications() async throws {
        let server = try httpbin()
        let seen = Recorder<(UUID, String)>()
        let observers = [
            Request.didResumeNotification, Request.didResumeTaskNotification, Request.didCompleteTaskNotification,
            Request.didFinishNotification,
        ].map { name in
            NotificationCenter.default.addObserver(forName: name, object: nil, queue: nil) { notification in
                if let request = notification.request { seen.append((request.id, name.rawValue)) }
            }
        }
        defer { observers.forEach(NotificationCenter.default.removeObserver) }
        let session = Session(eventMonitors: [AlamofireNotifications()])
        let request = session.request("\(server.base)/get")
        _ = await request.serializingData().response
        let mine = { seen.all.filter { $0.0 == request.id }.map(\.1) }
        #expect(await eventually(within: .seconds(10)) { mine().count == 4 })
        #expect(
            mine().map { $0.replacingOccurrences(of: "org.alamofire.notification.name.request.", with: "") }.sorted()
                == ["didCompleteTask", "didFinish", "didResume", "didResumeTask"])
    }

    // MARK: InputStream

    @Test("upload(_ stream: InputStream) and MultipartFormData.append(_ stream: InputStream) send the stream's bytes")
    func inputStreamUploads() async throws {
        let server = try httpbin()
        let bytes = Data((0..<200_000).map { UInt8($0 % 251) })
        let upload = await Session().upload(InputStream(data: bytes), to: "\(server.base)/anything", method: .put)
            .serializingDecodable(Echo.self).response
        #expect(
            upload.value?.data?.count == 200_000 * 4 / 3 + 40
                || upload.value?.data?.hasPrefix("data:application/octet-stream;base64,") == true)
        if let text = upload.value?.data, let comma = text.firstIndex(of: ",") {
            #expect(Data(base64Encoded: String(text[text.index(after: comma)...])) == bytes)
        } else {
            Issue.record("no body echoed: \(String(describing: upload.error))")
        }

        let form = await Session().upload(
            multipartFormData: { form in
                form.append(
                    InputStream(data: Data("streamed part".utf8)), withLength: 13, name: "part", fileName: "p.txt", mimeType: "text/plain")
            }, to: "\(server.base)/post"
        ).serializingDecodable(Echo.self).response
        #expect(form.value?.files == ["part": "streamed part"])
    }
}
