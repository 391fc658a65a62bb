import Foundation
import Testing

@testable import FireAgent

/// `fire-agent request`, `queue add` and `queue flush` of the Embedded build (x86_64 natively,
/// armv7 and aarch64 under qemu-user) against real servers: nginx, openssl-made certificates,
/// squid. The full-Swift binary runs the same core code (FireAgentCLITests, TLSTests,
/// ProxyCLITests, DownloadTests); these check the board binaries.
@Suite("the Embedded fire-agent's request and queue commands against nginx, TLS servers and squid", .serialized)
struct EmbeddedRequestTests {
    @Test(
        "request over HTTP: body, -o (atomic), gzip, -i, -v, redirects, a 404, -d @FILE, -T, -F, and -C - continuing a cut download with Range and If-Range",
        arguments: EmbeddedAgent.all)
    func http(_ agent: EmbeddedAgent) throws {
        let server = try nginx()
        let directory = try agentScratch("embedded-request-\(agent.arch)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = environmentWithoutProxies()
        func run(_ arguments: [String]) throws -> CLIResult { try agent.run(["request"] + arguments, environment: environment) }

        let hello = try run(["\(server.base)/hello.txt"])
        #expect(hello.status == 0 && hello.stdout == Data("hello\n".utf8), "\(hello.stderr)")
        let output = directory + "/out/1m.bin"
        try FileManager.default.createDirectory(atPath: directory + "/out", withIntermediateDirectories: true)
        let file = try run(["-o", output, "\(server.base)/1m.bin"])
        #expect(file.status == 0, "\(file.stderr)")
        #expect(try Data(contentsOf: URL(filePath: output)) == server.oneMiB)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/out") == ["1m.bin"])
        let text = try run(["\(server.base)/text.txt"])
        #expect(text.status == 0 && text.stdout == server.text)
        let head = try run(["-i", "\(server.base)/hello.txt"])
        #expect(String(decoding: head.stdout, as: UTF8.self).hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(String(decoding: head.stdout, as: UTF8.self).hasSuffix("\r\n\r\nhello\n"))
        let verbose = try run(["-v", "\(server.base)/redirect"])
        #expect(verbose.status == 0 && verbose.stdout == Data("hello\n".utf8))
        for line in ["> GET /hello.txt HTTP/1.1", "< HTTP/1.1 200 OK", "* remote 127.0.0.1:\(server.port)", "* redirected to "] {
            #expect(verbose.stderr.contains(line), "\(line): \(verbose.stderr)")
        }
        #expect(try run(["--max-redirs", "2", "\(server.base)/loop"]).status == 47)
        let missing = try run(["-o", directory + "/out/missing", "\(server.base)/missing"])
        #expect(missing.status == 22)
        #expect(missing.stderr == "fire-agent: HTTP 404 Not Found from \(server.base)/missing (no output written)\n")
        #expect(!FileManager.default.fileExists(atPath: directory + "/out/missing"))

        // Bodies: -d @FILE (POST), -T (PUT, streamed), -F (a text field and a file part).
        let token = "emb-\(agent.arch)-\(UUID().uuidString.prefix(8))"
        let payload = directory + "/payload.bin"
        try Data(repeating: 0x5A, count: 70_000).write(to: URL(filePath: payload))
        #expect(try run(["-d", "@" + payload, "\(server.base)/ingest/\(token)/d"]).status == 0)
        #expect(try run(["-T", payload, "\(server.base)/ingest/\(token)/t"]).status == 0)
        let form = try run([
            "-F", "note=board", "-F", "capture=@\(payload);type=application/octet-stream", "\(server.base)/ingest/\(token)/f",
        ])
        #expect(form.status == 0, "\(form.stderr)")
        let lines = server.ingestLines(containing: token, expecting: 3)
        #expect(lines.contains { $0.hasPrefix("/ingest/\(token)/d 204 70000") }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("/ingest/\(token)/t 204 70000") }, "\(lines)")
        // The form: its two parts' headers and boundaries around 70,000 + 5 bytes.
        let formLength = lines.first { $0.hasPrefix("/ingest/\(token)/f 204 ") }.flatMap { Int($0.split(separator: " ")[2]) } ?? 0
        #expect(formLength > 70_005 && formLength < 70_400, "\(lines)")

        // -C -: a download cut by its timeout keeps its bytes and the validator; the next run
        // asks for the rest with Range and If-Range and completes the file.
        let partial = directory + "/partial.bin"
        let cut = try run(["-C", "-", "-o", partial, "--limit-rate", "256k", "--timeout", "1", "\(server.base)/1m.bin?\(token)"])
        #expect(cut.status == 28, "\(cut.stderr)")
        let kept = (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int) ?? 0
        #expect(kept > 0 && kept < 1 << 20, "kept \(kept)")
        #expect(FileManager.default.fileExists(atPath: directory + "/.partial.bin.fire-agent-resume"))
        let resumed = try run(["-C", "-", "-o", partial, "\(server.base)/1m.bin?\(token)"])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(try Data(contentsOf: URL(filePath: partial)) == server.oneMiB)
        #expect(!FileManager.default.fileExists(atPath: directory + "/.partial.bin.fire-agent-resume"))
        let ranged = server.logLines(containing: token, expected: 2)
        #expect(ranged.contains { $0.contains(" 206 ") && $0.contains("\"bytes=\(kept)-\"") && !$0.contains("\"-\"\n") }, "\(ranged)")
    }

    @Test(
        "request over TLS: --cacert, untrusted without it, --pin kept and refused (a MITM), -k with its warning, a client certificate, -v's TLS lines",
        arguments: EmbeddedAgent.all)
    func tls(_ agent: EmbeddedAgent) throws {
        let server = try tlsServer()
        let environment = environmentWithoutProxies()
        func run(_ arguments: [String]) throws -> CLIResult { try agent.run(["request"] + arguments, environment: environment) }
        let url = "https://localhost:\(server.port)/hello.txt"
        let untrusted = try run([url])
        #expect(untrusted.status == 60 && untrusted.stderr.contains("not trusted"), "\(untrusted.stderr)")
        let trusted = try run(["-v", "--cacert", server.caFile, url])
        #expect(trusted.status == 0 && trusted.stdout == Data("hello over tls\n".utf8), "\(trusted.stderr)")
        #expect(trusted.stderr.contains("* TLS TLSv1.2, ") && trusted.stderr.contains("* certificate issuer: CN=TinyFire Test Root"))
        let pinLine = trusted.stderr.split(separator: "\n").first { $0.hasPrefix("* public key pin: sha256//") }
        let pin = String(pinLine?.dropFirst("* public key pin: ".count) ?? "")
        #expect(try run(["--cacert", server.caFile, "--pin", pin, url]).status == 0)
        let mitm = try run(["--cacert", server.caFile, "--pin", pin, "https://localhost:\(server.mitmPort)/hello.txt"])
        #expect(mitm.status == 60 && mitm.stderr.contains("PublicKeysTrustEvaluator"), "\(mitm.stderr)")
        let insecure = try run(["-k", "https://localhost:\(server.selfSignedPort)/hello.txt"])
        #expect(insecure.status == 0 && insecure.stderr.contains("WARNING: --insecure"))
        let mutual = try run([
            "--cacert", server.caFile, "--cert", server.directory + "/client.pem", "--key", server.directory + "/client.key",
            "https://localhost:\(server.mutualPort)/whoami",
        ])
        #expect(mutual.status == 0 && mutual.stdout == Data("CN=client\n".utf8), "\(mutual.stderr)")
    }

    @Test(
        "through squid (-x, and the environment's http_proxy), and queue add then queue flush delivering to nginx",
        arguments: EmbeddedAgent.all)
    func proxyAndQueue(_ agent: EmbeddedAgent) throws {
        let proxies = try ProxyFixture.shared.get()
        let token = "embp-\(agent.arch)-\(UUID().uuidString.prefix(8))"
        let viaOption = try agent.run(
            ["request", "-x", "127.0.0.1:\(proxies.openPort)", "\(proxies.originHTTP)/ingest/\(token)/x"],
            environment: environmentWithoutProxies())
        #expect(viaOption.status == 0, "\(viaOption.stderr)")
        let viaEnvironment = try agent.run(
            ["request", "\(proxies.originHTTP)/ingest/\(token)/env"],
            environment: environmentWithoutProxies(["http_proxy": "http://127.0.0.1:\(proxies.openPort)"]))
        #expect(viaEnvironment.status == 0, "\(viaEnvironment.stderr)")
        let tunnel = try agent.run(
            [
                "request", "-v", "-x", "127.0.0.1:\(proxies.openPort)", "--cacert", proxies.originCAFile,
                "\(proxies.originHTTPS)/ingest/\(token)/s",
            ],
            environment: environmentWithoutProxies())
        #expect(tunnel.status == 0 && tunnel.stderr.contains(", CONNECT tunnel"), "\(tunnel.stderr)")
        #expect(proxies.squidLines(containing: token, expected: 2).count == 2)
        #expect(proxies.originLines(containing: token, expected: 3).count == 3)

        let server = try nginx()
        let directory = try agentScratch("embedded-queue-\(agent.arch)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let added = try agent.run([
            "queue", "add", "--dir", directory, "--repeat", "3", "-H", "Content-Type: text/plain", "-d", "line {n}",
            "\(server.base)/ingest/\(token)/{n}",
        ])
        #expect(added.status == 0 && String(decoding: added.stdout, as: UTF8.self).split(separator: "\n").count == 3, "\(added.stderr)")
        // What the board queued, the full-Swift binary lists the same.
        let list = try fireAgent(["queue", "list", "--dir", directory])
        #expect(String(decoding: list.stdout, as: UTF8.self).split(separator: "\n").count == 3)
        let flush = try agent.run(["queue", "flush", "--dir", directory], environment: environmentWithoutProxies())
        #expect(flush.status == 0 && flush.stdout == Data("delivered 3 discarded 0 remaining 0\n".utf8), "\(flush.stderr)")
        #expect(server.ingestLines(containing: token, expecting: 3).count == 3)
        let stuck = try agent.run(["queue", "add", "--dir", directory, "-d", "x", "http://127.0.0.1:1/nowhere"])
        #expect(stuck.status == 0)
        let refused = try agent.run(["queue", "flush", "--dir", directory, "--timeout", "5"], environment: environmentWithoutProxies())
        #expect(refused.status == 7 && refused.stderr.contains("127.0.0.1:1"), "\(refused.stderr)")
    }
}
