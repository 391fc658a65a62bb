import Foundation
import Synchronization
import Testing

@testable import TinyFire

/// Requests through real proxies (squid, tinyproxy) and hostile ones, against an origin that
/// logs the headers it receives.
@Suite("Proxies: squid, tinyproxy and hostile proxies", .serialized)
struct ProxyTests {
    static let credentials = ProxyCredentials(user: ProxyFixture.user, password: ProxyFixture.password)

    func session(_ proxy: Proxy, tls: TLSConfiguration? = nil, trust: ServerTrustManager? = nil) throws -> Session {
        let fixture = try proxies()
        var configuration = SessionConfiguration(proxy: ProxySettings(all: proxy))
        configuration.tls = tls ?? TLSConfiguration(caCertificateFiles: [fixture.originCAFile])
        return Session(configuration: configuration, serverTrustManager: trust)
    }

    /// A path no other test asks for, to find this test's lines in the logs.
    func token(_ name: String) -> String { "/hello.txt?\(name)-\(UInt32.random(in: 0...UInt32.max))" }

    /// The origin log's fields: request, Proxy-Authorization, Authorization, Host.
    func fields(_ line: String) -> [String] {
        line.split(separator: "|", omittingEmptySubsequences: false).map { $0 == "-" ? "" : String($0) }
    }

    @Test("http:// through squid in absolute form; https:// through a CONNECT tunnel; the origin sees no proxy header")
    func squidOpen() async throws {
        let fixture = try proxies()
        let session = try session(Proxy(host: "127.0.0.1", port: fixture.openPort))
        let plain = token("open-plain")
        let text = try await session.request(fixture.originHTTP + plain).serializingString().value
        #expect(text == "hello through the proxy\n")
        #expect(fixture.squidLines(containing: "GET \(fixture.originHTTP)\(plain)").count == 1)
        let secure = token("open-tls")
        let connects = fixture.squidLines(containing: "CONNECT localhost:\(fixture.originHTTPSPort) -", expected: 0).count
        do {
            // A session of its own: squid logs a CONNECT when the tunnel closes, which is when the
            // session goes away.
            let tunnelling = try self.session(Proxy(host: "127.0.0.1", port: fixture.openPort))
            let request = tunnelling.request(fixture.originHTTPS + secure)
            #expect(try await request.serializingString().value == "hello through the proxy\n")
            // The origin's certificate was checked (it is the origin's own, through the tunnel).
            #expect(request.metrics?.tls?.peerCertificates.isEmpty == false)
            #expect(request.metrics?.remoteAddress == "127.0.0.1:\(fixture.openPort)")
        }
        // (Other suites may tunnel through the same squid meanwhile: at least one more line.)
        let tunnels = fixture.squidLines(containing: "CONNECT localhost:\(fixture.originHTTPSPort) -", expected: connects + 1)
        #expect(tunnels.count > connects)
        for line in fixture.originLines(containing: plain) + fixture.originLines(containing: secure) {
            #expect(fields(line)[1].isEmpty && fields(line)[2].isEmpty, "\(line)")
        }
    }

    @Test("Basic credentials go to squid only: absolute form and CONNECT, and never to the origin")
    func squidAuthenticated() async throws {
        let fixture = try proxies()
        let session = try session(Proxy(host: "127.0.0.1", port: fixture.authPort, credentials: Self.credentials))
        let plain = token("auth-plain")
        let secure = token("auth-tls")
        var headers = HTTPHeaders()
        headers.add(name: "Authorization", value: "Bearer origin-token")
        #expect(try await session.request(fixture.originHTTP + plain, headers: headers).serializingString().value.hasPrefix("hello"))
        #expect(try await session.request(fixture.originHTTPS + secure, headers: headers).serializingString().value.hasPrefix("hello"))
        #expect(fixture.squidLines(containing: plain).first?.contains(" fleet ") == true)
        let plainLine = try #require(fixture.originLines(containing: plain).first)
        let secureLine = try #require(fixture.originLines(containing: secure).first)
        // The origin's own Authorization arrives; Proxy-Authorization does not.
        #expect(fields(plainLine)[1].isEmpty && fields(plainLine)[2] == "Bearer origin-token", "\(plainLine)")
        #expect(fields(secureLine)[1].isEmpty && fields(secureLine)[2] == "Bearer origin-token", "\(secureLine)")
    }

    @Test("a caller's own Proxy-Authorization header never reaches the origin, direct or through a tunnel")
    func callerProxyHeaderStaysAway() async throws {
        let fixture = try proxies()
        var headers = HTTPHeaders()
        headers.add(name: "Proxy-Authorization", value: "Basic c2VjcmV0")
        let direct = token("caller-direct")
        let tunnelled = token("caller-tunnel")
        let plainSession = Session(
            configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [fixture.originCAFile])))
        _ = try await plainSession.request(fixture.originHTTPS + direct, headers: headers).serializingString().value
        _ = try await session(Proxy(host: "127.0.0.1", port: fixture.openPort)).request(fixture.originHTTPS + tunnelled, headers: headers)
            .serializingString().value
        for line in fixture.originLines(containing: direct) + fixture.originLines(containing: tunnelled) {
            #expect(fields(line)[1].isEmpty, "\(line)")
        }
    }

    @Test("keep-alive through a tunnel and to a forward proxy: one CONNECT for several requests")
    func keepAlive() async throws {
        let fixture = try proxies()
        let session = try session(Proxy(host: "127.0.0.1", port: fixture.authPort, credentials: Self.credentials))
        let name = token("keepalive")
        var reused: [Bool] = []
        for index in 0..<3 {
            let request = session.request(fixture.originHTTPS + name + "-\(index)")
            _ = try await request.serializingString().value
            reused.append(request.metrics?.reusedConnection ?? false)
        }
        #expect(reused == [false, true, true])
        var forwardReused: [Bool] = []
        for index in 0..<3 {
            let request = session.request(fixture.originHTTP + name + "-plain-\(index)")
            _ = try await request.serializingString().value
            forwardReused.append(request.metrics?.reusedConnection ?? false)
        }
        #expect(forwardReused == [false, true, true])
    }

    @Test("no credentials, or wrong ones: 407 is a typed error that names the proxy, sent once, password nowhere")
    func authenticationRequired() async throws {
        let fixture = try proxies()
        // A user name of this test's own: other suites run beside it through the same squid.
        let user = "wrong\(UInt32.random(in: 0...UInt32.max))"
        for (proxy, label) in [
            (Proxy(host: "127.0.0.1", port: fixture.authPort), "none"),
            (Proxy(host: "127.0.0.1", port: fixture.authPort, credentials: ProxyCredentials(user: user, password: "wrong-pw")), "wrong"),
        ] {
            let session = try session(proxy)
            for url in [fixture.originHTTPS + token("407-\(label)"), fixture.originHTTP + token("407-\(label)")] {
                let response = await session.request(url).serializingData().response
                let error = try #require(response.error?.transferError, "\(label) \(url)")
                guard case .proxyAuthenticationRequired(let challenge) = error.reason else {
                    Issue.record("\(label) \(url): \(error)")
                    continue
                }
                #expect(challenge.contains("Basic"))
                #expect(error.failedAtProxy && error.proxy == "http://127.0.0.1:\(fixture.authPort)")
                #expect(url.hasPrefix("https") ? error.phase == .openingTunnel : error.phase == .awaitingResponse)
                #expect(!error.description.contains("wrong-pw") && error.description.contains("127.0.0.1:\(fixture.authPort)"))
                #expect(error.kind == .proxyRefused)
            }
        }
        // Wrong credentials were offered once per request, not in a loop.
        #expect(fixture.squidLines(containing: "407-wrong").count == 1)
        try await Task.sleep(for: .milliseconds(300))
        let connects = fixture.squidLines(containing: " \(user) ", expected: 2).filter { $0.contains("CONNECT") }
        #expect(connects.count == 1 && connects[0].contains("TCP_DENIED/407"), "\(connects)")
    }

    @Test("credentials held back until asked: the 407 challenge is answered once, on a fresh connection")
    func challengeAnsweredOnce() async throws {
        let fixture = try proxies()
        var proxy = Proxy(host: "127.0.0.1", port: fixture.authPort, credentials: Self.credentials)
        proxy.sendsCredentialsPreemptively = false
        let session = try session(proxy)
        let secure = token("challenge-tls")
        let plain = token("challenge-plain")
        #expect(try await session.request(fixture.originHTTPS + secure).serializingString().value.hasPrefix("hello"))
        #expect(try await session.request(fixture.originHTTP + plain).serializingString().value.hasPrefix("hello"))
        let connects = fixture.squidLines(containing: "CONNECT localhost:\(fixture.originHTTPSPort)", expected: 2)
        #expect(connects.contains { $0.contains("TCP_DENIED/407") } && connects.contains { $0.contains("TCP_TUNNEL/200") })
        let plainLines = fixture.squidLines(containing: plain, expected: 2)
        #expect(plainLines.count == 2 && plainLines[0].contains("407") && plainLines[1].contains("/200"), "\(plainLines)")
    }

    @Test("an https proxy: its certificate is checked against the proxy's CA setting, the origin's inside the tunnel")
    func httpsProxy() async throws {
        let fixture = try proxies()
        let trusted = Proxy(
            scheme: .https, host: "127.0.0.1", port: fixture.tlsPort, tls: TLSConfiguration(caCertificateFiles: [fixture.proxyCAFile]))
        let session = try session(trusted)
        let secure = session.request(fixture.originHTTPS + token("https-proxy-tls"))
        #expect(try await secure.serializingString().value == "hello through the proxy\n")
        // metrics.tls is the origin's handshake (TLS inside TLS), not the proxy's.
        let leaf = try #require(secure.metrics?.tls?.peerCertificates.first)
        #expect(Certificate(der: leaf).names.subject.contains("server"))
        #expect(try await session.request(fixture.originHTTP + token("https-proxy-plain")).serializingString().value.hasPrefix("hello"))

        // The origin's CA does not vouch for the proxy, nor the system bundle.
        for tls in [TLSConfiguration(caCertificateFiles: [fixture.originCAFile]), TLSConfiguration()] {
            let untrusting = try self.session(Proxy(scheme: .https, host: "127.0.0.1", port: fixture.tlsPort, tls: tls))
            let response = await untrusting.request(fixture.originHTTPS + token("https-proxy-untrusted")).serializingData().response
            let error = try #require(response.error?.transferError)
            guard case .certificateVerificationFailed = error.reason else {
                Issue.record("\(error)")
                continue
            }
            #expect(error.failedAtProxy && error.description.contains("certificate of the proxy https://127.0.0.1:\(fixture.tlsPort)"))
        }
    }

    @Test("a proxy that terminates TLS (squid ssl-bump) is refused by default, accepted when its CA is trusted, refused by pins")
    func interceptingProxy() async throws {
        let fixture = try proxies()
        let proxy = Proxy(host: "127.0.0.1", port: fixture.bumpPort)
        let refused = try await session(proxy).request(fixture.originHTTPS + token("bump-default")).serializingData().response
        let error = try #require(refused.error?.transferError)
        guard case .certificateVerificationFailed = error.reason else {
            Issue.record("a MITM was not refused: \(String(describing: refused.error))")
            return
        }
        #expect(!error.failedAtProxy && error.description.contains("certificate of localhost not trusted"))

        // The user trusts the intercepting CA (a corporate proxy): accepted, and the certificate
        // seen is the proxy's forgery.
        let tls = TLSConfiguration(caCertificateFiles: [fixture.originCAFile, fixture.bumpCAFile])
        let accepted = try session(proxy, tls: tls).request(fixture.originHTTPS + token("bump-trusted"))
        #expect(try await accepted.serializingString().value == "hello through the proxy\n")
        let forged = try #require(accepted.metrics?.tls?.verifiedPath.last)
        #expect(Certificate(der: forged).names.subject.contains("Intercepting Proxy CA"))

        // Pins on the origin's key refuse the forgery even then.
        let pin = try #require(try Certificate.load(contentsOf: fixture.directory + "/origin-server.pem").first?.publicKeyPin)
        let pinned = ServerTrustManager(evaluators: ["localhost": try PublicKeysTrustEvaluator(pins: [pin])])
        let response = try await session(proxy, tls: tls, trust: pinned).request(fixture.originHTTPS + token("bump-pinned"))
            .serializingData().response
        guard case .serverTrustEvaluationFailed(.evaluationFailed(_, let evaluator, _)) = response.error else {
            Issue.record("pins did not refuse the MITM: \(String(describing: response.error))")
            return
        }
        #expect(evaluator == "PublicKeysTrustEvaluator")
        // Direct, the same pins pass (the pin is right).
        var direct = SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [fixture.originCAFile]))
        direct.proxy = .direct
        let good = await Session(configuration: direct, serverTrustManager: pinned).request(fixture.originHTTPS + token("pinned-direct"))
            .serializingData().response
        #expect(good.response?.status.code == 200)
    }

    @Test("tinyproxy with Basic authentication: absolute form and CONNECT, a 1 MiB body intact")
    func tinyproxy() async throws {
        let fixture = try proxies()
        let credentials = ProxyCredentials(user: ProxyFixture.user, password: ProxyFixture.tinyproxyPassword)
        let session = try session(Proxy(host: "127.0.0.1", port: fixture.tinyproxyPort, credentials: credentials))
        let expected = try Data(contentsOf: URL(fileURLWithPath: fixture.directory + "/www/1m.bin"))
        #expect(try await session.request(fixture.originHTTP + "/1m.bin").serializingData().value == expected)
        #expect(try await session.request(fixture.originHTTPS + "/1m.bin").serializingData().value == expected)
        let denied = try await self.session(Proxy(host: "127.0.0.1", port: fixture.tinyproxyPort)).request(fixture.originHTTPS + "/1m.bin")
            .serializingData().response
        guard case .proxyAuthenticationRequired = denied.error?.transferError?.reason else {
            Issue.record("\(String(describing: denied.error))")
            return
        }
    }

    @Test("uploads through the proxy: the body arrives whole, in absolute form and through a tunnel")
    func uploads() async throws {
        let fixture = try proxies()
        let session = try session(Proxy(host: "127.0.0.1", port: fixture.authPort, credentials: Self.credentials))
        let body = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        for base in [fixture.originHTTP, fixture.originHTTPS] {
            let response = await session.upload(body, to: base + "/ingest/proxy-upload", method: .post).serializingData().response
            #expect(response.response?.status.code == 204, "\(base): \(String(describing: response.error))")
        }
        #expect(fixture.originLines(containing: "POST /ingest/proxy-upload", expected: 2).count == 2)
    }

    @Test("no_proxy and the per-request override send a request direct")
    func bypass() async throws {
        let fixture = try proxies()
        var settings = ProxySettings(all: Proxy(host: "127.0.0.1", port: fixture.openPort))
        settings.noProxy = NoProxyList(parsing: "example.invalid, 127.0.0.0/8")
        let session = Session(configuration: SessionConfiguration(proxy: settings))
        let bypassed = token("noproxy")
        _ = try await session.request(fixture.originHTTP + bypassed).serializingString().value
        #expect(fixture.originLines(containing: bypassed).count == 1)
        let proxied = token("override-proxied")
        var request = URLRequest(url: URL(string: fixture.originHTTP + proxied)!)
        request.proxy = ProxySettings(all: Proxy(host: "127.0.0.1", port: fixture.openPort))
        _ = try await session.request(request).serializingString().value
        let direct = token("override-direct")
        var directRequest = URLRequest(url: URL(string: fixture.originHTTP + direct)!)
        directRequest.proxy = .direct
        _ = try await Session(
            configuration: SessionConfiguration(proxy: ProxySettings(all: Proxy(host: "127.0.0.1", port: fixture.openPort)))
        )
        .request(directRequest).serializingString().value
        #expect(fixture.squidLines(containing: proxied).count == 1)
        // squid logs when a request completes; give a stray one time to show up.
        #expect(fixture.originLines(containing: direct).count == 1)
        try await Task.sleep(for: .milliseconds(300))
        #expect(
            fixture.squidLines(containing: bypassed, expected: 0).isEmpty && fixture.squidLines(containing: direct, expected: 0).isEmpty)
    }

    @Test("unreachable and unresolvable proxies: typed errors that name the proxy")
    func unreachable() async throws {
        let refused = await Session(
            configuration: SessionConfiguration(proxy: ProxySettings(all: Proxy(host: "127.0.0.1", port: freePort())))
        ).request("https://origin.example/").serializingData().response
        let error = try #require(refused.error?.transferError)
        guard case .connectFailed = error.reason else {
            Issue.record("\(error)")
            return
        }
        #expect(error.failedAtProxy && error.description.contains("cannot connect to the proxy http://127.0.0.1:"))
        let unknown = await Session(
            configuration: SessionConfiguration(proxy: ProxySettings(all: Proxy(host: "proxy.nonexistent.invalid", port: 3128)))
        ).request("http://origin.example/").serializingData().response
        let resolveError = try #require(unknown.error?.transferError)
        guard case .nameResolutionFailed = resolveError.reason else {
            Issue.record("\(resolveError)")
            return
        }
        #expect(resolveError.failedAtProxy && resolveError.description.contains("proxy http://proxy.nonexistent.invalid:3128"))
    }

    // MARK: - Hostile proxies

    func hostileSession(_ server: HostileServer, credentials: ProxyCredentials? = nil, preemptive: Bool = true) throws -> Session {
        var proxy = Proxy(host: "127.0.0.1", port: server.port, credentials: credentials)
        proxy.sendsCredentialsPreemptively = preemptive
        return try session(proxy)
    }

    @Test("a proxy that answers 407 forever: asked once, answered once, then a typed error (two connections, no loop)")
    func endless407() async throws {
        let fixture = try proxies()
        let server = try HostileServer { client in
            _ = client.readRequest()
            _ = client.send(
                "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\n\r\n")
        }
        let response = try await hostileSession(server, credentials: Self.credentials, preemptive: false)
            .request(fixture.originHTTPS + "/hello.txt").serializingData().response
        guard case .proxyAuthenticationRequired = response.error?.transferError?.reason else {
            Issue.record("\(String(describing: response.error))")
            return
        }
        #expect(server.connectionCount == 2)
    }

    @Test("CONNECT answered 200 with bytes behind it, a close mid-tunnel, a redirect, silence: each a clear error")
    func hostileTunnels() async throws {
        let fixture = try proxies()
        let cases: [(String, @Sendable (HostileServer.Client) -> Void, (TransferError) -> Bool)] = [
            (
                "200 then garbage",
                { client in
                    _ = client.readRequest()
                    _ = client.send("HTTP/1.1 200 Connection established\r\n\r\nGARBAGE-NOT-TLS")
                },
                { error in
                    if case .proxyTunnelFailed(let message) = error.reason { return message.contains("bytes after its 200") }
                    return false
                }
            ),
            (
                "garbage after the client spoke",
                { client in
                    _ = client.readRequest()
                    _ = client.send("HTTP/1.1 200 Connection established\r\n\r\n")
                    client.sleep(0.2)
                    _ = client.send("HTTP/1.1 200 OK\r\n\r\nthis is not a TLS record at all, not at all\r\n")
                },
                { error in
                    if case .tlsFailed = error.reason { return !error.failedAtProxy && error.phase == .tlsHandshake }
                    return false
                }
            ),
            (
                "closed mid-tunnel",
                { client in
                    _ = client.readRequest()
                    _ = client.send("HTTP/1.1 200 Connection established\r\n\r\n")
                    client.sleep(0.2)
                    client.close()
                },
                { error in
                    if case .tlsFailed = error.reason { return error.phase == .tlsHandshake }
                    return false
                }
            ),
            (
                "a redirect in answer to CONNECT",
                { client in
                    _ = client.readRequest()
                    _ = client.send("HTTP/1.1 302 Found\r\nLocation: http://portal.example/\r\nContent-Length: 0\r\n\r\n")
                },
                { error in
                    if case .proxyTunnelRefused(302, _) = error.reason { return error.failedAtProxy && error.phase == .openingTunnel }
                    return false
                }
            ),
            (
                "closed without an answer",
                { client in
                    _ = client.readRequest()
                    client.close()
                },
                { error in
                    if case .proxyTunnelFailed(let message) = error.reason { return message.contains("without answering") }
                    return false
                }
            ),
            (
                "not HTTP",
                { client in
                    _ = client.readRequest()
                    _ = client.send("SSH-2.0-OpenSSH_9.2\r\n")
                    client.sleep(0.2)
                },
                { error in
                    if case .proxyTunnelFailed(let message) = error.reason { return message.contains("not HTTP") }
                    return false
                }
            ),
        ]
        for (name, script, check) in cases {
            let server = try HostileServer(script: script)
            let response = try await hostileSession(server).request(fixture.originHTTPS + "/hello.txt").serializingData().response
            let error = try #require(response.error?.transferError, "\(name)")
            #expect(check(error), "\(name): \(error)")
            #expect(error.proxy == "http://127.0.0.1:\(server.port)", "\(name)")
        }
    }
}
