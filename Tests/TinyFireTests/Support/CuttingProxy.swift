import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A forwarding proxy in front of a real server (nginx) that cuts its first response short:
/// after `cutAfter` body bytes it closes the client connection (or stalls, for cancel tests).
/// Later connections are forwarded whole. Requests go upstream with `Connection: close`, so
/// each response ends when nginx closes.
final class CuttingProxy: @unchecked Sendable {
    enum Cut: Sendable {
        /// Close the client connection (FIN) after this many body bytes.
        case close(after: Int)
        /// Forward this many body bytes, then hold the connection open without sending.
        case stall(after: Int)
    }

    private let server: HostileServer
    private final class Log: Sendable {
        let heads = Mutex<[String]>([])
    }
    private let log: Log
    /// The request heads the proxy saw, in order.
    var heads: [String] { log.heads.withLock { $0 } }

    var port: Int { server.port }

    /// - Parameters:
    ///   - upstreamPort: nginx's port.
    ///   - cut: what happens to the first response.
    ///   - token: cut the first request whose head contains this instead of the first
    ///     connection (a firmware agent fetches its manifest first, then the image).
    ///   - stallSeconds: how long a `.stall` holds the connection.
    init(upstreamPort: Int, cut: Cut, onlyFor token: String? = nil, stallSeconds: Double = 10) throws {
        let log = Log()
        self.log = log
        let cutTaken = Atomic<Bool>(false)
        server = try HostileServer(script: { client in
            let head = client.readRequest()
            log.heads.withLock { $0.append(head) }
            let first: Bool
            if let token {
                first = head.contains(token) && !cutTaken.exchange(true, ordering: .relaxed)
            } else {
                first = client.index == 0
            }
            let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            defer { close(upstream) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(upstreamPort).bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else { return }
            // One request per connection: nginx must close after it. (Bytes, not Characters:
            // "\r\n" is one grapheme, so `removeLast(2)` would eat both line ends.)
            var request = head
            if request.hasSuffix("\r\n\r\n") { request = String(decoding: request.utf8.dropLast(2), as: UTF8.self) }
            request += "Connection: close\r\n\r\n"
            _ = request.utf8CString.withUnsafeBufferPointer { send(upstream, $0.baseAddress, $0.count - 1, Int32(MSG_NOSIGNAL)) }
            let limit: Int?
            var stall = false
            switch cut {
            case .close(let after): limit = first ? after : nil
            case .stall(let after):
                limit = first ? after : nil
                stall = true
            }
            var buffer = [UInt8](repeating: 0, count: 16 * 1024)
            var seen: [UInt8] = []
            var bodyStart: Int?
            var forwarded = 0
            while true {
                let n = read(upstream, &buffer, buffer.count)
                if n <= 0 { return }
                var chunk = Array(buffer[0..<n])
                if bodyStart == nil {
                    seen += chunk
                    if let end = HostileServer.headEnd(in: seen) { bodyStart = end }
                }
                if let limit, let start = bodyStart {
                    let allowed = start + limit - forwarded
                    if chunk.count >= allowed {
                        chunk = Array(chunk.prefix(max(0, allowed)))
                        client.send(Data(chunk))
                        if stall { client.sleep(stallSeconds) }
                        return
                    }
                }
                client.send(Data(chunk))
                forwarded += chunk.count
            }
        })
    }

    func stop() { server.stop() }
}
