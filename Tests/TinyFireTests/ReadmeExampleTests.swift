import Foundation
import Testing

@Suite("README example")
struct ReadmeExampleTests {
    @Test("the ported Alamofire snippets build and run against httpbin")
    func readmeExample() throws {
        let server = try httpbin()
        // A temporary directory of its own, empty: the snippets' downloads must create what they
        // write into, never find it left by an earlier run.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("tf-readme-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: scratch) }
        var environment = ProcessInfo.processInfo.environment
        environment["TMPDIR"] = scratch.path
        let result = try runCapturingOutput(
            try builtExecutablePath("alamofire-readme-example"), [server.base], environment: environment)
        let output = String(decoding: result.stdout, as: UTF8.self)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(output.contains("[Request]: GET \(server.base)/get"))
        #expect(output.contains("[Request]: POST \(server.base)/post"))
        #expect(output.contains(#""email": "test@test.test""#))
        #expect(output.contains("Validation Successful"))
        #expect(output.contains("Basic VXNlcm5hbWU6UGFzc3dvcmQ="))
        #expect(output.contains("$ curl -v \\\n\t-X GET"))
        #expect(output.contains("Swift concurrency: \(server.base)/get"))
        #expect(output.contains("Headers: 2, first Authorization"))
        #expect(output.contains("Monitor: finished \(server.base)/get"))
        #expect(output.contains("onHTTPResponse: 200"))
        #expect(output.contains("allowed: true"))
        #expect(output.contains("cancelled: true"))
        #expect(output.contains("Downloaded image: ") && output.contains("alamofire-example/image.png"))
        #expect(output.contains("Download with parameters: \(server.base)/get?foo=bar"))
        #expect(output.components(separatedBy: "Streamed: \(server.base)/stream/2").count == 3)
        #expect(output.contains("Stream complete: true"))
        #expect(output.contains("Downloaded to a file: yes"))
        #expect(output.contains("Stream task decoded 3 lines"))
        #expect(output.contains("Left the loop, request cancelled: false"))
        #expect(!output.contains("failed"))
    }

    @Test("the Alamofire 4.x-style snippets (Parameters with a ParameterEncoding, responseJSON) build and run against httpbin")
    func alamofire4xExample() throws {
        let server = try httpbin()
        let result = try runCapturingOutput(try builtExecutablePath("alamofire-4x-example"), [server.base])
        let output = String(decoding: result.stdout, as: UTF8.self)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(output.contains("Request: Optional(GET \(server.base)/get)"))
        #expect(output.contains("Response: Optional(<HTTPURLResponse> { URL: \(server.base)/get } { Status Code: 200"))
        #expect(output.contains("Result: success(["))
        #expect(output.contains("JSON: ["))
        #expect(output.contains(#"JSONEncoding sent: foo=bar baz=["a", 1] qux.z=3"#))
        #expect(output.contains("URLEncoding.default URL: \(server.base)/get?baz[]=a&baz[]=1&foo=bar&qux[x]=1&qux[y]=2&qux[z]=3"))
        #expect(output.contains("URLEncoding.queryString args: bar"))
        #expect(output.contains("URLEncoding.httpBody form: name=TinyFire enabled=1"))
        #expect(!output.contains("failed"))
    }
}
