import Foundation
import Testing

@Suite("README example")
struct ReadmeExampleTests {
    @Test("the ported Alamofire snippets build and run against httpbin")
    func readmeExample() throws {
        let server = try httpbin()
        let result = try runCapturingOutput(try builtExecutablePath("alamofire-readme-example"), [server.base])
        let output = String(decoding: result.stdout, as: UTF8.self)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(output.contains("[Request]: GET \(server.base)/get"))
        #expect(output.contains("[Request]: POST \(server.base)/post"))
        #expect(output.contains(#""email": "test@test.test""#))
        #expect(output.contains("Validation Successful"))
        #expect(output.contains("Basic VXNlcm5hbWU6UGFzc3dvcmQ="))
        #expect(output.contains("$ curl -v \\\n\t-X GET"))
        #expect(output.contains("Swift concurrency: \(server.base)/get"))
        #expect(!output.contains("failed"))
    }
}
