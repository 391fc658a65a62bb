import Dispatch
import Foundation
import Synchronization
import Testing
import TinyFireFoundation

@testable import TinyFire

/// The last differences Alamofire 5.12's own test suite found, each tried as Alamofire's
/// documentation and tests meet it, against httpbin where a server is needed.
@Suite("Alamofire: the last gaps its own tests found", .serialized, .timeLimit(.minutes(2)))
struct AlamofireGapTests {
    @Test(
        "a multipart upload's uploadable is .data once encoded in memory, .file(_, shouldRemove: true) once spilled; the spill file goes when it ends"
    )
    func multipartUploadable() async throws {
        let server = try httpbin()
        func form(_ form: MultipartFormData) {
            form.append(Data("français".utf8), withName: "french")
            form.append(Data("日本語".utf8), withName: "japanese")
        }
        let inMemory = Session().upload(multipartFormData: form, to: "\(server.base)/post", usingThreshold: .max)
        let memoryResponse = await inMemory.serializingData().response
        #expect(memoryResponse.error == nil)
        guard case .data(let data)? = inMemory.uploadable else {
            Issue.record("uploadable \(String(describing: inMemory.uploadable))")
            return
        }
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains("name=\"french\"") && text.contains("日本語"), "\(text)")
        #expect(inMemory.request?.headers.value(for: "Content-Type")?.hasPrefix("multipart/form-data; boundary=") == true)

        let spilled = Session().upload(multipartFormData: form, to: "\(server.base)/post", usingThreshold: 0)
        let spilledResponse = await spilled.serializingData().response
        #expect(spilledResponse.error == nil)
        guard case .file(let url, let shouldRemove)? = spilled.uploadable else {
            Issue.record("uploadable \(String(describing: spilled.uploadable))")
            return
        }
        #expect(shouldRemove)
        #expect(!FileManager.default.fileExists(atPath: url.path), "the spill file outlived the request")

        // A form that cannot be encoded: no uploadable, as Alamofire's.
        let missing = Session().upload(
            multipartFormData: { $0.append(URL(filePath: "/nonexistent/tinyfire.bin"), withName: "file") }, to: "\(server.base)/post")
        let missingResponse = await missing.serializingData().response
        #expect(missingResponse.error != nil)
        #expect(missing.uploadable == nil)
    }

    @Test("cancel() from a stream handler after the body ended completes as explicitlyCancelled, by the stream and by its token")
    func cancelAfterBodyEnded() async throws {
        let server = try httpbin()
        for byToken in [false, true] {
            let request = Session().streamRequest("\(server.base)/bytes/1")
            let handlerQueue = DispatchQueue(label: "stream-handler")
            let completion = await withCheckedContinuation { (done: CheckedContinuation<DataStreamRequest.Completion, Never>) in
                request.responseStream(on: handlerQueue) { stream in
                    switch stream.event {
                    case .stream:
                        // The transfer is over before the handler cancels: the body has ended.
                        let deadline = ContinuousClock.now + .seconds(10)
                        while !request.isFinished && ContinuousClock.now < deadline { usleep(1000) }
                        if byToken { stream.token.cancel() } else { stream.cancel() }
                    case .complete(let end):
                        done.resume(returning: end)
                    }
                }
            }
            #expect(completion.error?.isExplicitlyCancelledError == true, "token \(byToken): \(String(describing: completion.error))")
            #expect(request.isCancelled)
        }
    }

    @Test(
        "URLEncodedFormEncoder: a class that encodes its superclass by hand, with superEncoder() and superEncoder(forKey:), as Alamofire's")
    func superEncoders() throws {
        class Base: Encodable {
            let one = "one"
            let two = 2
        }
        final class ManuallyEncoded: Base {
            let four = [1, 2, 3]
            let five = ["a": "a", "b": "b"]
            enum CodingKeys: String, CodingKey { case four, five }
            override func encode(to encoder: any Encoder) throws {
                var keyed = encoder.container(keyedBy: CodingKeys.self)
                try keyed.encode(four, forKey: .four)
                try keyed.encode(five, forKey: .five)
                var superContainer = keyed.superEncoder().container(keyedBy: CodingKeys.self)
                try superContainer.encode(one, forKey: .four)
                var keyedSuper = keyed.superEncoder(forKey: .four).container(keyedBy: CodingKeys.self)
                try keyedSuper.encode(two, forKey: .five)
                var unkeyed = keyed.nestedUnkeyedContainer(forKey: .four)
                var unkeyedSuper = unkeyed.superEncoder().container(keyedBy: CodingKeys.self)
                try unkeyedSuper.encode(one, forKey: .four)
            }
        }
        let expected = "five%5Ba%5D=a&five%5Bb%5D=b&four%5Bfive%5D=2&four%5Bfour%5D=one"
        #expect(try URLEncodedFormEncoder().encode(ManuallyEncoded()) as String == expected)
        #expect(try URLEncodedFormEncoder(arrayEncoding: .indexInBrackets).encode(ManuallyEncoded()) as String == expected)
    }

    @Test("URLEncoding(boolEncoding: .literal) writes booleans as words and leaves numbers numbers, NSNumber 0 and 1 too")
    func literalBoolsAndNumbers() throws {
        let parameters: [String: Any] = [
            "a": 1, "b": 0, "c": 1.0, "d": 0.0,
            "e": NSNumber(value: 1), "f": NSNumber(value: 0), "g": NSNumber(value: 1.0), "h": NSNumber(value: 0.0),
            "i": true, "j": false, "k": NSNumber(value: true), "l": NSNumber(value: false),
        ]
        let request = try URLEncoding(boolEncoding: .literal).encode(
            URLRequest(url: URL(string: "https://example.com/")!), with: parameters)
        #expect(request.url?.query == "a=1&b=0&c=1&d=0&e=1&f=0&g=1&h=0&i=true&j=false&k=true&l=false")
        // JSON too: an NSNumber 1 is a number, an NSNumber true a boolean.
        let json = try JSONEncoding.default.encode(
            URLRequest(url: URL(string: "https://example.com/")!, method: .post),
            with: ["n": NSNumber(value: 1), "b": NSNumber(value: true)])
        let text = String(decoding: json.httpBody ?? Data(), as: UTF8.self)
        #expect(text.contains("\"n\":1") && text.contains("\"b\":true"), "\(text)")
    }

    @Test("URLEncodedFormEncoder(allowedCharacters:) escapes what the set leaves out")
    func allowedCharacters() throws {
        var allowed = CharacterSet.afURLQueryAllowed
        allowed.remove(charactersIn: "?/")
        #expect(try URLEncodedFormEncoder(allowedCharacters: allowed).encode(["allowed": "?/"]) as String == "allowed=%3F%2F")
        #expect(
            try URLEncodedFormEncoder(allowedCharacters: .afURLQueryAllowed).encode(["allowed": "?/ é"]) as String == "allowed=?/%20%C3%A9")
    }

    @Test("a multipart file part from a URL that is not a file's is bodyPartURLInvalid, naming it")
    func nonFileURLPart() throws {
        let form = MultipartFormData()
        let url = URL(string: "https://example.com/image.jpg")!
        form.append(url, withName: "image")
        do {
            _ = try form.encode()
            Issue.record("encoded")
        } catch {
            #expect(error.asTinyFireError?.isBodyPartURLInvalid == true, "\(error)")
            #expect(error.asTinyFireError?.url == url)
        }
    }

    @Test("a content-type validation failure lists the acceptable types sorted, for a request and a download")
    func sortedAcceptableTypes() async throws {
        let server = try httpbin()
        let types = [
            "image/tiff", "image/jpeg", "image/gif", "image/png", "image/ico", "image/x-icon", "image/bmp", "image/x-bmp",
            "image/x-xbitmap", "image/x-ms-bmp", "image/x-win-bitmap", "application/octet-stream", "image/jp2", "image/jpg",
        ]
        let data = await Session().request("\(server.base)/xml").validate(contentType: types).serializingData().response
        #expect(data.error?.acceptableContentTypes == types.sorted())
        let download = await Session().download("\(server.base)/xml").validate(contentType: types).serializingDownloadedFileURL()
            .response
        #expect(download.error?.acceptableContentTypes == types.sorted())
        #expect(types.sorted().first == "application/octet-stream")
    }

    @Test("ConnectionLostRetryPolicy: retryableURLErrorCodes is [.networkConnectionLost], no status codes")
    func connectionLostCodes() {
        let policy = ConnectionLostRetryPolicy()
        #expect(policy.retryableURLErrorCodes == [.networkConnectionLost])
        #expect(policy.retryableHTTPStatusCodes.isEmpty)
        let custom = ConnectionLostRetryPolicy(
            retryLimit: 3, exponentialBackoffBase: 4, exponentialBackoffScale: 0.25, retryableHTTPMethods: [.delete, .get])
        #expect(custom.retryableURLErrorCodes == [.networkConnectionLost] && custom.retryLimit == 3)
        #expect(RetryPolicy(retryableURLErrorCodes: [.timedOut]).retryableTransferFailures == [.timedOut])
        #expect(RetryPolicy().retryableURLErrorCodes == RetryPolicy.defaultRetryableURLErrorCodes)
    }

    @Test("a stream part that ends before its announced length: the underlying error is UnexpectedInputStreamLength")
    func unexpectedStreamLength() throws {
        let form = MultipartFormData()
        form.append(
            DataByteStream(Data(repeating: 7, count: 10)), withLength: 2000,
            headers: ["Content-Disposition": "form-data; name=\"part\"; filename=\"part.bin\""])
        do {
            _ = try form.encode()
            Issue.record("encoded")
        } catch {
            let short = error.asTinyFireError?.underlyingError as? TinyFireError.UnexpectedInputStreamLength
            #expect(short == TinyFireError.UnexpectedInputStreamLength(bytesExpected: 2000, bytesRead: 10), "\(error)")
            #expect(error.asTinyFireError?.isInputStreamReadFailed == true)
        }
    }

    @Test("a DataTask made inside a Swift task that is already cancelled cancels its request, awaited or not (5.12)")
    func madeInCancelledTask() async throws {
        let silent = try HostileServer.neverAnswering()
        let made = Mutex<(DataRequest?, DownloadRequest?, DataRequest?)>((nil, nil, nil))
        let task = Task {
            while !Task.isCancelled { try? await Task.sleep(for: .milliseconds(5)) }
            let data = Session().request(silent.base)
            _ = data.serializingData()
            let download = Session().download(silent.base)
            _ = download.serializingDownloadedFileURL()
            let kept = Session().request(silent.base)
            _ = kept.serializingData(automaticallyCancelling: false)
            made.withLock { $0 = (data, download, kept) }
        }
        task.cancel()
        await task.value
        let (data, download, kept) = made.withLock { $0 }
        #expect(data?.isCancelled == true)
        #expect(download?.isCancelled == true)
        #expect(kept?.isCancelled == false)
        kept?.cancel()
    }

    struct GiveUp: Error {}

    @Test("a retrier's doNotRetryWithError after a serializer failure is requestRetryFailed, even for a TinyFireError")
    func serializerRetryErrorWrapped() async throws {
        let server = try httpbin()
        let retrier = Retrier { _, _, _, completion in
            completion(.doNotRetryWithError(TinyFireError.invalidURL(url: "/invalid/url/2", reason: "the retrier says")))
        }
        // The transfer succeeds; decoding the HTML fails, and the retrier refuses with its error.
        let response = await Session(interceptor: retrier).request("\(server.base)/html")
            .serializingDecodable([String: String].self).response
        guard case .requestRetryFailed(let retryError, let original) = response.error else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect((retryError as? TinyFireError)?.isInvalidURLError == true)
        #expect((original as? TinyFireError)?.isResponseSerializationError == true)
    }
}
