// CTinyFireSystem too: its headers include <sys/socket.h>, and the Embedded build resolves
// AF_INET and sockaddr_storage through whichever of the two modules a file imports.
import CTinyFireSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// An IPv4 or IPv6 socket address, as getaddrinfo returned it.
package struct SocketAddress: Sendable, CustomStringConvertible {
    package var storage: sockaddr_storage
    package var length: socklen_t

    package init(storage: sockaddr_storage, length: socklen_t) {
        self.storage = storage
        self.length = length
    }

    package var family: Int32 { Int32(storage.ss_family) }

    /// The numeric address and port, `[::1]:443` style for IPv6.
    package var description: String {
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        var service = [CChar](repeating: 0, count: Int(NI_MAXSERV))
        var copy = storage
        let status = withUnsafePointer(to: &copy) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo(
                    $0, length, &host, socklen_t(host.count), &service, socklen_t(service.count),
                    NI_NUMERICHOST | NI_NUMERICSERV)
            }
        }
        guard status == 0 else { return "?" }
        let h = cStringToString(host)
        let s = cStringToString(service)
        return family == AF_INET6 ? "[\(h)]:\(s)" : "\(h):\(s)"
    }
}

/// The outcome of a non-blocking read or write.
package enum IOResult: Equatable {
    case bytes(Int)
    case wouldBlock
    case endOfFile
    case failed(Int32)
}

/// Thin, typed wrappers over the socket system calls TinyFire uses. Descriptors are
/// non-blocking and close-on-exec.
package enum Socket {
    /// Creates a non-blocking TCP socket for `family`.
    package static func makeTCP(family: Int32) -> Result<Int32, Errno> {
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .failure(Errno(code: errno)) }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return .success(fd)
    }

    /// Starts connecting; `nil` error means connected at once, `EINPROGRESS` means wait for
    /// writability.
    package static func connect(_ fd: Int32, to address: SocketAddress) -> Int32? {
        var storage = address.storage
        let status = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, address.length) }
        }
        return status == 0 ? nil : errno
    }

    /// The pending error of a socket (`SO_ERROR`), 0 when connected.
    package static func pendingError(_ fd: Int32) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) == 0 else { return errno }
        return value
    }

    /// Reads into `buffer`.
    package static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .endOfFile }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
            return .failed(code)
        }
    }

    /// Writes up to two buffers in one system call, without raising SIGPIPE.
    package static func write(_ fd: Int32, _ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> IOResult {
        var vectors = (
            iovec(iov_base: UnsafeMutableRawPointer(mutating: first.baseAddress), iov_len: first.count),
            iovec(iov_base: UnsafeMutableRawPointer(mutating: second.baseAddress), iov_len: second.count)
        )
        let count = second.isEmpty ? 1 : (first.isEmpty ? 1 : 2)
        while true {
            let n = withUnsafeMutablePointer(to: &vectors) { pointer -> Int in
                pointer.withMemoryRebound(to: iovec.self, capacity: 2) { vec -> Int in
                    var message = msghdr()
                    message.msg_iov = first.isEmpty ? vec + 1 : vec
                    message.msg_iovlen = count
                    return sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
                }
            }
            if n >= 0 { return .bytes(n) }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
            return .failed(code)
        }
    }
}

/// An errno value as an Error.
package struct Errno: Error, Equatable {
    package var code: Int32
}

/// A NUL-terminated C character array as a String.
package func cStringToString(_ chars: [CChar]) -> String {
    String(decoding: chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
