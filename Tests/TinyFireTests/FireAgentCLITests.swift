import Foundation
import Testing

@testable import TinyFire

/// The fire-agent binary built beside the test bundle (or `FIRE_AGENT` from the environment).
func fireAgentPath() throws -> String {
    if let path = ProcessInfo.processInfo.environment["FIRE_AGENT"] { return path }
    return try builtExecutablePath("fire-agent")
}

/// An executable of this package built beside the test bundle (`swift build` builds them).
func builtExecutablePath(_ name: String) throws -> String {
    let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var directory = bundle.deletingLastPathComponent()
    for _ in 0..<3 {
        let candidate = directory.appendingPathComponent(name).path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        directory = directory.deletingLastPathComponent()
    }
    throw FixtureError(description: "\(name) not found beside \(bundle.path); run swift build first")
}

struct CLIResult {
    var status: Int32
    var stdout: Data
    var stderr: String
}

/// Runs fire-agent with `arguments`, capturing its output.
func fireAgent(_ arguments: [String], environment: [String: String]? = nil) throws -> CLIResult {
    try runCapturingOutput(try fireAgentPath(), arguments, environment: environment)
}

@Suite("fire-agent request", .serialized)
struct FireAgentCLITests {
    @Test("prints the body and exits 0 for a 2xx")
    func success() throws {
        let server = try nginx()
        let result = try fireAgent(["request", "\(server.base)/hello.txt"])
        #expect(result.status == 0)
        #expect(result.stdout == Data("hello\n".utf8))
        #expect(result.stderr.isEmpty)
    }

    @Test("-i includes the response head; -v shows heads and timings on stderr")
    func includeAndVerbose() throws {
        let server = try nginx()
        let result = try fireAgent(["request", "-i", "-v", "\(server.base)/hello.txt"])
        let text = String(decoding: result.stdout, as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(text.hasSuffix("\r\n\r\nhello\n"))
        #expect(result.stderr.contains("> GET /hello.txt HTTP/1.1"))
        #expect(result.stderr.contains("< HTTP/1.1 200 OK"))
        #expect(result.stderr.contains("* dns "))
    }

    @Test("-X, -H and -d send what they say")
    func methodHeadersData() throws {
        let server = try httpbin()
        let result = try fireAgent([
            "request", "-X", "PUT", "-H", "X-Fire: yes", "-H", "Content-Type: text/plain", "-d", "payload", "\(server.base)/anything",
        ])
        #expect(result.status == 0)
        let echoed = try json(result.stdout)
        #expect(echoed["method"] as? String == "PUT")
        #expect(echoed["data"] as? String == "payload")
        #expect((echoed["headers"] as? [String: Any])?["X-Fire"] as? String == "yes")
    }

    @Test("-d @file reads the body from a file, and a missing file exits 26")
    func dataFromFile() throws {
        let server = try httpbin()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("tf-body-\(UUID().uuidString)")
        try Data("from-file".utf8).write(to: file)
        let result = try fireAgent(["request", "-H", "Content-Type: text/plain", "-d", "@\(file.path)", "\(server.base)/post"])
        #expect(try json(result.stdout)["data"] as? String == "from-file")
        let missing = try fireAgent(["request", "-d", "@/nonexistent/body", "\(server.base)/post"])
        #expect(missing.status == 26)
        #expect(missing.stderr.contains("cannot open /nonexistent/body"))
    }

    @Test("-o writes the file only after a complete body")
    func outputFile() throws {
        let server = try nginx()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tf-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("out.bin")
        let result = try fireAgent(["request", "-o", file.path, "\(server.base)/1m.bin"])
        #expect(result.status == 0)
        #expect(try Data(contentsOf: file) == server.oneMiB)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["out.bin"])
    }

    @Test("a truncated transfer with -o leaves no file and no temporary")
    func outputFileTruncated() throws {
        let server = try HostileServer { client in
            client.readRequest()
            client.send("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + String(repeating: "z", count: 50_000))
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tf-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("firmware.bin")
        let result = try fireAgent(["request", "-o", file.path, server.base])
        #expect(result.status == 8)
        #expect(result.stderr.contains("connection closed after 50000 of 100000 body bytes"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    @Test("a 404 with -o exits 22 and writes nothing")
    func notFoundWithOutput() throws {
        let server = try nginx()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tf-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let result = try fireAgent(["request", "-o", directory.appendingPathComponent("x").path, "\(server.base)/missing"])
        #expect(result.status == 22)
        #expect(result.stderr == "fire-agent: HTTP 404 Not Found from \(server.base)/missing (no output written)\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    @Test("failures exit with curl's codes and one line on stderr")
    func exitCodes() throws {
        let server = try nginx()
        let cases: [([String], Int32)] = [
            (["request", "http://127.0.0.1:\(freePort())/"], 7),
            (["request", "http://does-not-exist.invalid/"], 6),
            (["request", "--max-redirs", "2", "\(server.base)/loop"], 47),
            (["request", "ftp://example.com/"], 3),
            (["request", "\(server.base)/missing"], 22),
            (["request", "-H", "no colon here", "\(server.base)/"], 3),
        ]
        for (arguments, expected) in cases {
            let result = try fireAgent(arguments)
            #expect(result.status == expected, "\(arguments): \(result.stderr)")
            #expect(result.stderr.hasPrefix("fire-agent: "), "\(arguments)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(arguments): \(result.stderr)")
        }
    }

    @Test("time options: NaN, infinite or negative seconds are refused by name; a huge one means no limit, never a trap")
    func timeOptionsNeverTrap() throws {
        for value in ["nan", "inf", "-1"] {
            let result = try fireAgent(["request", "--timeout=\(value)", "http://127.0.0.1:1/"])
            #expect(result.status == 64, "--timeout \(value): exit \(result.status) \(result.stderr.prefix(200))")
            #expect(result.stderr.contains("--timeout"), "\(result.stderr.prefix(200))")
        }
        let flush = try fireAgent(["queue", "flush", "--dir", try makeTemporaryDirectory("time-options"), "--timeout=nan"])
        #expect(flush.status == 64, "queue flush --timeout nan: exit \(flush.status)")
        // 1e300 s: a deadline past the end of the clock is "never", not a wrapped one in the past.
        let huge = try fireAgent([
            "request", "--timeout", "1e300", "--connect-timeout", "1e300", "--idle-timeout", "1e300", "http://127.0.0.1:1/",
        ])
        #expect(huge.status == 7, "exit \(huge.status): \(huge.stderr.prefix(300))")
        #expect(Duration.timeInterval(.nan) == nil && Duration.timeInterval(-1) == nil && Duration.timeInterval(.infinity) == nil)
        #expect(Duration.timeInterval(1e300) == .milliseconds(Int64.max))
        #expect(Duration.timeInterval(1.5) == .milliseconds(1500))
    }

    @Test("timeouts exit 28")
    func timeoutExit() throws {
        let server = try HostileServer { client in
            client.readRequest()
            client.sleep(3)
        }
        let result = try fireAgent(["request", "--timeout", "0.5", server.base])
        #expect(result.status == 28)
        #expect(result.stderr.contains("total timeout 0.5 s exceeded"))
    }

    @Test("--version prints the version")
    func version() throws {
        let result = try fireAgent(["--version"])
        #expect(result.status == 0)
        #expect(String(decoding: result.stdout, as: UTF8.self).hasPrefix("fire-agent 0.1.0"))
    }
}
