import Foundation
import Synchronization
import Testing

@testable import TinyFire

/// Records what each evaluation saw, then defers to another evaluator.
final class RecordingEvaluator: ServerTrustEvaluating, @unchecked Sendable {
    let inner: any ServerTrustEvaluating
    let pathLengths = Mutex<[Int]>([])
    init(_ inner: any ServerTrustEvaluating) { self.inner = inner }
    func evaluate(_ trust: ServerTrust, forHost host: String) throws {
        pathLengths.withLock { $0.append(trust.certificates.count) }
        try inner.evaluate(trust, forHost: host)
    }
}

/// `openssl s_server -www` with the given certificate options, stopped by `stop()`.
struct OpenSSLServer {
    let port: Int
    let process: ChildProcess
    var base: String { "https://localhost:\(port)" }

    init(_ arguments: [String]) throws {
        let openssl = try #require(which("openssl"))
        port = freePort()
        process = try startProcess(openssl, ["s_server", "-accept", "127.0.0.1:\(port)", "-www", "-tls1_2", "-quiet"] + arguments)
        try waitForPort(port)
    }

    func stop() { process.stop() }
}

@Suite("Pins on the verified path, resumption judged like a full handshake", .serialized)
struct TrustPathTests {
    func trusting(_ tls: TLSFixture, _ evaluator: any ServerTrustEvaluating) -> Session {
        Session(
            configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [tls.caFile])),
            serverTrustManager: ServerTrustManager(evaluators: ["localhost": evaluator]))
    }

    func trustFailure<Value>(_ response: DataResponse<Value, TinyFireError>) -> [String]? {
        if case .serverTrustEvaluationFailed(.evaluationFailed(_, _, let reasons)) = response.error { return reasons }
        return nil
    }

    @Test("a MITM with a trusted certificate that appends the real server's certificate does not pass a pin of the real one")
    func appendedCertificateIsNotPinned() async throws {
        let tls = try tlsServer()
        let d = tls.directory
        // The attacker's own certificate (same trusted root, same name), the real server's
        // public certificate appended behind it.
        let mitm = try OpenSSLServer(["-cert", d + "/mitm.pem", "-key", d + "/mitm.key", "-cert_chain", d + "/server.pem"])
        defer { mitm.stop() }
        let serverCertificate = try Certificate.load(contentsOf: d + "/server.pem")
        let evaluators: [(String, any ServerTrustEvaluating)] = [
            ("key pin", try PublicKeysTrustEvaluator(keyFiles: [d + "/server.pub"])),
            (
                "key pin without default validation",
                try PublicKeysTrustEvaluator(keyFiles: [d + "/server.pub"], performDefaultValidation: false)
            ),
            ("certificate pin", PinnedCertificatesTrustEvaluator(certificates: serverCertificate)),
            (
                "certificate pin without default validation",
                PinnedCertificatesTrustEvaluator(certificates: serverCertificate, performDefaultValidation: false)
            ),
        ]
        for (name, evaluator) in evaluators {
            let response = await trusting(tls, evaluator).request("\(mitm.base)/").serializingData().response
            #expect(trustFailure(response) != nil, "\(name) accepted the MITM: \(String(describing: response.error))")
        }
        // The CLI's --pin is the same evaluator: exit 60.
        let pin = try #require(serverCertificate.first?.publicKeyPin)
        let cli = try fireAgent(["request", "--cacert", tls.caFile, "--pin", pin, "\(mitm.base)/"])
        #expect(cli.status == 60, "fire-agent --pin accepted the MITM: \(cli.stderr)")

        // The trust anchor's key is on the verified path: pinning it passes (the server does not
        // send the root), with and without default validation.
        for defaultValidation in [true, false] {
            let anchorPin = try PublicKeysTrustEvaluator(keyFiles: [tls.caFile], performDefaultValidation: defaultValidation)
            let response = await trusting(tls, anchorPin).request("https://localhost:\(tls.port)/hello.txt").serializingData().response
            #expect(response.error == nil, "anchor pin, default validation \(defaultValidation): \(String(describing: response.error))")
        }

        // Control: the real server with an unrelated certificate appended still passes.
        let real = try OpenSSLServer(["-cert", d + "/server.pem", "-key", d + "/server.key", "-cert_chain", d + "/mitm.pem"])
        defer { real.stop() }
        for (name, evaluator) in evaluators {
            let response = await trusting(tls, evaluator).request("\(real.base)/").serializingData().response
            #expect(response.error == nil, "\(name) refused the real server: \(String(describing: response.error))")
        }
    }

    @Test("acceptSelfSignedCertificates accepts a self-signed leaf only when the leaf itself is pinned")
    func selfSignedLeafMustBePinned() async throws {
        let tls = try tlsServer()
        let d = tls.directory
        let selfSigned = try Certificate.load(contentsOf: d + "/self.pem")
        let serverCertificate = try Certificate.load(contentsOf: d + "/server.pem")
        // A self-signed leaf with a pinned (real) certificate sent behind it.
        let server = try OpenSSLServer(["-cert", d + "/self.pem", "-key", d + "/self.key", "-cert_chain", d + "/server.pem"])
        defer { server.stop() }
        let pinsOther = PinnedCertificatesTrustEvaluator(certificates: serverCertificate, acceptSelfSignedCertificates: true)
        #expect(trustFailure(await trusting(tls, pinsOther).request("\(server.base)/").serializingData().response) != nil)
        let pinsLeaf = PinnedCertificatesTrustEvaluator(certificates: selfSigned, acceptSelfSignedCertificates: true)
        let accepted = await trusting(tls, pinsLeaf).request("\(server.base)/").serializingData().response
        #expect(accepted.error == nil, "\(String(describing: accepted.error))")
        // Not self-signed: a CA-issued leaf pinned with acceptSelfSignedCertificates still needs
        // its chain (here it verifies, so it passes through default validation).
        let caIssued = PinnedCertificatesTrustEvaluator(certificates: serverCertificate, acceptSelfSignedCertificates: true)
        await #expect(throws: Never.self) {
            try await trusting(tls, caIssued).request("https://localhost:\(tls.port)/hello.txt").serializingData().response.result.get()
        }
    }

    @Test("a resumed session is judged on the verified path of the handshake it resumes: an intermediate pin holds")
    func resumedSessionKeepsPath() async throws {
        let tls = try tlsServer()
        let recorder = RecordingEvaluator(try PublicKeysTrustEvaluator(keyFiles: [tls.directory + "/intermediate.pem"]))
        let session = trusting(tls, recorder)
        let first = session.request("https://localhost:\(tls.fullChainPort)/close")
        let firstResponse = await first.serializingData().response
        #expect(firstResponse.error == nil, "\(String(describing: firstResponse.error))")
        let second = session.request("https://localhost:\(tls.fullChainPort)/close")
        let secondResponse = await second.serializingData().response
        #expect(secondResponse.error == nil, "the resumed connection failed its pin: \(String(describing: secondResponse.error))")
        #expect(first.metrics?.tls?.resumed == false)
        #expect(second.metrics?.tls?.resumed == true)
        // Leaf, intermediate, root: the same path both times.
        #expect(recorder.pathLengths.withLock { $0 } == [3, 3])
        #expect(second.metrics?.tls?.verifiedPath.count == 3)
    }

    @Test("resumption is reported truthfully with session tickets, and not reported when the server resumes nothing")
    func ticketsResumeTruthfully() async throws {
        let tls = try tlsServer()
        let d = tls.directory
        for (arguments, expected) in [([String](), true), (["-no_ticket", "-no_cache"], false)] {
            let server = try OpenSSLServer(["-cert", d + "/server.pem", "-key", d + "/server.key"] + arguments)
            defer { server.stop() }
            let session = Session(configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [tls.caFile])))
            let first = session.request("\(server.base)/")
            await #expect(throws: Never.self) { try await first.serializingData().response.result.get() }
            let second = session.request("\(server.base)/")
            await #expect(throws: Never.self) { try await second.serializingData().response.result.get() }
            #expect(second.metrics?.reusedConnection == false, "s_server -www closes after each response")
            #expect(first.metrics?.tls?.resumed == false)
            #expect(second.metrics?.tls?.resumed == expected, "s_server \(arguments): resumed reported wrongly")
        }
    }

    @Test("revocation: an expired CRL or one from another issuer is a failure, not a skipped check; issuers from CA directories")
    func revocationIsNeverSkipped() async throws {
        let tls = try tlsServer()
        let d = tls.directory
        let url = "https://localhost:\(tls.port)/hello.txt"
        let expired = await trusting(tls, RevocationTrustEvaluator(crlFiles: [d + "/crl-expired.pem"])).request(url).serializingData()
            .response
        let expiredReasons = try #require(trustFailure(expired), "an expired CRL was accepted")
        #expect(expiredReasons.contains { $0.lowercased().contains("expired") }, "\(expiredReasons)")
        let other = await trusting(tls, RevocationTrustEvaluator(crlFiles: [d + "/crl-intermediate.pem"])).request(url).serializingData()
            .response
        let otherReasons = try #require(trustFailure(other), "a CRL from another issuer counted as a check")
        #expect(otherReasons.contains { $0.contains("no CRL from the leaf's issuer") }, "\(otherReasons)")

        // Trust anchors in a directory only: the CRL's issuer is found there.
        let directory = try makeTemporaryDirectory("crl-anchors")
        try FileManager.default.copyItem(atPath: tls.caFile, toPath: directory + "/root.pem")
        let fromDirectory = Session(
            configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [], caCertificateDirectories: [directory])),
            serverTrustManager: ServerTrustManager(evaluators: ["localhost": RevocationTrustEvaluator(crlFiles: [tls.crlFile])]))
        let good = await fromDirectory.request(url).serializingData().response
        #expect(good.error == nil, "\(String(describing: good.error))")
        let revoked = await fromDirectory.request("https://localhost:\(tls.mitmPort)/hello.txt").serializingData().response
        #expect(trustFailure(revoked)?.contains { $0.lowercased().contains("revoked") } == true, "\(String(describing: revoked.error))")
    }

    @Test("a close-delimited body over TLS that ends with a FIN but no close_notify is truncated, not complete")
    func tlsTruncation() async throws {
        let tls = try tlsServer()
        let directory = try makeTemporaryDirectory("tls-truncation")
        let script = directory + "/server.py"
        try Self.truncatingServer.write(toFile: script, atomically: true, encoding: .utf8)
        let python = try #require(which("python3"))
        let session = Session(configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [tls.caFile])))
        for mode in ["fin", "notify", "length-fin"] {
            let server = try ChildProcess(
                python, [script, tls.directory + "/server.pem", tls.directory + "/server.key", mode], stdout: .pipe, stderr: .null)
            defer { server.stop() }
            var buffer = [UInt8](repeating: 0, count: 16)
            let n = read(server.stdoutPipe, &buffer, buffer.count)
            let port = try #require(
                Int(String(decoding: buffer[0..<max(0, n)], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
            let response = await session.request("https://localhost:\(port)/").serializingString().response
            switch mode {
            case "fin":
                guard case .invalidResponse(.closeDelimitedBodyWithoutCloseNotify(let received)) = response.error?.transferError?.reason
                else {
                    Issue.record(
                        "a truncatable body was accepted: \(String(describing: response.error)) \(String(describing: response.value))")
                    continue
                }
                #expect(received == 24)
                #expect(response.error?.description.contains("without close_notify") == true)
            default:
                #expect(response.value == "the first half of a body", "\(mode): \(String(describing: response.error))")
            }
        }
    }

    /// A TLS server (Python's ssl module) answering one request per connection: `fin` sends a
    /// close-delimited body and ends with a TCP FIN and no close_notify; `notify` the same body
    /// with close_notify; `length-fin` a Content-Length body, then a FIN without close_notify.
    static let truncatingServer = """
        import os, socket, ssl, sys
        cert, key, mode = sys.argv[1], sys.argv[2], sys.argv[3]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        print(listener.getsockname()[1], flush=True)
        while True:
            raw, _ = listener.accept()
            try:
                twin = socket.socket(fileno=os.dup(raw.fileno()))
                tls = context.wrap_socket(raw, server_side=True)
                data = b""
                while b"\\r\\n\\r\\n" not in data:
                    chunk = tls.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                body = b"the first half of a body"
                framing = b"Content-Length: %d\\r\\n" % len(body) if mode == "length-fin" else b"Connection: close\\r\\n"
                tls.sendall(b"HTTP/1.1 200 OK\\r\\n" + framing + b"\\r\\n" + body)
                if mode == "notify":
                    tls.unwrap().close()
                else:
                    twin.shutdown(socket.SHUT_RDWR)
                    tls.close()
                twin.close()
            except Exception as error:
                print("error", error, file=sys.stderr, flush=True)
        """
}
