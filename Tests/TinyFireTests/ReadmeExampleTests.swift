import Foundation
import Testing

@Suite("README example")
struct ReadmeExampleTests {
    @Test("the ported Alamofire snippets build and run against httpbin")
    func readmeExample() throws {
        let server = try httpbin()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try builtExecutablePath("alamofire-readme-example"))
        process.arguments = [server.base]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let output = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
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
