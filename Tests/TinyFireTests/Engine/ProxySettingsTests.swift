import Foundation
import Testing

@testable import TinyFire

/// The proxy's pure parts: URL parsing, curl's environment rules, no_proxy, the request target
/// and the CONNECT step driven from scripted bytes.
@Suite("Proxy settings, no_proxy, targets and the CONNECT step")
struct ProxySettingsTests {
    @Test(
        "proxy URLs as curl takes them",
        arguments: [
            ("proxy.corp:3128", Proxy.Scheme.http, "proxy.corp", 3128, nil as String?, nil as String?),
            ("http://proxy.corp", .http, "proxy.corp", 1080, nil, nil),
            ("HTTPS://proxy.corp/", .https, "proxy.corp", 443, nil, nil),
            ("http://u%40x:p%3Aw@[::1]:8080", .http, "::1", 8080, "u@x", "p:w"),
            ("http://user@10.0.0.1:3128", .http, "10.0.0.1", 3128, "user", ""),
            ("http://a:b:c@h:1", .http, "h", 1, "a", "b:c"),
        ])
    func parses(text: String, scheme: Proxy.Scheme, host: String, port: Int, user: String?, password: String?) throws {
        let proxy = try Proxy(url: text)
        #expect(proxy.scheme == scheme && proxy.host == host && proxy.port == port)
        #expect(proxy.credentials?.user == user && proxy.credentials?.password == password)
    }

    @Test(
        "malformed proxy URLs: a typed error naming the problem, the password masked",
        arguments: [
            ("socks5://u:hunter2@h:1080", "SOCKS proxies are not supported"),
            ("ftp://h:21", "unsupported proxy scheme"),
            ("http://", "no host"),
            ("http://u:hunter2@h:0", "is not a number from 1 to 65535"),
            ("http://h:99999", "is not a number from 1 to 65535"),
            ("http://h:80x", "is not a number from 1 to 65535"),
            ("http://h/path", "no path"),
            ("http://[::1", "closing bracket"),
            ("http://[nothex]:1", "is not an IPv6 address"),
            ("http://h h:1", "cannot"),
            ("http://u:hunter2%zz@h:1", "percent-encoding"),
        ])
    func refuses(text: String, problem: String) {
        do {
            _ = try Proxy(url: text)
            Issue.record("\(text) was accepted")
        } catch {
            #expect(error.description.contains(problem), "\(text): \(error)")
            #expect(!error.description.contains("hunter2"), "\(text): \(error)")
        }
    }

    @Test("printing a proxy masks the password; the display URL has no credentials")
    func masking() throws {
        let proxy = try Proxy(url: "http://fleet:hunter2@proxy:3128")
        #expect(proxy.description == "http://fleet:***@proxy:3128")
        #expect(proxy.displayURL == "http://proxy:3128")
        #expect(ProxyCredentials(user: "a", password: "b").description == "a:***")
        #expect(ProxySettings(all: proxy).description.contains("***") && !ProxySettings(all: proxy).description.contains("hunter2"))
        #expect(Proxy.masked("http://u:pw@h:1/") == "http://u:***@h:1/")
        #expect(Proxy.masked("u:pw@h") == "u:***@h")
        #expect(Proxy.masked("http://h:1") == "http://h:1")
        // Basic credentials, checked against Foundation's base64.
        for (user, password) in [("fleet", "s3cret:p@ss"), ("", ""), ("a", "bc"), ("üser", "pässwörd")] {
            let expected = "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
            #expect(ProxyCredentials(user: user, password: password).basicAuthorization == expected)
        }
    }

    struct EnvironmentCase: Sendable, CustomTestStringConvertible {
        var variables: [String: String]
        var http: String?
        var https: String?
        var noProxy = ""
        var testDescription: String { "\(variables)" }
    }

    static let environmentCases: [EnvironmentCase] = [
        EnvironmentCase(variables: ["http_proxy": "http://h1:1"], http: "http://h1:1"),
        EnvironmentCase(variables: ["HTTP_PROXY": "http://cgi:1"]),
        EnvironmentCase(variables: ["https_proxy": "http://s:2", "HTTPS_PROXY": "http://S:3"], https: "http://s:2"),
        EnvironmentCase(variables: ["HTTPS_PROXY": "http://S:3"], https: "http://S:3"),
        EnvironmentCase(variables: ["all_proxy": "http://a:4", "http_proxy": "http://h:5"], http: "http://h:5", https: "http://a:4"),
        EnvironmentCase(variables: ["ALL_PROXY": "http://A:6"], http: "http://A:6", https: "http://A:6"),
        EnvironmentCase(variables: ["all_proxy": "", "ALL_PROXY": "http://A:7"], http: "http://A:7", https: "http://A:7"),
        EnvironmentCase(variables: ["http_proxy": "", "all_proxy": "http://a:8"], http: "http://a:8", https: "http://a:8"),
        EnvironmentCase(variables: ["no_proxy": "a,b", "NO_PROXY": "c"], noProxy: "a,b"),
        EnvironmentCase(variables: ["NO_PROXY": "c"], noProxy: "c"),
    ]

    @Test(
        "the environment by curl's rules: lowercase first, HTTP_PROXY ignored, all_proxy as the fallback, empty is unset",
        arguments: environmentCases)
    func environment(_ example: EnvironmentCase) throws {
        let settings = try ProxySettings.environment { example.variables[$0] }
        #expect(settings.http?.displayURL == example.http)
        #expect(settings.https?.displayURL == example.https)
        #expect(settings.noProxy.description == example.noProxy)
    }

    @Test("a malformed environment variable is an error that names it")
    func environmentError() {
        #expect {
            _ = try ProxySettings.environment { $0 == "https_proxy" ? "socks5://h:1" : nil }
        } throws: { error in
            (error as? TinyFireError)?.description.contains("https_proxy: socks5://h:1: SOCKS") == true
        }
    }

    @Test(
        "no_proxy: *, names and their subdomains, leading dots, addresses and CIDR ranges, IPv6 with or without brackets",
        arguments: [
            ("*", "anything.example", true),
            ("*", "10.1.2.3", true),
            ("example.com", "example.com", true),
            ("example.com", "api.example.com", true),
            ("example.com", "badexample.com", false),
            ("example.com", "example.com.evil", false),
            (".example.com", "example.com", true),
            (".example.com", "a.b.example.com", true),
            ("EXAMPLE.com", "Api.Example.COM.", true),
            ("localhost", "localhost", true),
            ("localhost", "127.0.0.1", false),
            ("10.0.0.0/8", "10.200.1.1", true),
            ("10.0.0.0/8", "11.0.0.1", false),
            ("10.0.0.0/8", "ten.example", false),
            ("192.168.1.0/25", "192.168.1.127", true),
            ("192.168.1.0/25", "192.168.1.128", false),
            ("127.0.0.1", "127.0.0.1", true),
            ("127.0.0.1", "127.0.0.2", false),
            ("::1", "::1", true),
            ("::1", "[::1]", true),
            ("[::1]", "0:0:0:0:0:0:0:1", true),
            ("fd00::/8", "fd12:3456::1", true),
            ("fd00::/8", "fe80::1", false),
            ("fd00::/8", "10.0.0.1", false),
            ("0.0.0.0/0", "203.0.113.9", true),
            ("a, b ,c", "c", true),
            ("a b", "b", true),
            ("", "example.com", false),
            ("10.0.0.0/33", "10.0.0.1", false),
        ])
    func noProxy(list: String, host: String, matches: Bool) {
        #expect(NoProxyList(parsing: list).matches(host: host) == matches, "\(list) vs \(host)")
    }

    @Test("entries that are neither names nor addresses are reported, not matched")
    func noProxyInvalid() {
        let list = NoProxyList(parsing: "ok.example,10.0.0.0/33,host:8080,a/b,*")
        #expect(list.invalidEntries == ["10.0.0.0/33", "host:8080", "a/b"])
        #expect(list.matchesEverything)
    }

    @Test("the request target: origin form direct, absolute form to a proxy, CONNECT for https and when asked")
    func targets() throws {
        let proxy = Proxy(host: "proxy", port: 3128)
        func target(_ scheme: String, _ host: String, _ port: Int?, _ settings: ProxySettings) throws -> RequestTarget {
            try RequestTarget(scheme: scheme, host: host, port: port, path: "/a b", query: "q=1", url: "u", proxies: settings)
        }
        let direct = try target("HTTP", "example.com", nil, .direct)
        #expect(direct.route == .direct && direct.requestTarget == "/a b?q=1" && direct.authority == "example.com")
        #expect(direct.connectHost == "example.com" && direct.connectPort == 80)
        let forward = try target("http", "example.com", 8080, ProxySettings(all: proxy))
        #expect(forward.route == .forward(proxy) && forward.requestTarget == "http://example.com:8080/a b?q=1")
        #expect(forward.connectHost == "proxy" && forward.connectPort == 3128)
        let tunnel = try target("https", "[2001:db8::1]", nil, ProxySettings(all: proxy))
        #expect(tunnel.route == .tunnel(proxy) && tunnel.requestTarget == "/a b?q=1")
        #expect(tunnel.tunnelAuthority == "[2001:db8::1]:443" && tunnel.authority == "[2001:db8::1]")
        var tunnelling = proxy
        tunnelling.tunnelsHTTP = true
        #expect(try target("http", "example.com", nil, ProxySettings(all: tunnelling)).route == .tunnel(tunnelling))
        // Absolute-form requests share the proxy's connections whatever the origin; tunnels do not.
        let other = try target("http", "other.example", nil, ProxySettings(all: proxy))
        #expect(forward.poolKey == other.poolKey && forward.poolKey != direct.poolKey)
        let otherTunnel = try target("https", "other.example", nil, ProxySettings(all: proxy))
        #expect(tunnel.poolKey != otherTunnel.poolKey)
        // Two users' tunnels to the same origin are not shared.
        var alice = proxy
        alice.credentials = ProxyCredentials(user: "alice", password: "1")
        var bob = proxy
        bob.credentials = ProxyCredentials(user: "bob", password: "2")
        #expect(
            try target("https", "o", nil, ProxySettings(all: alice)).poolKey != target("https", "o", nil, ProxySettings(all: bob)).poolKey)
        #expect(!tunnel.poolKey.description.contains("alice") && tunnel.poolKey.description.contains("via http://proxy:3128"))
        // Only http and https.
        #expect { try target("ftp", "h", nil, .direct) } throws: { ($0 as? RequestTargetError)?.reason == "unsupported scheme \"ftp\"" }
        #expect { try target("http", "h", 70000, .direct) } throws: { ($0 as? RequestTargetError)?.reason == "port 70000 out of range" }
    }

    // MARK: - The CONNECT step from scripted bytes

    /// A stream that hands out scripted reads and records writes, taking at most `writeLimit`
    /// bytes per write.
    final class ScriptedStream: ByteStream {
        var reads: [IOResult]
        var chunks: [[UInt8]]
        var written: [UInt8] = []
        var writeLimit: Int

        init(_ chunks: [String], reads: [IOResult]? = nil, writeLimit: Int = .max) {
            self.chunks = chunks.map { Array($0.utf8) }
            self.reads = reads ?? chunks.map { .bytes($0.utf8.count) }
            self.writeLimit = writeLimit
        }

        func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
            guard !reads.isEmpty else { return .wouldBlock }
            let next = reads.removeFirst()
            if case .bytes = next {
                let chunk = chunks.removeFirst()
                buffer.copyBytes(from: chunk)
                return .bytes(chunk.count)
            }
            return next
        }

        func write(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> IOResult {
            let n = min(first.count, writeLimit)
            written.append(contentsOf: first[0..<n])
            return .bytes(n)
        }

        var plainDescriptor: Int32? { nil }
        var holdsBufferedInput: Bool { false }
        var endedWithoutCloseNotify: Bool { false }
        var failuresAreTLSCodes: Bool { false }
        func shutdown() {}
    }

    func step(_ stream: ScriptedStream, authorization: String? = nil) -> ProxyTunnelStep {
        ProxyTunnelStep(stream: stream, authority: "origin:443", authorization: authorization, userAgent: "t/1", maxHeadBytes: 1024)
    }

    @Test("CONNECT: the request's bytes, a 200 split over reads, waiting in between")
    func connectSucceeds() {
        let stream = ScriptedStream(
            ["HTTP/1.1 200 Conn", "ection established\r\nVia: squid\r\n", "\r\n"],
            reads: [.bytes(0), .wouldBlock, .bytes(0), .bytes(0)], writeLimit: 7)
        stream.reads = [.bytes(17), .wouldBlock, .bytes(32), .bytes(2)]
        let connect = step(stream, authorization: "Basic Zm9vOmJhcg==")
        guard case .wantRead = connect.advance() else {
            Issue.record("expected to wait for more")
            return
        }
        #expect(
            String(decoding: stream.written, as: UTF8.self)
                == "CONNECT origin:443 HTTP/1.1\r\nHost: origin:443\r\nUser-Agent: t/1\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nProxy-Connection: Keep-Alive\r\n\r\n"
        )
        guard case .done = connect.advance() else {
            Issue.record("expected the tunnel")
            return
        }
        #expect(connect.answer?.status == 200)
    }

    @Test(
        "CONNECT answers that are not a tunnel",
        arguments: [
            ("HTTP/1.1 200 OK\r\n\r\nEXTRA", "bytes after its 200"),
            (
                "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"r\"\r\nContent-Length: 5\r\n\r\nnope!",
                "407"
            ),
            ("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", "403"),
            ("HTTP/1.1 301 Moved\r\nLocation: http://x/\r\n\r\n", "301"),
            ("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 502 Bad Gateway\r\n\r\n", "502"),
            ("SSH-2.0-OpenSSH\r\n", "not HTTP"),
            ("HTTP/1.1 200 OK\r\nX: \(String(repeating: "y", count: 2000))\r\n\r\n", "is invalid"),
        ])
    func connectRefused(answer: String, expected: String) {
        let connect = step(ScriptedStream([answer]))
        guard case .failed(let reason) = connect.advance() else {
            Issue.record("\(answer) opened a tunnel")
            return
        }
        var error = TransferError(
            method: "GET", url: "https://origin/", host: "origin", phase: .openingTunnel, reason: reason, bytesSent: 0, bytesReceived: 0)
        error.proxy = "http://proxy:3128"
        #expect(error.description.contains(expected), "\(error)")
        #expect(error.description.contains("http://proxy:3128"))
    }

    @Test("CONNECT: the proxy hangs up before answering, or mid-answer")
    func connectClosed() {
        for reads in [[IOResult.endOfFile], [.failed(ECONNRESET)]] {
            let connect = step(ScriptedStream([], reads: reads))
            guard case .failed(.proxyTunnelFailed) = connect.advance() else {
                Issue.record("\(reads) did not fail the tunnel")
                continue
            }
        }
        let partial = ScriptedStream(["HTTP/1.1 200"], reads: [.bytes(12), .endOfFile])
        guard case .failed(.proxyTunnelFailed(let message)) = step(partial).advance() else {
            Issue.record("a cut answer opened a tunnel")
            return
        }
        #expect(message.contains("in the middle of its answer"))
    }
}
