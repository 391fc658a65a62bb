import Foundation
import Synchronization
import Testing

@testable import TinyFire

/// httpbin's answer to a multipart POST.
struct MultipartEcho: Decodable {
    let form: [String: FormValue]
    let files: [String: String]
    let headers: [String: String]
}

@Suite("Multipart and stream uploads", .serialized)
struct MultipartTests {
    /// A fresh, empty directory for one test's temporary files.
    func scratchDirectory(_ name: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-mp-\(getpid())-\(name)")
        try? FileManager.default.removeItem(at: url)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    func contents(of directory: URL) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
    }

    func textFile(_ text: String, named name: String, in directory: URL) throws -> URL {
        let url = directory.appendingPathComponent(name)
        try Data(text.utf8).write(to: url)
        return url
    }

    @Test("encode() lays out boundaries, escaped names, file names and MIME types byte for byte")
    func encodingBytes() throws {
        let directory = try scratchDirectory("encode")
        let file = try textFile("a,b\n1,2\n", named: "readings.csv", in: directory)
        let form = MultipartFormData(boundary: "b0")
        form.append(Data("fw-1.2".utf8), withName: "version")
        form.append(Data("x".utf8), withName: "we\"ird\r\nname", fileName: "a\"b.txt", mimeType: "text/plain")
        form.append(file, withName: "log")
        form.append(DataByteStream(Data("stream!".utf8)), withLength: 7, name: "s", fileName: "s.bin", mimeType: "application/x-test")
        let expected =
            "--b0\r\nContent-Disposition: form-data; name=\"version\"\r\n\r\nfw-1.2"
            + "\r\n--b0\r\nContent-Disposition: form-data; name=\"we%22ird%0D%0Aname\"; filename=\"a%22b.txt\"\r\n"
            + "Content-Type: text/plain\r\n\r\nx"
            + "\r\n--b0\r\nContent-Disposition: form-data; name=\"log\"; filename=\"readings.csv\"\r\nContent-Type: text/csv\r\n\r\na,b\n1,2\n"
            + "\r\n--b0\r\nContent-Disposition: form-data; name=\"s\"; filename=\"s.bin\"\r\nContent-Type: application/x-test\r\n\r\nstream!"
            + "\r\n--b0--\r\n"
        #expect(form.contentLength == UInt64(expected.utf8.count))
        #expect(String(decoding: try form.encode(), as: UTF8.self) == expected)
        #expect(form.contentType == "multipart/form-data; boundary=b0")
        #expect(MultipartFormData().boundary.hasPrefix("tinyfire.boundary."))
        #expect(MIMEType.forPathExtension("JPG") == "image/jpeg" && MIMEType.forPathExtension("xyz") == "application/octet-stream")

        let out = directory.appendingPathComponent("written.bin")
        let again = MultipartFormData(boundary: "b1")
        again.append(Data("v".utf8), withName: "k")
        try again.writeEncodedData(to: out)
        #expect(try Data(contentsOf: out) == Data("--b1\r\nContent-Disposition: form-data; name=\"k\"\r\n\r\nv\r\n--b1--\r\n".utf8))
        #expect(throws: TinyFireError.self) { try again.writeEncodedData(to: out) }
    }

    @Test("a small form is encoded in memory and httpbin /post sees every field and file")
    func inMemoryUpload() async throws {
        let server = try httpbin()
        let directory = try scratchDirectory("memory")
        let file = try textFile("line one\nline two\n", named: "boot.log", in: directory)
        let spill = try scratchDirectory("memory-spill")
        let request = Session().upload(
            multipartFormData: { form in
                form.append(Data("42".utf8), withName: "device")
                form.append(Data("ok".utf8), withName: "status")
                form.append(file, withName: "log")
            }, to: "\(server.base)/post")
        let echo = try await request.validate().serializingDecodable(MultipartEcho.self).value
        #expect(echo.form == ["device": .one("42"), "status": .one("ok")])
        #expect(echo.files == ["log": "line one\nline two\n"])
        #expect(echo.headers["Content-Type"]?.hasPrefix("multipart/form-data; boundary=tinyfire.boundary.") == true)
        #expect(request.multipartTemporaryFile == nil)
        #expect(contents(of: spill).isEmpty)
    }

    /// A form above a 1 KiB threshold: a stream part, a data part and a 300 KiB file part.
    func largeForm(spillingInto spill: URL, file: URL) -> MultipartFormData {
        let form = MultipartFormData(temporaryDirectory: spill)
        form.append(
            DataByteStream(Data(repeating: 0x41, count: 5000)), withLength: 5000, name: "sensor", fileName: "a.txt", mimeType: "text/plain")
        form.append(Data("abc".utf8), withName: "note")
        form.append(file, withName: "capture")
        return form
    }

    @Test("above the threshold the body spills to a temporary file that exists during the upload and is gone after")
    func spillSuccess() async throws {
        let server = try httpbin()
        let spill = try scratchDirectory("spill-ok")
        let text = String(repeating: "0123456789abcdef", count: 300 * 64)
        let file = try textFile(text, named: "capture.txt", in: try scratchDirectory("spill-ok-src"))
        let form = largeForm(spillingInto: spill, file: file)
        let seenDuringUpload = Mutex<[String]>([])
        let request = Session().upload(multipartFormData: form, to: "\(server.base)/post", usingThreshold: 1024)
        request.uploadProgress { _ in
            seenDuringUpload.withLock { if $0.isEmpty { $0 = self.contents(of: spill) } }
        }
        let echo = try await request.validate().serializingDecodable(MultipartEcho.self).value
        #expect(echo.files["sensor"] == String(repeating: "A", count: 5000))
        #expect(echo.files["capture"] == text)
        #expect(echo.form["note"] == .one("abc"))
        #expect(echo.headers["Content-Length"] == "\(form.contentLength)")
        let during = seenDuringUpload.withLock { $0 }
        #expect(during.count == 1 && during.first?.hasPrefix("TinyFire-multipart-") == true)
        // The file part was not copied: the spill file holds headers, the stream and the data part.
        #expect(request.multipartTemporaryFile == nil)
        #expect(contents(of: spill).isEmpty, "temporary file left behind: \(contents(of: spill))")
    }

    @Test("the temporary file is removed when the upload fails and when it is cancelled")
    func spillFailureAndCancel() async throws {
        let spill = try scratchDirectory("spill-fail")
        let file = try textFile(String(repeating: "x", count: 100_000), named: "c.txt", in: try scratchDirectory("spill-fail-src"))
        // Nothing listens on this port: the connection is refused.
        let refused = await Session().upload(
            multipartFormData: largeForm(spillingInto: spill, file: file), to: "http://127.0.0.1:\(freePort())/post",
            usingThreshold: 1024
        ).serializingData().response
        #expect(refused.error?.transferError != nil)
        #expect(contents(of: spill).isEmpty)

        // A server that reads the head and never answers: cancel mid-request.
        let silent = try HostileServer(script: { connection in
            _ = connection.readRequest()
            connection.sleep(5)
        })
        defer { silent.stop() }
        let request = Session().upload(
            multipartFormData: largeForm(spillingInto: spill, file: file), to: "http://127.0.0.1:\(silent.port)/post",
            usingThreshold: 1024)
        let sawFile = Mutex(false)
        request.uploadProgress { _ in
            if !self.contents(of: spill).isEmpty { sawFile.withLock { $0 = true } }
            request.cancel()
        }
        let cancelled = await request.serializingData().response
        #expect(cancelled.error?.isExplicitlyCancelledError == true)
        #expect(sawFile.withLock { $0 })
        #expect(contents(of: spill).isEmpty, "temporary file left behind after cancel")
    }

    @Test("an unreadable file part fails the upload with an error naming it, before anything is sent")
    func missingPart() async throws {
        let server = try httpbin()
        let request = Session().upload(
            multipartFormData: { $0.append(URL(filePath: "/nonexistent/capture.pcap"), withName: "capture") },
            to: "\(server.base)/post")
        let response = await request.serializingData().response
        // As Alamofire's: the form could not be encoded, because a part is not reachable (the
        // error as it is, not wrapped in createUploadableFailed), and the file system's error
        // (CocoaError 260, ENOENT underneath) says why.
        guard case .multipartEncodingFailed(.bodyPartFileNotReachableWithError(let url, let underlying)) = response.error else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect(url.path == "/nonexistent/capture.pcap")
        #expect((underlying as? CocoaError)?.code == .fileReadNoSuchFile)
        #expect(((underlying as? CocoaError)?.underlying as? POSIXError)?.code == .ENOENT)
        #expect(request.uploadable == nil)
        #expect(response.error?.description.contains("/nonexistent/capture.pcap: No such file or directory") == true)
        #expect(request.metrics == nil)
    }

    @Test("a stream part shorter than announced fails with a length mismatch")
    func shortStreamPart() async throws {
        let server = try httpbin()
        let spill = try scratchDirectory("short")
        let form = MultipartFormData(temporaryDirectory: spill)
        form.append(DataByteStream(Data(count: 10)), withLength: 2000, name: "s", fileName: "s", mimeType: "text/plain")
        let response = await Session().upload(multipartFormData: form, to: "\(server.base)/post", usingThreshold: 100)
            .serializingData().response
        // The form could not be encoded, because a part was short.
        guard case .multipartEncodingFailed(.bodyPartLengthMismatch(_, 2000, 10)) = response.error else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect(contents(of: spill).isEmpty)
    }

    @Test("a stream of unknown length goes chunked, read through a pipe, and arrives whole")
    func streamUpload() async throws {
        let server = try httpbin()
        var generator = SplitMix64(seed: 7)
        let payload = Data((0..<(300 * 1024 + 5)).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let writeEnd = fds[1]
        let writer = Thread {
            payload.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    // Small, slow writes: the reader sees many short reads.
                    let n = write(writeEnd, bytes.baseAddress! + offset, min(10_000, bytes.count - offset))
                    if n <= 0 { break }
                    offset += n
                    usleep(1000)
                }
            }
            close(writeEnd)
        }
        writer.start()
        let request = Session().upload(
            FileDescriptorByteStream(fileDescriptor: fds[0], closeWhenDone: true), to: "\(server.base)/anything", method: .put)
        let progress = request.uploadProgress()
        let echo = try await request.validate().serializingDecodable(Echo.self).value
        #expect(echo.headers["Transfer-Encoding"] == "chunked")
        #expect(echo.headers["Content-Length"] == nil)
        let sent = try #require(echo.data.flatMap { $0.split(separator: ",").last }.flatMap { Data(base64Encoded: String($0)) })
        #expect(sent == payload)
        var last: TransferProgress?
        for await value in progress { last = value }
        #expect(last == TransferProgress(completedUnitCount: Int64(payload.count), totalUnitCount: Int64(payload.count)))
    }

    /// A stream whose read fails after some bytes.
    final class FailingStream: UploadByteStream, @unchecked Sendable {
        struct Broken: Error, CustomStringConvertible { var description: String { "sensor unplugged" } }
        var calls = 0
        func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
            calls += 1
            if calls > 2 { throw Broken() }
            buffer.initializeMemory(as: UInt8.self, repeating: 0x42)
            return buffer.count
        }
    }

    @Test("a failing stream ends the upload with its message; a retried stream upload says it cannot be replayed")
    func streamFailures() async throws {
        let server = try httpbin()
        let failed = await Session().upload(FailingStream(), to: "\(server.base)/anything").serializingData().response
        guard case .requestBodyReadFailed(let message)? = failed.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: failed.error))")
            return
        }
        #expect(message.contains("sensor unplugged"))

        let retried = await Session().upload(
            DataByteStream(Data("once".utf8)), to: "\(server.base)/status/503", method: .put, interceptor: RetryPolicy(retryLimit: 1)
        ).validate().serializingData().response
        guard case .requestBodyReadFailed(let replay)? = retried.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: retried.error))")
            return
        }
        #expect(replay.contains("cannot be sent again"))
    }
}
