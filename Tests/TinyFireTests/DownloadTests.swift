import Foundation
import HTTPTypes
import Synchronization
import Testing

@testable import TinyFire

@Suite("Downloads and resume", .serialized)
struct DownloadTests {
    func scratch(_ name: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-dl-\(getpid())-\(name)")
        try? FileManager.default.removeItem(at: url)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    func contents(of directory: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
    }

    /// A token that makes a request's access-log lines findable.
    func token() -> String { "t=" + UUID().uuidString }

    /// A fast retry policy for tests.
    var quickRetry: RetryPolicy { RetryPolicy(retryLimit: 2, exponentialBackoffScale: 0.01) }

    @Test("a download cut at 40 % resumes on its own under the retry policy, fetching only the missing bytes")
    func automaticResume() async throws {
        let server = try nginx()
        let size = server.oneMiB.count
        let cut = size * 2 / 5
        let proxy = try CuttingProxy(upstreamPort: server.port, cut: .close(after: cut))
        defer { proxy.stop() }
        let directory = try scratch("auto")
        let target = directory.appendingPathComponent("fw.bin")
        let tag = token()
        let progress = Mutex<[TransferProgress]>([])
        let request = Session().download("http://127.0.0.1:\(proxy.port)/1m.bin?\(tag)", interceptor: quickRetry) { _, _ in
            (target, [])
        }
        request.downloadProgress { value in progress.withLock { $0.append(value) } }
        let response = await request.validate().downloadResponse
        #expect(response.error == nil, "\(String(describing: response.error))")
        #expect(try Data(contentsOf: target) == server.oneMiB)
        #expect(request.retryCount == 1)
        #expect(response.response?.status.code == 206)
        // The second attempt carried only the missing bytes, and asked for exactly them.
        #expect(request.allMetrics.last?.responseBodyBytes == UInt64(size - cut))
        let heads = proxy.heads
        #expect(heads.count == 2)
        #expect(heads.last?.contains("Range: bytes=\(cut)-") == true)
        #expect(heads.last?.contains("If-Range: \"") == true)
        let lines = server.logLines(containing: tag)
        #expect(lines.contains { $0.contains(" 206 \(size - cut) \"bytes=\(cut)-\"") }, "\(lines)")
        // Progress counts the bytes already on disk: it never goes back, and ends at the total.
        let values = progress.withLock { $0 }
        #expect(values.last == TransferProgress(completedUnitCount: Int64(size), totalUnitCount: Int64(size)))
        let afterCut = values.drop { $0.completedUnitCount < Int64(cut) }
        #expect(zip(afterCut, afterCut.dropFirst()).allSatisfy { $0.completedUnitCount <= $1.completedUnitCount })
        #expect(contents(of: directory) == ["fw.bin"], "partial files left: \(contents(of: directory))")
    }

    @Test("without a retrier the failure carries resume data; download(resumingWith:) finishes the file from a fresh URL")
    func manualResume() async throws {
        let server = try nginx()
        let size = server.oneMiB.count
        let cut = size * 2 / 5
        let proxy = try CuttingProxy(upstreamPort: server.port, cut: .close(after: cut))
        defer { proxy.stop() }
        let directory = try scratch("manual")
        let target = directory.appendingPathComponent("fw.bin")
        let failed = await Session().download("http://127.0.0.1:\(proxy.port)/1m.bin") { _, _ in (target, []) }.downloadResponse
        #expect(failed.error?.transferError != nil)
        #expect(!FileManager.default.fileExists(atPath: target.path), "a cut download must not appear complete")
        let data = try #require(failed.resumeData)
        let resume = try DownloadResumeData(data: data)
        #expect(resume.bytesOnDisk == UInt64(cut))
        #expect(resume.totalLength == UInt64(size))
        #expect(resume.entityTag?.hasPrefix("\"") == true)
        #expect(try Data(contentsOf: URL(filePath: resume.partialFile)) == server.oneMiB.prefix(cut))

        let tag = token()
        let progress = Mutex<[TransferProgress]>([])
        let request = Session().download(resumingWith: data, from: "\(server.base)/1m.bin?\(tag)") { _, _ in (target, []) }
        request.downloadProgress { value in progress.withLock { $0.append(value) } }
        let resumed = await request.validate().downloadResponse
        #expect(resumed.error == nil, "\(String(describing: resumed.error))")
        #expect(try Data(contentsOf: target) == server.oneMiB)
        #expect(request.metrics?.responseBodyBytes == UInt64(size - cut))
        #expect(progress.withLock { $0.first?.completedUnitCount ?? 0 } >= Int64(cut))
        #expect(!FileManager.default.fileExists(atPath: resume.partialFile))
        #expect(server.logLines(containing: tag).count == 1)
    }

    @Test("cancel(byProducingResumeData:) keeps the bytes received; resuming completes the file")
    func cancelWithResumeData() async throws {
        let server = try nginx()
        let size = server.oneMiB.count
        let cut = size * 2 / 5
        let proxy = try CuttingProxy(upstreamPort: server.port, cut: .stall(after: cut))
        defer { proxy.stop() }
        let directory = try scratch("cancel")
        let target = directory.appendingPathComponent("fw.bin")
        let request = Session().download("http://127.0.0.1:\(proxy.port)/1m.bin") { _, _ in (target, []) }
        let resumeData: Data? = await withCheckedContinuation { continuation in
            let once = Atomic<Bool>(false)
            request.downloadProgress { value in
                guard value.completedUnitCount >= Int64(cut), !once.exchange(true, ordering: .relaxed) else { return }
                request.cancel(byProducingResumeData: { continuation.resume(returning: $0) })
            }
            request.resume()
        }
        let data = try #require(resumeData)
        #expect(try DownloadResumeData(data: data).bytesOnDisk == UInt64(cut))
        #expect(request.resumeData == data)
        let resumed = await Session().download(resumingWith: data, from: "\(server.base)/1m.bin") { _, _ in (target, []) }
            .downloadResponse
        #expect(resumed.error == nil)
        #expect(try Data(contentsOf: target) == server.oneMiB)

        // A plain cancel() removes the partial file and produces no resume data.
        let stalling = try CuttingProxy(upstreamPort: server.port, cut: .stall(after: cut))
        defer { stalling.stop() }
        let plain = Session().download("http://127.0.0.1:\(stalling.port)/1m.bin") { _, _ in (directory.appendingPathComponent("b"), []) }
        let cancelledOnce = Atomic<Bool>(false)
        plain.downloadProgress { value in
            if value.completedUnitCount > 0, !cancelledOnce.exchange(true, ordering: .relaxed) { plain.cancel() }
        }
        let plainResponse = await plain.downloadResponse
        #expect(plainResponse.error?.isExplicitlyCancelledError == true)
        #expect(plainResponse.resumeData == nil)
        #expect(contents(of: directory) == ["fw.bin"])
    }

    @Test("maxReceiveBytesPerSecond (--limit-rate) holds a download back to the rate: 1 MiB at 512 KiB/s takes at least 1.5 s")
    func receiveRateLimit() async throws {
        let server = try nginx()
        let directory = try scratch("rate")
        // The lower bound is what a limit that works cannot beat: (1 MiB - one 128 KiB read
        // buffer) / 512 KiB/s = 1.75 s. How close the rate comes to the limit is measured in
        // bench/firmware.sh, not asserted here.
        let session = Session(configuration: SessionConfiguration(maxReceiveBytesPerSecond: 512 * 1024))
        let started = ContinuousClock.now
        let response = await session.download("\(server.base)/1m.bin") { _, _ in (directory.appendingPathComponent("out"), []) }
            .downloadResponse
        let elapsed = ContinuousClock.now - started
        #expect(response.error == nil)
        #expect(try Data(contentsOf: directory.appendingPathComponent("out")) == server.oneMiB)
        #expect(elapsed >= .milliseconds(1500), "1 MiB at 512 KiB/s took \(elapsed)")
    }

    /// Resume data for the first `count` bytes of `data`, written to a partial file.
    /// The strong ETag a server gives `url` now (from a HEAD request).
    func entityTag(of url: String) async throws -> String {
        let head = await Session().request(url, method: .head).serializingData(emptyRequestMethods: [.head]).response
        return try #require(head.response?.headerFields[.eTag])
    }

    func partial(of data: Data, count: Int, url: String, in directory: URL, entityTag: String? = nil, total: UInt64? = nil) throws
        -> Data
    {
        let path = directory.appendingPathComponent(".partial-\(count)").path
        try data.prefix(count).write(to: URL(filePath: path))
        return DownloadResumeData(
            url: URL(string: url)!, partialFile: path, bytesOnDisk: UInt64(count), entityTag: entityTag, totalLength: total
        ).data
    }

    @Test("a server that ignores Range sends the whole body again, which replaces the partial file")
    func serverIgnoresRange() async throws {
        let server = try nginx()
        let directory = try scratch("norange")
        let target = directory.appendingPathComponent("fw.bin")
        let data = try partial(
            of: server.oneMiB, count: 1000, url: "\(server.base)/norange/1m.bin", in: directory,
            entityTag: try await entityTag(of: "\(server.base)/norange/1m.bin"))
        let request = Session().download(resumingWith: data) { _, _ in (target, []) }
        let response = await request.validate().downloadResponse
        #expect(response.error == nil)
        #expect(response.response?.status.code == 200)
        #expect(try Data(contentsOf: target) == server.oneMiB)
        #expect(request.metrics?.responseBodyBytes == UInt64(server.oneMiB.count))
        #expect(contents(of: directory) == ["fw.bin"])
    }

    @Test("a 206 that stops before the announced end, or whose body is shorter than its range, is not a complete download")
    func shortRangesAreNotComplete() async throws {
        // Each answer continues a 100-byte partial file of a 1,000-byte resource, wrongly.
        let answers = [
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 100-199/1000\r\nContent-Length: 100\r\n\r\n"
                + String(repeating: "b", count: 100),
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 100-999/1000\r\nContent-Length: 500\r\n\r\n"
                + String(repeating: "b", count: 500),
        ]
        for (index, answer) in answers.enumerated() {
            let server = try HostileServer { client in
                client.readRequest()
                client.send(answer)
            }
            defer { server.stop() }
            let directory = try scratch("short-range-\(index)")
            let partial = directory.appendingPathComponent(".fw.bin.partial")
            try Data(repeating: 0x61, count: 100).write(to: partial)
            let target = directory.appendingPathComponent("fw.bin")
            let data = DownloadResumeData(
                url: URL(string: "\(server.base)/fw.bin")!, partialFile: partial.path, bytesOnDisk: 100, entityTag: "\"v1\"",
                totalLength: 1000
            ).data
            let response = await Session().download(resumingWith: data) { _, _ in (target, []) }.downloadResponse
            guard case .resumeRejected(let message) = response.error?.transferError?.reason else {
                Issue.record(
                    "answer \(index): \(String(describing: response.error)), file exists: \(FileManager.default.fileExists(atPath: target.path))"
                )
                continue
            }
            #expect(message.contains(index == 0 ? "would end short" : "spans 900"), "\(message)")
            #expect(!FileManager.default.fileExists(atPath: target.path), "a short file was moved into place")
            #expect(try Data(contentsOf: partial).count == 100, "the partial file was changed")
            #expect(response.resumeData != nil, "no resume data for a later attempt")
        }
    }

    @Test("a download is private (0600) while partial, then 0666 & ~umask like any new file")
    func fileModesFollowUmask() throws {
        let server = try nginx()
        let directory = try scratch("modes")
        let agent = try fireAgentPath()
        for (mask, expected) in [("077", 0o600), ("022", 0o644), ("002", 0o664)] {
            let output = directory.appendingPathComponent("out-\(mask).bin").path
            let result = try runCapturingOutput(
                "/bin/sh", ["-c", "umask \(mask); exec \"$0\" request -o \"$1\" \"$2\"", agent, output, "\(server.base)/1m.bin"])
            #expect(result.status == 0, "\(result.stderr)")
            let mode = try #require(try FileManager.default.attributesOfItem(atPath: output)[.posixPermissions] as? Int)
            #expect(mode == expected, "umask \(mask): mode \(String(mode, radix: 8))")
        }
        // While the body is still coming (a proxy that stalls half-way), even umask 000 leaves
        // the partial file readable by its owner only.
        let proxy = try CuttingProxy(upstreamPort: server.port, cut: .stall(after: 300_000))
        defer { proxy.stop() }
        let stalled = try ChildProcess(
            "/bin/sh",
            [
                "-c", "umask 000; exec \"$0\" request -o \"$1\" \"$2\"", agent, directory.appendingPathComponent("stalled.bin").path,
                "http://127.0.0.1:\(proxy.port)/1m.bin",
            ])
        defer { stalled.stop() }
        var partial: String?
        #expect(
            waitUntil {
                partial = contents(of: directory).first { $0.hasPrefix(".stalled.bin.") }; return partial != nil
            })
        let name = try #require(partial)
        let mode = try #require(
            try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)[.posixPermissions] as? Int)
        #expect(mode == 0o600, "partial file mode \(String(mode, radix: 8))")
    }

    @Test("a resource that changed between attempts comes back whole (If-Range), never spliced")
    func resourceChanged() async throws {
        let server = try nginx()
        let name = "changing-\(getpid()).bin"
        let path = server.root + "/" + name
        var generator = SplitMix64(seed: 99)
        let first = Data((0..<300_000).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        try first.write(to: URL(filePath: path))
        let proxy = try CuttingProxy(upstreamPort: server.port, cut: .close(after: 120_000))
        defer { proxy.stop() }
        let directory = try scratch("changed")
        let target = directory.appendingPathComponent("fw.bin")
        let failed = await Session().download("http://127.0.0.1:\(proxy.port)/\(name)") { _, _ in (target, []) }.downloadResponse
        let data = try #require(failed.resumeData)
        // A new version: different bytes, different length, a newer modification time.
        let second = Data((0..<250_000).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        try await Task.sleep(for: .milliseconds(1100))
        try second.write(to: URL(filePath: path))
        let request = Session().download(resumingWith: data, from: "\(server.base)/\(name)") { _, _ in (target, [.removePreviousFile]) }
        let response = await request.validate().downloadResponse
        #expect(response.error == nil)
        #expect(response.response?.status.code == 200)
        #expect(try Data(contentsOf: target) == second)
    }

    @Test("a 416 for a complete partial file fetches its last byte again; a 416 for a shrunk resource starts over")
    func rangeNotSatisfiable() async throws {
        let server = try nginx()
        let directory = try scratch("416")
        let target = directory.appendingPathComponent("fw.bin")
        let size = server.oneMiB.count
        // Complete, length unknown to the resume data: 416, then `bytes=size-1-`.
        let complete = try partial(
            of: server.oneMiB, count: size, url: "\(server.base)/1m.bin", in: directory,
            entityTag: try await entityTag(of: "\(server.base)/1m.bin"))
        let tag = token()
        let request = Session().download(resumingWith: complete, from: "\(server.base)/1m.bin?\(tag)") { _, _ in (target, []) }
        let response = await request.validate().downloadResponse
        #expect(response.error == nil, "\(String(describing: response.error))")
        #expect(try Data(contentsOf: target) == server.oneMiB)
        #expect(request.retryCount == 0)
        let lines = server.logLines(containing: tag, expected: 2)
        #expect(lines.count == 2 && lines[0].contains(" 416 ") && lines[1].contains(" 206 1 \"bytes=\(size - 1)-\""), "\(lines)")

        // Longer than the resource now is: 416, then the whole resource without Range.
        let longer = server.oneMiB + Data(count: 500)
        let shrunk = try partial(
            of: longer, count: longer.count, url: "\(server.base)/1m.bin", in: directory,
            entityTag: try await entityTag(of: "\(server.base)/1m.bin"))
        let again = await Session().download(resumingWith: shrunk) { _, _ in (target, [.removePreviousFile]) }.validate()
            .downloadResponse
        #expect(again.error == nil)
        #expect(again.response?.status.code == 200)
        #expect(try Data(contentsOf: target) == server.oneMiB)
    }

    @Test("a 206 whose Content-Range does not continue the partial file restarts from zero")
    func wrongContentRange() async throws {
        let body = Data((0..<2000).map { UInt8($0 % 251) })
        let server = try HostileServer(script: { client in
            let head = client.readRequest()
            if head.contains("Range:") {
                client.send("HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-99/2000\r\nContent-Length: 100\r\nETag: \"v1\"\r\n\r\n")
                client.send(body.prefix(100))
            } else {
                client.send("HTTP/1.1 200 OK\r\nContent-Length: 2000\r\nETag: \"v1\"\r\n\r\n")
                client.send(body)
            }
        })
        defer { server.stop() }
        let directory = try scratch("wrongrange")
        let target = directory.appendingPathComponent("fw.bin")
        let data = try partial(of: body, count: 500, url: "\(server.base)/fw", in: directory, entityTag: "\"v1\"")
        let request = Session().download(resumingWith: data) { _, _ in (target, []) }
        let response = await request.validate().downloadResponse
        #expect(response.error == nil, "\(String(describing: response.error))")
        #expect(try Data(contentsOf: target) == body)
        #expect(request.allMetrics.count == 2)
        #expect(contents(of: directory) == ["fw.bin"])
    }

    @Test("resume data without ETag or Last-Modified starts from zero; a response without either makes no resume data")
    func noValidatorNoResume() async throws {
        let server = try nginx()
        let directory = try scratch("novalidator")
        let target = directory.appendingPathComponent("fw.bin")
        let data = try partial(of: server.oneMiB, count: 5000, url: "\(server.base)/1m.bin", in: directory)
        let request = Session().download(resumingWith: data) { _, _ in (target, []) }
        let response = await request.validate().downloadResponse
        #expect(response.error == nil)
        #expect(response.response?.status.code == 200)
        #expect(request.httpRequest?.headerFields[HTTPField.Name("Range")!] == nil)
        #expect(try Data(contentsOf: target) == server.oneMiB)
        #expect(contents(of: directory) == ["fw.bin"], "the unprovable partial file is removed")

        // A body cut short by a server that names no validator: nothing to resume from.
        let cutting = try HostileServer(script: { client in
            client.readRequest()
            client.send("HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n")
            client.send(Data(count: 700))
            client.close()
        })
        defer { cutting.stop() }
        let cut = await Session().download("\(cutting.base)/fw") { _, _ in (target, [.removePreviousFile]) }.downloadResponse
        #expect(cut.error != nil)
        #expect(cut.resumeData == nil)
        #expect(contents(of: directory) == ["fw.bin"])
    }

    @Test("a partial file that does not have its recorded length is not trusted: the download starts from zero")
    func partialLengthMismatch() async throws {
        let server = try nginx()
        let directory = try scratch("mismatch")
        let target = directory.appendingPathComponent("fw.bin")
        let data = try partial(
            of: server.oneMiB, count: 5000, url: "\(server.base)/1m.bin", in: directory,
            entityTag: try await entityTag(of: "\(server.base)/1m.bin"))
        let resume = try DownloadResumeData(data: data)
        try Data(server.oneMiB.prefix(4000)).write(to: URL(filePath: resume.partialFile))
        let request = Session().download(resumingWith: data) { _, _ in (target, []) }
        let response = await request.validate().downloadResponse
        #expect(response.error == nil)
        #expect(request.request?.headers["Range"] == nil)
        #expect(request.httpRequest?.headerFields[HTTPField.Name("Range")!] == nil)
        #expect(try Data(contentsOf: target) == server.oneMiB)

        let broken = await Session().download(resumingWith: Data("{\"version\":9}".utf8)).downloadResponse
        guard case .downloadResumeFailed(.invalidResumeData) = broken.error else {
            Issue.record("unexpected \(String(describing: broken.error))")
            return
        }
    }

    @Test("httpbin /range/N resumes from resume data with its ETag")
    func httpbinRange() async throws {
        let server = try httpbin()
        let expected = Data((0..<1024).map { UInt8(ascii: "a") + UInt8($0 % 26) })
        let directory = try scratch("httpbin")
        let target = directory.appendingPathComponent("r.bin")
        let data = try partial(of: expected, count: 100, url: "\(server.base)/range/1024", in: directory, entityTag: "range1024")
        let request = Session().download(resumingWith: data) { _, _ in (target, []) }
        let response = await request.validate().downloadResponse
        #expect(response.error == nil, "\(String(describing: response.error))")
        #expect(response.response?.status.code == 206)
        #expect(request.metrics?.responseBodyBytes == 924)
        #expect(try Data(contentsOf: target) == expected)
    }

    @Test("a download that fails validation leaves the destination as it was and no partial file")
    func validationFailure() async throws {
        let server = try httpbin()
        let directory = try scratch("validation")
        let target = directory.appendingPathComponent("fw.bin")
        try Data("old firmware".utf8).write(to: target)
        let response = await Session().download("\(server.base)/status/404") { _, _ in (target, [.removePreviousFile]) }
            .validate().downloadResponse
        #expect(response.error?.responseCode == 404)
        #expect(try Data(contentsOf: target) == Data("old firmware".utf8))
        #expect(contents(of: directory) == ["fw.bin"])

        let typed = await Session().download("\(server.base)/json") { _, _ in (directory.appendingPathComponent("j"), []) }
            .validate(contentType: ["image/png"]).downloadResponse
        guard case .responseValidationFailed(.unacceptableContentType) = typed.error else {
            Issue.record("unexpected \(String(describing: typed.error))")
            return
        }
        #expect(contents(of: directory) == ["fw.bin"])
    }

    @Test("suggested destinations, responseURL and responseData on downloads")
    func destinationsAndSerializers() async throws {
        let server = try httpbin()
        let directory = try scratch("suggested")
        let url = "\(server.base)/response-headers?Content-Disposition=attachment%3B%20filename%3D%22..%2Fevil%2Ffw-2.bin%22"
        let named: DownloadResponse<URL, TinyFireError> = await withCheckedContinuation { continuation in
            Session().download(
                url, to: DownloadRequest.suggestedDownloadDestination(in: directory, options: [.createIntermediateDirectories])
            )
            .responseURL { continuation.resume(returning: $0) }
        }
        #expect(named.value == directory.appendingPathComponent("fw-2.bin"))
        let fallback = DownloadRequest.suggestedFilename(
            for: HTTPURLResponse(HTTPResponse(status: .ok)), url: URL(string: "http://x/a/b/.hidden"))
        #expect(fallback == "hidden")

        struct Args: Decodable { let args: [String: String] }
        let json: DownloadResponse<[String: String], TinyFireError> = await withCheckedContinuation { continuation in
            Session().download("\(server.base)/get?k=v").responseDecodable(of: Args.self) { response in
                continuation.resume(returning: response.map { $0.args })
            }
        }
        #expect(json.value == ["k": "v"])
        let data: DownloadResponse<Data, TinyFireError> = await withCheckedContinuation { continuation in
            Session().download("\(server.base)/bytes/300").responseData { continuation.resume(returning: $0) }
        }
        #expect(data.value?.count == 300)
        #expect(data.fileURL.map { FileManager.default.fileExists(atPath: $0.path) } == true)
    }
}

@Suite("fire-agent request: forms, resume, progress", .serialized)
struct TransferCLITests {
    @Test("-F sends fields and files as multipart; a missing file exits 26 naming it")
    func formUpload() throws {
        let server = try httpbin()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-cli-form-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("boot.log")
        try Data("kernel: ok\n".utf8).write(to: file)
        let result = try fireAgent(["request", "-F", "device=42", "-F", "log=@\(file.path);type=text/plain", "\(server.base)/post"])
        #expect(result.status == 0, "\(result.stderr)")
        let echo = try JSONDecoder().decode(MultipartEcho.self, from: result.stdout)
        #expect(echo.form == ["device": .one("42")])
        #expect(echo.files == ["log": "kernel: ok\n"])
        let missing = try fireAgent(["request", "-F", "log=@/nonexistent/x.log", "\(server.base)/post"])
        #expect(missing.status == 26 && missing.stderr.contains("/nonexistent/x.log"), "\(missing.stderr)")
        let both = try fireAgent(["request", "-F", "a=b", "-d", "x", "\(server.base)/post"])
        #expect(both.status == 3)
    }

    @Test("-C - continues a partial -o file with only the missing bytes; --progress prints plain lines off a terminal")
    func continueAt() async throws {
        let server = try nginx()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-cli-resume-\(getpid())")
        try? FileManager.default.removeItem(at: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let output = directory.appendingPathComponent("fw.bin")
        let cut = server.oneMiB.count * 2 / 5
        try server.oneMiB.prefix(cut).write(to: output)
        // What an interrupted -C - run leaves beside the file: the validator of its bytes.
        let head = await Session().request("\(server.base)/1m.bin", method: .head).serializingData(emptyRequestMethods: [.head])
            .response
        let etag = try #require(head.response?.headerFields[.eTag])
        let record = output.deletingLastPathComponent().appendingPathComponent(".fw.bin.fire-agent-resume").path
        DownloadResumeData(url: URL(string: server.base)!, partialFile: output.path, bytesOnDisk: 0, entityTag: etag)
            .writeDurably(to: record)
        let tag = "t=" + UUID().uuidString
        let result = try fireAgent(["request", "-C", "-", "--progress", "-o", output.path, "\(server.base)/1m.bin?\(tag)"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try Data(contentsOf: output) == server.oneMiB)
        let lines = server.logLines(containing: tag)
        #expect(lines.count == 1 && lines[0].contains(" 206 \(server.oneMiB.count - cut) \"bytes=\(cut)-\""), "\(lines)")
        #expect(result.stderr.contains("of 1.0 MiB (100%)"), "\(result.stderr)")
        #expect(access(record, F_OK) != 0, "the record goes with success")
        // Nothing to continue: an ordinary download.
        try FileManager.default.removeItem(at: output)
        let fresh = try fireAgent(["request", "-C", "-", "-o", output.path, "\(server.base)/1m.bin"])
        #expect(fresh.status == 0)
        #expect(try Data(contentsOf: output) == server.oneMiB)
        let noOutput = try fireAgent(["request", "-C", "-", "\(server.base)/1m.bin"])
        #expect(noOutput.status == 3 && noOutput.stderr.contains("-C - needs -o FILE"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["fw.bin"])
    }

    @Test("-C - never splices two versions: the validator of the partial file is kept beside it and sent in If-Range")
    func continueAtChangedFile() throws {
        let versionA = Data((0..<3000).map { UInt8($0 % 251) })
        let versionB = Data((0..<3000).map { UInt8(($0 * 7 + 3) % 253) })
        /// What the server serves now, and whether it cuts the next 200 short.
        struct State {
            var body: Data
            var tag: String
            var lastModifiedOnly = false
            var cutNext = true
            var requests: [String] = []
        }
        let state = Mutex(State(body: versionA, tag: "\"a\""))
        let server = try HostileServer(script: { client in
            let head = client.readRequest()
            let (body, tag, dateOnly, cut) = state.withLock { now in
                now.requests.append(head)
                defer { now.cutNext = false }
                return (now.body, now.tag, now.lastModifiedOnly, now.cutNext)
            }
            let validator = dateOnly ? "Last-Modified: \(tag)" : "ETag: \(tag)"
            var range: Int?
            var ifRange: String?
            for line in head.split(separator: "\r\n") {
                let lower = line.lowercased()
                if lower.hasPrefix("range: bytes=") { range = Int(line.dropFirst(13).dropLast()) }
                if lower.hasPrefix("if-range:") { ifRange = line.dropFirst(9).trimmingCharacters(in: .whitespaces) }
            }
            // RFC 9110 §13.1.5: a Range without If-Range, or with the current validator, is served.
            if let offset = range, ifRange == nil || ifRange == tag {
                client.send(
                    "HTTP/1.1 206 Partial Content\r\n\(validator)\r\nContent-Range: bytes \(offset)-\(body.count - 1)/\(body.count)\r\n"
                        + "Content-Length: \(body.count - offset)\r\n\r\n")
                client.send(body.suffix(from: offset))
            } else {
                client.send("HTTP/1.1 200 OK\r\n\(validator)\r\nContent-Length: \(body.count)\r\n\r\n")
                client.send(cut ? body.prefix(1200) : body)
            }
            client.close()
        })
        defer { server.stop() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-cli-splice-\(getpid())")
        try? FileManager.default.removeItem(at: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let output = directory.appendingPathComponent("fw.bin")
        let record = directory.appendingPathComponent(".fw.bin.fire-agent-resume").path
        let args = ["request", "-C", "-", "--max-redirs", "0", "-o", output.path, "\(server.base)/fw.bin"]

        // Cut short: 1,200 bytes of version A stay, with A's ETag recorded beside them.
        let first = try fireAgent(args)
        #expect(first.status != 0)
        #expect(try Data(contentsOf: output) == versionA.prefix(1200))
        #expect(DownloadResumeData.read(from: record)?.entityTag == "\"a\"")

        // The file changed on the server: If-Range carries A's tag, so B comes whole.
        state.withLock {
            $0.body = versionB; $0.tag = "\"b\""
        }
        let second = try fireAgent(args)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(try Data(contentsOf: output) == versionB, "two versions spliced")
        let asked = state.withLock { $0.requests.last ?? "" }
        #expect(asked.contains("Range: bytes=1200-") && asked.contains("If-Range: \"a\""), "\(asked)")
        #expect(access(record, F_OK) != 0)

        // Unchanged on the server: only the missing bytes come (206), Last-Modified as validator.
        try FileManager.default.removeItem(at: output)
        state.withLock {
            $0.lastModifiedOnly = true; $0.tag = "Sat, 21 Nov 2026 10:00:00 GMT"; $0.cutNext = true
        }
        #expect(try fireAgent(args).status != 0)
        #expect(DownloadResumeData.read(from: record)?.lastModified == "Sat, 21 Nov 2026 10:00:00 GMT")
        let third = try fireAgent(args)
        #expect(third.status == 0, "\(third.stderr)")
        #expect(try Data(contentsOf: output) == versionB)
        let resumed = state.withLock { $0.requests.last ?? "" }
        #expect(resumed.contains("If-Range: Sat, 21 Nov 2026 10:00:00 GMT"), "\(resumed)")

        // Bytes nobody recorded a validator for: no Range at all, the whole file again.
        try Data(versionA.prefix(1000)).write(to: output)
        let fourth = try fireAgent(args)
        #expect(fourth.status == 0, "\(fourth.stderr)")
        #expect(fourth.stderr.contains("no validator recorded"), "\(fourth.stderr)")
        #expect(try Data(contentsOf: output) == versionB)
        #expect(!(state.withLock { $0.requests.last ?? "" }).contains("Range:"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["fw.bin"])
    }

    @Test("--progress on a terminal draws one bar redrawn in place (run under script(1) for a pty)")
    func progressBarOnTerminal() throws {
        let server = try nginx()
        let script = try #require(which("script"), "script(1) (util-linux) is needed to give fire-agent a terminal")
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-bar-\(getpid()).bin")
        let result = try runCapturingOutput(
            script, ["-qec", "\(try fireAgentPath()) request --progress -o \(output.path) \(server.base)/1m.bin", "/dev/null"])
        let text = String(decoding: result.stdout, as: UTF8.self)
        #expect(result.status == 0)
        #expect(text.contains("\r↓ ["), "\(text.debugDescription)")
        #expect(text.contains("] 100% 1.0 MiB / 1.0 MiB"), "\(text.debugDescription)")
        #expect(!text.contains("fire-agent: download"), "plain lines on a terminal: \(text.debugDescription)")
        #expect(try Data(contentsOf: output) == server.oneMiB)
    }
}

extension DownloadTests {
    @Test(
        "fire-agent request --max-filesize exits 63 and leaves no file (announced or growing, to a file or stdout); --limit-rate and --max-filesize take curl's sizes only"
    )
    func requestSizeOptions() throws {
        let server = try nginx()
        let directory = try scratch("cli-sizes")
        let output = directory.appendingPathComponent("out.bin").path
        let refused = try fireAgent(["request", "--max-filesize", "1000k", "-o", output, "\(server.base)/1m.bin"])
        #expect(refused.status == 63 && refused.stderr.contains("would exceed its limit of 1024000 bytes"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: output))
        // gzip'd text comes chunked, without a length: the limit stops it as it grows.
        let growing = try fireAgent(["request", "--max-filesize", String(server.text.count / 2), "-o", output, "\(server.base)/text.txt"])
        #expect(growing.status == 63 && growing.stderr.contains("would exceed its limit"), "\(growing.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
        // To standard output too (curl's rule): refused before a byte is written.
        let piped = try fireAgent(["request", "--max-filesize", "1000k", "\(server.base)/1m.bin"])
        #expect(piped.status == 63 && piped.stdout.isEmpty, "\(piped.stderr)")
        // At the limit exactly: fine.
        let fits = try fireAgent(["request", "--max-filesize", "1M", "--limit-rate", "64M", "-o", output, "\(server.base)/1m.bin"])
        #expect(fits.status == 0, "\(fits.stderr)")
        #expect(try Data(contentsOf: URL(filePath: output)) == server.oneMiB)
        for bad in [["--limit-rate", "0"], ["--limit-rate", "fast"], ["--max-filesize", "1T"]] {
            let usage = try fireAgent(["request"] + bad + ["\(server.base)/hello.txt"])
            #expect(usage.status == 64 && usage.stderr.contains(bad[0]), "\(bad): \(usage.stderr)")
        }
    }
}
