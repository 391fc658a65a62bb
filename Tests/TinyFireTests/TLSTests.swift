import Foundation
import Synchronization
import Testing

@testable import TinyFire

@Suite("TLS on mbedTLS", .serialized)
struct TLSTests {
    func session(_ server: TLSFixture) -> Session {
        Session(configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [server.caFile])))
    }

    @Test("https by name and by IP address against nginx, trusting the test root")
    func httpsWorks() async throws {
        let server = try tlsServer()
        let session = session(server)
        let byName = session.request("https://localhost:\(server.port)/hello.txt")
        let text = try await byName.serializingString().value
        #expect(text == "hello over tls\n")
        let tls = try #require(byName.metrics?.tls)
        #expect(tls.version == "TLSv1.2")
        #expect(!tls.cipherSuite.isEmpty && tls.peerCertificates.count >= 1)
        #expect(byName.metrics?.tlsHandshake != nil)
        let byAddress = try await session.request("https://127.0.0.1:\(server.port)/hello.txt").serializingString().value
        #expect(byAddress == "hello over tls\n")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-ca-dir-\(getpid())").path
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try? FileManager.default.removeItem(atPath: directory + "/root.pem")
        try FileManager.default.copyItem(atPath: server.caFile, toPath: directory + "/root.pem")
        let fromDirectory = Session(
            configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [], caCertificateDirectories: [directory])))
        #expect(
            try await fromDirectory.request("https://localhost:\(server.port)/hello.txt").serializingString().value == "hello over tls\n")
    }

    @Test("the system CA bundle does not trust the test root: a typed error with mbedTLS's reasons")
    func untrusted() async throws {
        let server = try tlsServer()
        let response = await Session().request("https://localhost:\(server.port)/hello.txt").serializingData().response
        guard case .certificateVerificationFailed(let reasons) = response.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect(reasons.contains { $0.lowercased().contains("not correctly signed") || $0.lowercased().contains("trusted") })
        #expect(response.error?.transferError?.phase == .tlsHandshake)
        // What the refused connection took is in the metrics (the socket opened before the handshake).
        #expect(response.metrics?.nameLookup != nil && response.metrics?.connect != nil, "\(String(describing: response.metrics))")
    }

    @Test("an address is not accepted on a DNS name that spells it")
    func ipAddressNeedsIPSAN() async throws {
        let server = try tlsServer()
        let response = await session(server).request("https://127.0.0.1:\(server.dnsSpellingPort)/hello.txt").serializingData().response
        guard case .certificateVerificationFailed(let reasons) = response.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect(reasons == ["the certificate has no iPAddress entry for 127.0.0.1"])
    }

    @Test("a reconnect resumes the TLS session")
    func resumption() async throws {
        let server = try tlsServer()
        let session = session(server)
        let first = session.request("https://localhost:\(server.port)/close")
        _ = try await first.serializingString().value
        let second = session.request("https://localhost:\(server.port)/hello.txt")
        _ = try await second.serializingString().value
        #expect(first.metrics?.tls?.resumed == false)
        #expect(second.metrics?.reusedConnection == false)
        #expect(second.metrics?.tls?.resumed == true)
    }

    @Test("a missing CA file is an invalid TLS configuration that names it")
    func missingCAFile() async throws {
        let server = try tlsServer()
        let session = Session(configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: ["/nonexistent/ca.pem"])))
        let response = await session.request("https://localhost:\(server.port)/hello.txt").serializingData().response
        guard case .invalidTLSConfiguration(let reason) = response.error else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect(reason.contains("/nonexistent/ca.pem"))
    }

    func trusting(
        _ server: TLSFixture, _ evaluators: [String: any ServerTrustEvaluating], handshakeTimeout: Duration = .seconds(30)
    ) -> Session {
        Session(
            configuration: SessionConfiguration(
                tls: TLSConfiguration(caCertificateFiles: [server.caFile], handshakeTimeout: handshakeTimeout)),
            serverTrustManager: ServerTrustManager(evaluators: evaluators))
    }

    /// An evaluator that blocks until the test opens its gate (a 300 s hang guard), then validates.
    final class GatedEvaluator: ServerTrustEvaluating, @unchecked Sendable {
        let entered = Atomic<Bool>(false)
        let gate = DispatchSemaphore(value: 0)
        let timedOut = Atomic<Bool>(false)

        func evaluate(_ trust: ServerTrust, forHost host: String) throws {
            entered.store(true, ordering: .releasing)
            // A hang guard, not a pass mark: the test opens the gate once the other transfer is
            // done. Under qemu, while every suite starts at once, that transfer alone has taken
            // over 30 s (ci30, ci32), so the guard is far longer.
            if gate.wait(timeout: .now() + 300) == .timedOut { timedOut.store(true, ordering: .relaxed) }
            try DefaultTrustEvaluator().evaluate(trust, forHost: host)
        }
    }

    @Test("a slow trust evaluator holds up its own connection only: another transfer of the session completes meanwhile")
    func slowEvaluatorDoesNotStall() async throws {
        let server = try tlsServer()
        let plain = try nginx()
        let evaluator = GatedEvaluator()
        // The handshake timeout bounds the evaluation too: it must outlast the gate, which stays
        // closed for as long as the other transfer takes (over 30 s under qemu at start-up).
        let session = trusting(server, ["localhost": evaluator], handshakeTimeout: .seconds(600))
        let secure = Task { await session.request("https://localhost:\(server.port)/hello.txt").serializingString().response }
        // Polled, not awaited on a semaphore: no thread of the shared pool is blocked meanwhile.
        let entered = await eventually(within: .seconds(60)) { evaluator.entered.load(ordering: .acquiring) }
        #expect(entered, "the evaluator was never called")
        // The evaluator is blocked now: a plain request of the same session must still finish.
        let other = await session.request("\(plain.base)/hello.txt").serializingString().response
        evaluator.gate.signal()
        #expect(other.value == "hello\n")
        let waited = evaluator.timedOut.load(ordering: .relaxed)
        #expect(!waited, "the plain request waited for the evaluator")
        #expect(await secure.value.value == "hello over tls\n")
    }

    func evaluatorFailure(_ response: DataResponse<Data?, TinyFireError>) -> (evaluator: String, reasons: [String])? {
        if case .serverTrustEvaluationFailed(.evaluationFailed(_, let evaluator, let reasons)) = response.error {
            return (evaluator, reasons)
        }
        return nil
    }

    @Test("public-key pins: the right key passes, a MITM key signed by the same trusted CA fails")
    func publicKeyPins() async throws {
        let server = try tlsServer()
        let pin = try #require(try Certificate.load(contentsOf: server.directory + "/server.pem").first?.publicKeyPin)
        let backup = "sha256//" + Data(repeating: 7, count: 32).base64EncodedString()
        let session = trusting(server, ["localhost": try PublicKeysTrustEvaluator(pins: [backup + ";" + pin])])
        let good = await session.request("https://localhost:\(server.port)/hello.txt").serializingResponse().response
        #expect(good.response?.status.code == 200)
        let mitm = await session.request("https://localhost:\(server.mitmPort)/hello.txt").serializingResponse().response
        let failure = try #require(evaluatorFailure(mitm))
        #expect(
            failure.evaluator == "PublicKeysTrustEvaluator" && failure.reasons[0].hasPrefix("no public key of the verified path is pinned"))
        #expect(throws: TinyFireError.self) { try PublicKeysTrustEvaluator(pins: ["sha1//abc"]) }
        // The same pin from a PEM public-key file, and the certificate read as DER.
        let fromFile = trusting(server, ["localhost": try PublicKeysTrustEvaluator(keyFiles: [server.directory + "/server.pub"])])
        await #expect(throws: Never.self) {
            try await fromFile.request("https://localhost:\(server.port)/hello.txt").serializingResponse().response.result.get()
        }
        #expect(try Certificate.load(contentsOf: server.directory + "/server.der").first?.publicKeyPin == pin)
        #expect(throws: TinyFireError.self) { try PublicKeysTrustEvaluator(keyFiles: ["/nonexistent.pub"]) }
    }

    @Test("pinned certificates, self-signed acceptance, default evaluator without host check, composite, disabled")
    func evaluators() async throws {
        let server = try tlsServer()
        let serverCertificate = try Certificate.load(contentsOf: server.directory + "/server.pem")
        let selfSigned = try Certificate.load(contentsOf: server.directory + "/self.pem")
        let pinned = trusting(server, ["localhost": PinnedCertificatesTrustEvaluator(certificates: serverCertificate)])
        await #expect(throws: Never.self) {
            try await pinned.request("https://localhost:\(server.port)/hello.txt").serializingResponse().response.result.get()
        }
        let wrong = await pinned.request("https://localhost:\(server.mitmPort)/hello.txt").serializingResponse().response
        #expect(evaluatorFailure(wrong)?.evaluator == "PinnedCertificatesTrustEvaluator")

        let strict = trusting(server, ["localhost": PinnedCertificatesTrustEvaluator(certificates: selfSigned)])
        let refused = await strict.request("https://localhost:\(server.selfSignedPort)/hello.txt").serializingResponse().response
        #expect(evaluatorFailure(refused)?.reasons.isEmpty == false)
        let accepting = trusting(
            server, ["localhost": PinnedCertificatesTrustEvaluator(certificates: selfSigned, acceptSelfSignedCertificates: true)])
        await #expect(throws: Never.self) {
            try await accepting.request("https://localhost:\(server.selfSignedPort)/hello.txt").serializingResponse().response.result.get()
        }

        // 127.0.0.1 on the certificate that only spells it as a DNS name: fine without host
        // validation, refused with it.
        let noHost = trusting(server, ["127.0.0.1": DefaultTrustEvaluator(validateHost: false)])
        await #expect(throws: Never.self) {
            try await noHost.request("https://127.0.0.1:\(server.dnsSpellingPort)/hello.txt").serializingResponse().response.result.get()
        }
        let withHost = trusting(server, ["127.0.0.1": DefaultTrustEvaluator()])
        let hostRefused = await withHost.request("https://127.0.0.1:\(server.dnsSpellingPort)/hello.txt").serializingResponse().response
        #expect(evaluatorFailure(hostRefused)?.evaluator == "DefaultTrustEvaluator")

        let pin = try #require(serverCertificate.first?.publicKeyPin)
        let composite = trusting(
            server,
            ["localhost": CompositeTrustEvaluator(evaluators: [DefaultTrustEvaluator(), try PublicKeysTrustEvaluator(pins: [pin])])])
        await #expect(throws: Never.self) {
            try await composite.request("https://localhost:\(server.port)/hello.txt").serializingResponse().response.result.get()
        }
        #expect(
            evaluatorFailure(await composite.request("https://localhost:\(server.mitmPort)/hello.txt").serializingResponse().response)
                != nil)

        let logs = LogCapture()
        let disabled = trusting(server, ["localhost": DisabledTrustEvaluator(logger: logs.logger)])
        await #expect(throws: Never.self) {
            try await disabled.request("https://localhost:\(server.selfSignedPort)/hello.txt").serializingResponse().response.result.get()
        }
        #expect(logs.messages.contains { $0.contains("NOT verified") && $0.contains("host=localhost") })

        let unknown = await trusting(server, [:]).request("https://localhost:\(server.port)/hello.txt").serializingResponse().response
        guard case .serverTrustEvaluationFailed(.noRequiredEvaluator("localhost")) = unknown.error else {
            Issue.record("unexpected \(String(describing: unknown.error))")
            return
        }
    }

    @Test("mutual TLS: the server sees the device certificate; without one it refuses")
    func mutualTLS() async throws {
        let server = try tlsServer()
        let device = Session(
            configuration: SessionConfiguration(
                tls: TLSConfiguration(
                    caCertificateFiles: [server.caFile], clientCertificateFile: server.directory + "/client.pem",
                    clientKeyFile: server.directory + "/client.key")))
        let whoami = try await device.request("https://localhost:\(server.mutualPort)/whoami").validate().serializingString().value
        #expect(whoami == "CN=client\n")
        let anonymous = await session(server).request("https://localhost:\(server.mutualPort)/whoami").validate().serializingString()
            .response
        #expect(anonymous.error?.responseCode == 400)
        let broken = await Session(
            configuration: SessionConfiguration(
                tls: TLSConfiguration(caCertificateFiles: [server.caFile], clientCertificateFile: server.directory + "/client.pem"))
        ).request("https://localhost:\(server.mutualPort)/whoami").serializingString().response
        guard case .invalidTLSConfiguration(let reason) = broken.error else {
            Issue.record("unexpected \(String(describing: broken.error))")
            return
        }
        #expect(reason.contains("both a certificate file and a key file"))
    }

    @Test("a plain-HTTP server on an https URL is a TLS error with mbedTLS's message")
    func notTLS() async throws {
        let plain = try nginx()
        let response = await Session().request("https://127.0.0.1:\(plain.port)/hello.txt").serializingData().response
        guard case .tlsFailed(_, let message) = response.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
        #expect(!message.isEmpty && response.error?.transferError?.phase == .tlsHandshake)
    }

    @Test("fire-agent request: --cacert, --pin, --insecure, and TLS details with -v")
    func cli() throws {
        let server = try tlsServer()
        let url = "https://localhost:\(server.port)/hello.txt"
        let untrusted = try fireAgent(["request", url])
        #expect(untrusted.status == 60)
        #expect(untrusted.stderr.contains("not trusted"))
        let trusted = try fireAgent(["request", "-v", "--cacert", server.caFile, url])
        #expect(trusted.status == 0 && trusted.stdout == Data("hello over tls\n".utf8))
        #expect(trusted.stderr.contains("* TLS TLSv1.2, "))
        #expect(trusted.stderr.contains("* certificate issuer: CN=TinyFire Test Root"))
        let pin = try #require(try Certificate.load(contentsOf: server.directory + "/server.pem").first?.publicKeyPin)
        #expect(trusted.stderr.contains("* public key pin: \(pin)"))
        #expect(try fireAgent(["request", "--cacert", server.caFile, "--pin", pin, url]).status == 0)
        let mitm = try fireAgent(["request", "--cacert", server.caFile, "--pin", pin, "https://localhost:\(server.mitmPort)/hello.txt"])
        #expect(mitm.status == 60 && mitm.stderr.contains("PublicKeysTrustEvaluator"))
        let insecure = try fireAgent(["request", "--insecure", "https://localhost:\(server.selfSignedPort)/hello.txt"])
        #expect(insecure.status == 0 && insecure.stderr.contains("WARNING: --insecure"))
        let mutual = try fireAgent([
            "request", "--cacert", server.caFile, "--cert", server.directory + "/client.pem", "--key", server.directory + "/client.key",
            "https://localhost:\(server.mutualPort)/whoami",
        ])
        #expect(mutual.status == 0 && mutual.stdout == Data("CN=client\n".utf8))
    }

    @Test("expired certificates and missing intermediates fail; a full chain passes")
    func chains() async throws {
        let server = try tlsServer()
        let session = session(server)
        let expired = await session.request("https://localhost:\(server.expiredPort)/hello.txt").serializingData().response
        guard case .certificateVerificationFailed(let reasons) = expired.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: expired.error))")
            return
        }
        #expect(reasons.contains { $0.lowercased().contains("expired") })
        let missing = await session.request("https://localhost:\(server.missingIntermediatePort)/hello.txt").serializingData().response
        guard case .certificateVerificationFailed = missing.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: missing.error))")
            return
        }
        let wrongName = await session.request("https://localhost:\(server.dnsSpellingPort)/hello.txt").serializingData().response
        guard case .certificateVerificationFailed(let nameReasons) = wrongName.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: wrongName.error))")
            return
        }
        #expect(nameReasons.contains { $0.contains("CN") || $0.lowercased().contains("name") })
        let full = try await session.request("https://localhost:\(server.fullChainPort)/hello.txt").serializingString().value
        #expect(full == "hello over tls\n")
    }

    @Test("revocation: a CRL in the evaluator or in the session configuration refuses a revoked certificate")
    func revocation() async throws {
        let server = try tlsServer()
        let evaluator = RevocationTrustEvaluator(crlFiles: [server.crlFile])
        let session = trusting(server, ["localhost": evaluator])
        await #expect(throws: Never.self) {
            try await session.request("https://localhost:\(server.port)/hello.txt").serializingResponse().response.result.get()
        }
        let revoked = await session.request("https://localhost:\(server.mitmPort)/hello.txt").serializingResponse().response
        let failure = try #require(evaluatorFailure(revoked))
        #expect(failure.evaluator == "RevocationTrustEvaluator" && failure.reasons.contains { $0.lowercased().contains("revoked") })
        let missingCRL = trusting(server, ["localhost": RevocationTrustEvaluator(crlFiles: ["/nonexistent.crl"])])
        let unreadable = await missingCRL.request("https://localhost:\(server.port)/hello.txt").serializingResponse().response
        #expect(evaluatorFailure(unreadable)?.reasons.first?.contains("/nonexistent.crl") == true)

        let configured = Session(
            configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [server.caFile], crlFiles: [server.crlFile])))
        let sessionWide = await configured.request("https://localhost:\(server.mitmPort)/hello.txt").serializingResponse().response
        guard case .certificateVerificationFailed(let reasons) = sessionWide.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: sessionWide.error))")
            return
        }
        #expect(reasons.contains { $0.lowercased().contains("revoked") })
    }

    @Test("a server that accepts TCP but never speaks TLS hits the handshake timeout")
    func handshakeTimeout() async throws {
        let server = try HostileServer { client in client.sleep(3) }
        let session = Session(configuration: SessionConfiguration(tls: TLSConfiguration(handshakeTimeout: .milliseconds(300))))
        let response = await session.request("https://127.0.0.1:\(server.port)/").serializingData().response
        guard case .timedOut(.tlsHandshake, _) = response.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: response.error))")
            return
        }
    }

    @Test("an https URL redirecting to http is refused unless allowed")
    func insecureRedirect() async throws {
        let server = try tlsServer()
        let refused = await session(server).request("https://localhost:\(server.port)/to-http").serializingData().response
        guard case .insecureRedirect(let location) = refused.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: refused.error))")
            return
        }
        #expect(location == "http://127.0.0.1:1/hello.txt")
        var configuration = SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [server.caFile]))
        configuration.allowsInsecureRedirects = true
        let allowed = await Session(configuration: configuration).request("https://localhost:\(server.port)/to-http").serializingData()
            .response
        guard case .connectFailed = allowed.error?.transferError?.reason else {
            Issue.record("unexpected \(String(describing: allowed.error))")
            return
        }
        #expect(allowed.metrics?.redirects == ["http://127.0.0.1:1/hello.txt"])
    }

    @Test("openssl s_server as the peer: handshake, HTTP/1.0 read-until-close response, pin")
    func opensslServer() async throws {
        let server = try tlsServer()
        let pin = try #require(try Certificate.load(contentsOf: server.directory + "/server.pem").first?.publicKeyPin)
        let session = trusting(server, ["localhost": try PublicKeysTrustEvaluator(pins: [pin])])
        let request = session.request("https://localhost:\(server.sServerPort)/")
        let text = try await request.validate().serializingString().value
        #expect(text.contains("s_server"))
        #expect(request.metrics?.tls?.version == "TLSv1.2")
    }
}

@Suite("Uploads, resume and streams over https", .serialized)
struct TLSTransferTests {
    func session(_ server: TLSFixture) -> Session {
        Session(configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [server.caFile])))
    }

    @Test("a chunked stream upload and a spilled multipart form go through TLS (nginx in front of httpbin)")
    func uploads() async throws {
        let server = try tlsServer()
        let base = "https://localhost:\(server.port)/httpbin"
        var generator = SplitMix64(seed: 11)
        let payload = Data((0..<(200 * 1024 + 3)).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        let echo = try await session(server).upload(DataByteStream(payload), to: "\(base)/anything", method: .put)
            .validate().serializingDecodable(Echo.self).value
        let sent = try #require(echo.data.flatMap { $0.split(separator: ",").last }.flatMap { Data(base64Encoded: String($0)) })
        #expect(sent == payload)

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-tls-part-\(getpid()).txt")
        let text = String(repeating: "tls multipart ", count: 20_000)
        try Data(text.utf8).write(to: file)
        let spill = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-tls-spill-\(getpid())")
        try? FileManager.default.removeItem(at: spill)
        try FileManager.default.createDirectory(at: spill, withIntermediateDirectories: true)
        let form = MultipartFormData(temporaryDirectory: spill)
        form.append(Data("7".utf8), withName: "board")
        form.append(file, withName: "log")
        let multipart = try await session(server).upload(multipartFormData: form, to: "\(base)/post", usingThreshold: 1024)
            .validate().serializingDecodable(MultipartEcho.self).value
        #expect(multipart.form == ["board": .one("7")])
        #expect(multipart.files["log"] == text)
        #expect(try FileManager.default.contentsOfDirectory(atPath: spill.path).isEmpty)
    }

    @Test("resume over https: only the missing bytes, appended exactly")
    func resume() async throws {
        let server = try tlsServer()
        var generator = SplitMix64(seed: 12)
        let body = Data((0..<(600 * 1024)).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        try body.write(to: URL(filePath: server.directory + "/www/tls-fw.bin"))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-tls-resume-\(getpid())")
        try? FileManager.default.removeItem(at: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let partial = directory.appendingPathComponent(".partial")
        try body.prefix(250_000).write(to: partial)
        let url = "https://localhost:\(server.port)/tls-fw.bin"
        let head = await session(server).request(url, method: .head).serializingData(emptyRequestMethods: [.head]).response
        let etag = try #require(head.response?.headerFields[.eTag])
        let data = DownloadResumeData(url: URL(string: url)!, partialFile: partial.path, bytesOnDisk: 250_000, entityTag: etag).data
        let target = directory.appendingPathComponent("fw.bin")
        let request = session(server).download(resumingWith: data) { _, _ in (target, []) }
        let response = await request.validate().downloadResponse
        #expect(response.error == nil, "\(String(describing: response.error))")
        #expect(response.response?.status.code == 206)
        #expect(request.metrics?.responseBodyBytes == UInt64(body.count - 250_000))
        #expect(try Data(contentsOf: target) == body)
    }
}
