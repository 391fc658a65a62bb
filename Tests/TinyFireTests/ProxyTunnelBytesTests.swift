import Foundation
import Testing

@testable import TinyFire

/// A proxy speaks in a tunnel only before the client does if it injects: bytes after its 2xx
/// answer to CONNECT and before the client's first byte through the tunnel are refused in
/// whichever read they come, and what comes after the client spoke is judged by TLS, in an
/// error that names the proxy it came through.
@Suite("CONNECT: bytes from the proxy after its 2xx answer", .serialized)
struct ProxyTunnelBytesTests {
    func session(_ server: HostileServer) -> Session {
        Session(configuration: SessionConfiguration(proxy: ProxySettings(all: Proxy(host: "127.0.0.1", port: server.port))))
    }

    /// A 2xx answer of exactly `ProxyTunnelStep.readBufferSize` bytes: the client's read of it
    /// ends where it ends, and what follows is left for another read.
    static let fullReadAnswer: String = {
        let start = "HTTP/1.1 200 Connection established\r\nX-Padding: "
        let end = "\r\n\r\n"
        let padding = String(repeating: "p", count: 4096 - start.utf8.count - end.utf8.count)
        return start + padding + end
    }()

    @Test("bytes behind the 2xx answer in a later read, before the client spoke: a tunnel failure naming the proxy")
    func bytesInALaterRead() async throws {
        #expect(Self.fullReadAnswer.utf8.count == 4096)
        let server = try HostileServer { client in
            client.readRequest()
            // One write: the answer fills the client's read, the junk waits behind it.
            client.send(Self.fullReadAnswer + "JUNK-FROM-THE-PROXY")
            client.sleep(1)
        }
        let response = await session(server).request("https://origin.example:9/hello.txt").serializingData().response
        let error = try #require(response.error?.transferError)
        guard case .proxyTunnelFailed(let message) = error.reason else {
            Issue.record("\(error)")
            return
        }
        #expect(message.contains("the proxy sent 19 bytes after its 200 answer to CONNECT, before the tunnel was used"), "\(message)")
        #expect(error.failedAtProxy && error.proxy == "http://127.0.0.1:\(server.port)")
        #expect(error.description.contains("no tunnel through the proxy http://127.0.0.1:\(server.port)"), "\(error)")
    }

    @Test("bytes 200 ms after the 2xx answer, once the client sent its ClientHello: a TLS failure that names the proxy")
    func bytesAfterTheClientSpoke() async throws {
        let server = try HostileServer { client in
            client.readRequest()
            client.send("HTTP/1.1 200 Connection established\r\n\r\n")
            client.sleep(0.2)
            client.send("JUNK-FROM-THE-PROXY, not a TLS record at all\r\n")
            client.sleep(1)
        }
        let response = await session(server).request("https://origin.example:9/hello.txt").serializingData().response
        let error = try #require(response.error?.transferError)
        guard case .tlsFailed = error.reason else {
            Issue.record("\(error)")
            return
        }
        #expect(error.phase == .tlsHandshake && error.proxy == "http://127.0.0.1:\(server.port)")
        #expect(
            error.description.contains("TLS with origin.example through the tunnel of the proxy http://127.0.0.1:\(server.port) failed"),
            "\(error)")
    }
}
