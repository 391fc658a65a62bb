import CTinyFireSystem
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A small misbehaving HTTP server for the failures no real peer shows on demand: it listens
/// on 127.0.0.1, and for each accepted connection runs a script with blocking socket calls on
/// its own thread. Stopped (listener closed) by `stop()` or deinit.
final class HostileServer: @unchecked Sendable {
    /// One accepted connection, for the script (used on the connection's own thread only).
    final class Client: @unchecked Sendable {
        let fd: Int32
        /// The connection's index (0 for the first accepted).
        let index: Int
        /// Closed (or reset) already: the number may belong to another descriptor now, of
        /// this process's other tests, and must never be closed again.
        private var closed = false
        /// The Content-Length body of the last request `readRequest` read.
        private(set) var lastBody = Data()

        init(fd: Int32, index: Int) {
            self.fd = fd
            self.index = index
        }

        /// Closes the connection with a FIN, once.
        func close() {
            guard !closed else { return }
            closed = true
            Glibc.close(fd)
        }

        /// Reads until the end of a request head (and the Content-Length body, if any).
        @discardableResult
        func readRequest() -> String {
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                if let range = HostileServer.headEnd(in: bytes) {
                    let head = String(decoding: bytes[..<range], as: UTF8.self)
                    var length = 0
                    for line in head.split(separator: "\r\n") where line.lowercased().hasPrefix("content-length:") {
                        length = Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) ?? 0
                    }
                    while bytes.count < range + length {
                        let n = read(fd, &buffer, buffer.count)
                        if n <= 0 { break }
                        bytes.append(contentsOf: buffer[0..<n])
                    }
                    lastBody = Data(bytes[range..<min(bytes.count, range + length)])
                    return head
                }
                let n = read(fd, &buffer, buffer.count)
                if n <= 0 { return String(decoding: bytes, as: UTF8.self) }
                bytes.append(contentsOf: buffer[0..<n])
            }
        }

        @discardableResult
        func send(_ text: String) -> Bool { send(Data(text.utf8)) }

        /// Sends every byte; false when the peer is gone.
        @discardableResult
        func send(_ data: Data) -> Bool {
            data.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let n = Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                    if n <= 0 { return false }
                    offset += n
                }
                return true
            }
        }

        /// Reads until the end of a request head, and no body byte after it (as far as one
        /// read can tell: what arrived in the same segments is read too).
        func readHeadOnly() {
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while HostileServer.headEnd(in: bytes) == nil {
                let n = read(fd, &buffer, buffer.count)
                if n <= 0 { return }
                bytes += buffer[0..<n]
            }
        }

        /// Blocks until the peer closes (or ten minutes pass), discarding what it sends.
        func waitForClose() {
            var buffer = [UInt8](repeating: 0, count: 4096)
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let deadline = ContinuousClock.now + .seconds(600)
            while ContinuousClock.now < deadline {
                guard poll(&pfd, 1, 1000) >= 0 || errno == EINTR else { return }
                if pfd.revents != 0 && read(fd, &buffer, buffer.count) <= 0 { return }
            }
        }

        /// Closes with a TCP reset instead of a FIN.
        func reset() {
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            if !closed { setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size)) }
            close()
        }

        func sleep(_ seconds: Double) { usleep(useconds_t(seconds * 1_000_000)) }
    }

    /// A server that reads the request and never answers; the connection stays open until
    /// the client closes it. For tests that need a request in flight for as long as they look
    /// at it, however slowly the machine runs them.
    static func neverAnswering() throws -> HostileServer {
        try HostileServer { client in
            client.readRequest()
            client.waitForClose()
        }
    }

    /// A server that streams a chunked body of `x\n` lines, one every 50 ms, until the client
    /// closes (or ten minutes pass): a stream that is still running whenever the test acts.
    static func endlessStream() throws -> HostileServer {
        try HostileServer { client in
            client.readRequest()
            guard client.send("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n") else { return }
            let deadline = ContinuousClock.now + .seconds(600)
            while ContinuousClock.now < deadline && client.send(Data("2\r\nx\n\r\n".utf8)) { client.sleep(0.05) }
        }
    }

    let port: Int
    private let listener: Int32

    /// Where a request or response head ends (just after CRLF CRLF), if `bytes` holds one.
    static func headEnd(in bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 3..<bytes.count
        where bytes[index - 3] == 13 && bytes[index - 2] == 10 && bytes[index - 1] == 13 && bytes[index] == 10 {
            return index + 1
        }
        return nil
    }
    private final class Counters: Sendable {
        let stopped = Atomic<Bool>(false)
        let accepted = Atomic<Int>(0)
    }
    private let counters = Counters()

    var base: String { "http://127.0.0.1:\(port)" }
    /// Connections accepted so far.
    var connectionCount: Int { counters.accepted.load(ordering: .relaxed) }

    /// Starts listening.
    /// - Parameter script: run for each connection on its own thread; the connection is
    ///   closed when it returns (unless the script closed or reset it).
    init(script: @escaping @Sendable (Client) -> Void) throws {
        let listenFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var one: Int32 = 1
        setsockopt(listenFD, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listenFD, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listenFD, 16) == 0 else {
            close(listenFD)
            throw FixtureError(description: "hostile server cannot listen: \(String(cString: strerror(errno)))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listenFD, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        listener = listenFD
        let counters = self.counters
        // The accept thread owns the listener and closes it when it ends: `stop()` only shuts
        // it down (which wakes accept), so no thread ever uses a number closed under it.
        let thread = Thread {
            defer { close(listenFD) }
            while !counters.stopped.load(ordering: .relaxed) {
                let fd = tinyfire_accept_cloexec(listenFD)
                if fd < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    return
                }
                let index = counters.accepted.wrappingAdd(1, ordering: .relaxed).oldValue
                let worker = Thread {
                    let client = Client(fd: fd, index: index)
                    script(client)
                    client.close()
                }
                worker.start()
            }
        }
        thread.start()
    }

    func stop() {
        guard !counters.stopped.exchange(true, ordering: .relaxed) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
    }

    deinit { stop() }
}
