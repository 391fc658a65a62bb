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
}
