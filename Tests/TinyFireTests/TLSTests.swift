import Foundation
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

    func trusting(_ server: TLSFixture, _ evaluators: [String: any ServerTrustEvaluating]) -> Session {
        Session(
            configuration: SessionConfiguration(tls: TLSConfiguration(caCertificateFiles: [server.caFile])),
            serverTrustManager: ServerTrustManager(evaluators: evaluators))
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
        #expect(failure.evaluator == "PublicKeysTrustEvaluator" && failure.reasons[0].hasPrefix("no public key of the chain is pinned"))
        #expect(throws: TinyFireError.self) { try PublicKeysTrustEvaluator(pins: ["sha1//abc"]) }
    }

    @Test("pinned certificates, self-signed acceptance, default evaluator without host check, composite, disabled")
    func evaluators() async throws {
        let server = try tlsServer()
        let serverCertificate = try Certificate.load(contentsOf: server.directory + "/server.pem")
        let selfSigned = try Certificate.load(contentsOf: server.directory + "/self.pem")
        let pinned = trusting(server, ["localhost": PinnedCertificatesTrustEvaluator(certificates: serverCertificate)])
        #expect(await pinned.request("https://localhost:\(server.port)/hello.txt").serializingResponse().response.error == nil)
        let wrong = await pinned.request("https://localhost:\(server.mitmPort)/hello.txt").serializingResponse().response
        #expect(evaluatorFailure(wrong)?.evaluator == "PinnedCertificatesTrustEvaluator")

        let strict = trusting(server, ["localhost": PinnedCertificatesTrustEvaluator(certificates: selfSigned)])
        let refused = await strict.request("https://localhost:\(server.selfSignedPort)/hello.txt").serializingResponse().response
        #expect(evaluatorFailure(refused)?.reasons.isEmpty == false)
        let accepting = trusting(
            server, ["localhost": PinnedCertificatesTrustEvaluator(certificates: selfSigned, acceptSelfSignedCertificates: true)])
        #expect(await accepting.request("https://localhost:\(server.selfSignedPort)/hello.txt").serializingResponse().response.error == nil)

        // 127.0.0.1 on the certificate that only spells it as a DNS name: fine without host
        // validation, refused with it.
        let noHost = trusting(server, ["127.0.0.1": DefaultTrustEvaluator(validateHost: false)])
        #expect(await noHost.request("https://127.0.0.1:\(server.dnsSpellingPort)/hello.txt").serializingResponse().response.error == nil)
        let withHost = trusting(server, ["127.0.0.1": DefaultTrustEvaluator()])
        let hostRefused = await withHost.request("https://127.0.0.1:\(server.dnsSpellingPort)/hello.txt").serializingResponse().response
        #expect(evaluatorFailure(hostRefused)?.evaluator == "DefaultTrustEvaluator")

        let pin = try #require(serverCertificate.first?.publicKeyPin)
        let composite = trusting(
            server,
            ["localhost": CompositeTrustEvaluator(evaluators: [DefaultTrustEvaluator(), try PublicKeysTrustEvaluator(pins: [pin])])])
        #expect(await composite.request("https://localhost:\(server.port)/hello.txt").serializingResponse().response.error == nil)
        #expect(
            evaluatorFailure(await composite.request("https://localhost:\(server.mitmPort)/hello.txt").serializingResponse().response)
                != nil)

        let logs = LogCapture()
        let disabled = trusting(server, ["localhost": DisabledTrustEvaluator(logger: logs.logger)])
        #expect(await disabled.request("https://localhost:\(server.selfSignedPort)/hello.txt").serializingResponse().response.error == nil)
        #expect(logs.messages.contains { $0.contains("NOT verified") && $0.contains("host=localhost") })

        let unknown = await trusting(server, [:]).request("https://localhost:\(server.port)/hello.txt").serializingResponse().response
        guard case .serverTrustEvaluationFailed(.noRequiredEvaluator("localhost")) = unknown.error else {
            Issue.record("unexpected \(String(describing: unknown.error))")
            return
        }
    }
}
