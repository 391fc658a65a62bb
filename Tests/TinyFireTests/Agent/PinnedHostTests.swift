import Foundation
import Synchronization
import Testing

@testable import FireAgent
@testable import TinyFireCore

/// `server.pins` hold for `server.url`'s host, judged by the host each connection goes to: a
/// redirect to the fleet server meets its pins wherever the request started, and another host
/// is judged by the CA bundle alone (docs/CONFIG.md, docs/ARCHITECTURE.md).
@Suite("server.pins: judged by the host each connection went to", .serialized)
struct PinnedHostTests {
    /// The agent's config with `server.url` on `localhost` (nginx's genuine key pinned) and the
    /// test root as its CA.
    func config(_ tls: TLSFixture) throws -> AgentConfig {
        let der = try Data(contentsOf: URL(filePath: tls.directory + "/server.der"))
        let digest = try #require(der.withUnsafeBytes { X509.spkiSHA256(certificate: $0) })
        let text = """
            { device: { id: 'board-1' }, telemetry: { influx: { database: 'fleet' } },
              server: { url: 'https://localhost:\(tls.port)', caFile: '\(tls.caFile)', pins: ['sha256//\(Base64.encode(digest))'] } }
            """
        return try AgentConfig.parse(Data(text.utf8), file: "test.json5", machineIDPath: "/nonexistent", environment: { _ in nil })
    }

    @Test("a firmware fetch redirected from another host to the fleet server's host meets its pins")
    func redirectToThePinnedHost() throws {
        let tls = try tlsServer()
        let client = try FirmwareClient(config: try config(tls), userAgent: "pins-test")
        defer { client.shutdown() }
        // An unpinned host (plain http on 127.0.0.1) that redirects to the fleet server's
        // host: to nginx with the pinned key, or to nginx with another key the CA also signed.
        let redirector = try HostileServer { client in
            let head = client.readRequest()
            let port = head.contains("/to-mitm") ? tls.mitmPort : tls.port
            client.send("HTTP/1.1 302 Found\r\nLocation: https://localhost:\(port)/hello.txt\r\nContent-Length: 0\r\n\r\n")
        }
        func fetch(_ url: String) throws -> FirmwareClient.Fetched {
            client.fetch(try #require(AbsoluteURL(url)), headers: HTTPHeaders(), limit: 64 << 10, timeout: .seconds(30))
        }
        let genuine = try fetch("\(redirector.base)/to-genuine")
        guard case .answered(200, _, let body) = genuine else {
            Issue.record("the pinned server through a redirect: \(genuine)")
            return
        }
        #expect(body == Array("hello over tls\n".utf8))
        let refused = try fetch("\(redirector.base)/to-mitm")
        guard case .failed(let reason, _) = refused else {
            Issue.record("another key for the pinned host, reached through a redirect, was accepted: \(refused)")
            return
        }
        #expect(reason.contains("server.pins: no public key of localhost's verified path is pinned"), "\(reason)")
        // Directly, the same; and the other key under another host name (its IP address, which
        // its certificate lists) is judged by the CA alone.
        guard case .failed = try fetch("https://localhost:\(tls.mitmPort)/hello.txt") else {
            Issue.record("the pinned host with another key was accepted")
            return
        }
        guard case .answered(200, _, _) = try fetch("https://127.0.0.1:\(tls.mitmPort)/hello.txt") else {
            Issue.record("an unpinned host was refused")
            return
        }
    }

    @Test("a queued record is judged by its own host: pins for the fleet server's, the CA for another")
    func queuedRecordsByHost() async throws {
        let tls = try tlsServer()
        let config = try config(tls)
        let client = try FirmwareClient(config: config, userAgent: "pins-test")
        defer { client.shutdown() }
        let pins = try FleetServer.pinDigests(config.server.pins)
        let sender = EngineQueueSender(engine: client.engine, trustForHost: FleetServer.pinnedTrust(pins: pins, host: "localhost"))
        func send(_ url: String) async -> QueueReply {
            await withCheckedContinuation { continuation in
                sender.sendQueued(QueuedSend(method: "GET", url: url, headers: HTTPHeaders(), body: .none, bodyLimit: 1024)) {
                    continuation.resume(returning: $0)
                }
            }
        }
        guard case .answered(let response, _) = await send("https://127.0.0.1:\(tls.mitmPort)/hello.txt") else {
            Issue.record("a record to another host met the fleet server's pins")
            return
        }
        #expect(response.status.code == 200)
        guard case .noResponse(let reason) = await send("https://localhost:\(tls.mitmPort)/hello.txt") else {
            Issue.record("a record to the pinned host with another key was delivered")
            return
        }
        #expect(reason.contains("server.pins"), "\(reason)")
        guard case .answered = await send("https://localhost:\(tls.port)/hello.txt") else {
            Issue.record("the pinned host with its pinned key was refused")
            return
        }
    }

    @Test("host spellings compare without case, brackets or a trailing dot; no pins: no judge")
    func hostSpellings() {
        let judge = FleetServer.pinnedTrust(pins: [[UInt8](repeating: 1, count: 32)], host: "Fleet.Example")
        for host in ["fleet.example", "FLEET.EXAMPLE.", "fleet.example."] { #expect(judge(host) != nil, "\(host)") }
        for host in ["cdn.example", "fleet.example.cdn", "example"] { #expect(judge(host) == nil, "\(host)") }
        let v6 = FleetServer.pinnedTrust(pins: [[UInt8](repeating: 1, count: 32)], host: "[fd00::1]")
        #expect(v6("fd00::1") != nil && v6("[FD00::1]") != nil)
        #expect(FleetServer.pinnedTrust(pins: [], host: "fleet.example")("fleet.example") == nil)
    }
}
