import Foundation
import Testing

@testable import TinyFire

@Suite("Uploads", .serialized)
struct UploadTests {
    /// A file of `count` random bytes in the temporary directory.
    func randomFile(_ count: Int) throws -> URL {
        var generator = SplitMix64(seed: UInt64(count))
        var bytes = [UInt8](repeating: 0, count: count)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: generator.next()) }
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-upload-\(getpid())-\(count).bin")
        try Data(bytes).write(to: url)
        return url
    }

    @Test("a file streams as the body, with Expect: 100-continue above the threshold, and progress to the end")
    func fileUpload() async throws {
        let server = try httpbin()
        let file = try randomFile(3 * 1024 * 1024 + 17)
        let expected = try Data(contentsOf: file)
        let request = Session().upload(file, to: "\(server.base)/anything", method: .put)
        let progress = request.uploadProgress()
        let echo = try await request.validate().serializingDecodable(Echo.self).value
        #expect(echo.method == "PUT")
        #expect(echo.headers["Expect"] == "100-continue")
        #expect(echo.headers["Content-Length"] == "\(expected.count)")
        let sent = try #require(echo.data.flatMap { $0.split(separator: ",").last }.flatMap { Data(base64Encoded: String($0)) })
        #expect(sent == expected)
        var last: TransferProgress?
        for await value in progress { last = value }
        #expect(last == TransferProgress(completedUnitCount: Int64(expected.count), totalUnitCount: Int64(expected.count)))
        #expect(request.metrics!.requestBytesSent > UInt64(expected.count))
    }

    @Test("a server that refuses the upload early (413) gets no body with Expect, and a clean error either way")
    func earlyRefusal() async throws {
        let server = try nginx()
        let file = try randomFile(2 * 1024 * 1024)
        let expecting = Session().upload(file, to: "\(server.base)/small-upload")
        let refused = await expecting.validate().serializingData().response
        #expect(refused.error?.responseCode == 413)
        #expect(expecting.metrics!.requestBytesSent < 64 * 1024, "the body was sent although the server refused it first")

        let eager = Session(configuration: SessionConfiguration(expectContinueThreshold: nil))
        let withoutExpect = await eager.upload(file, to: "\(server.base)/small-upload").validate().serializingData().response
        #expect(withoutExpect.error?.responseCode == 413)
        // The connection the cut-short upload used is not reused.
        let next = await eager.request("\(server.base)/hello.txt").serializingData().response
        #expect(next.value == Data("hello\n".utf8))
    }

    @Test("a missing upload file is an error naming it; nothing is sent")
    func missingFile() async throws {
        let server = try nginx()
        let response = await Session().upload(URL(filePath: "/nonexistent/firmware.bin"), to: "\(server.base)/small-upload")
            .serializingData().response
        guard case .invalidRequest(let reason) = response.error else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect(reason.contains("/nonexistent/firmware.bin"))
    }

    @Test("fire-agent request -T streams a file (PUT by default)")
    func cliUploadFile() throws {
        let server = try httpbin()
        let file = try randomFile(1500)
        let result = try fireAgent(["request", "-T", file.path, "\(server.base)/anything"])
        #expect(result.status == 0)
        let echo = try JSONDecoder().decode(Echo.self, from: result.stdout)
        #expect(echo.method == "PUT" && echo.headers["Content-Length"] == "1500")
        let both = try fireAgent(["request", "-T", file.path, "-d", "x", "\(server.base)/anything"])
        #expect(both.status == 3 && both.stderr.contains("only one of -d/--data, -T/--upload-file and -F/--form"))
    }
}
