// CTinyFireSystem too: its headers include <sys/socket.h>, and the Embedded build resolves
// AF_INET and sockaddr_storage through whichever of the two modules a file imports.
import CTinyFireSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Resolves host names with getaddrinfo, off the event loop.
///
/// getaddrinfo blocks (it reads /etc/hosts, asks the configured DNS servers) and cannot be
/// interrupted, so each lookup of a name (not of a numeric address) runs on a thread of its own (`BlockingWork`), never on the I/O
/// thread nor on the pool Swift's async tasks share with Dispatch's global queues; the
/// caller's connect timeout bounds how long a request waits for it.
package enum DNSResolver {
    /// Resolves `host` for TCP on `port`.
    /// - Parameters:
    ///   - host: a name or a numeric IPv4/IPv6 address (without brackets).
    ///   - port: the TCP port.
    ///   - completion: called on the lookup's thread with the addresses, IPv6 and IPv4
    ///     interleaved starting with the family getaddrinfo preferred (RFC 8305 §4), or with
    ///     getaddrinfo's message; called on the caller's thread, before `resolve` returns, for
    ///     a numeric address, and with `EAI_SYSTEM` and the reason when no thread could be
    ///     started for the lookup.
    package static func resolve(
        host: String, port: Int, completion: @escaping @Sendable (Result<[SocketAddress], ResolutionError>) -> Void
    ) {
        // A numeric address needs no lookup (getaddrinfo with AI_NUMERICHOST reads no file and
        // asks no server): answered at once on the caller's thread, with no thread started —
        // the common case on a board that talks to a fixed address.
        if case .success(let addresses) = resolveNow(host: host, port: port, flags: AI_NUMERICHOST) {
            deliver(.success(addresses), for: host, to: completion)
            return
        }
        do throws(SystemResourceError) {
            try BlockingWork.run(label: "tinyfire-dns") {
                deliver(resolveNow(host: host, port: port), for: host, to: completion)
            }
        } catch {
            completion(.failure(ResolutionError(message: "no thread for the lookup: \(error.description)", status: EAI_SYSTEM)))
        }
    }

    private static func deliver(
        _ result: Result<[SocketAddress], ResolutionError>, for host: String,
        to completion: @escaping @Sendable (Result<[SocketAddress], ResolutionError>) -> Void
    ) {
        if let hook = answerHook.withLock({ $0 }) {
            hook(host) { completion(result) }
        } else {
            completion(result)
        }
    }

    /// Test seam: when set, it receives each answer's host and a closure that delivers the
    /// answer, and decides when to call it (a test delays an answer past its Session's end).
    package static let answerHook = Locked<(@Sendable (_ host: String, _ deliver: @escaping @Sendable () -> Void) -> Void)?>(nil)

    /// A failed resolution, with getaddrinfo's message.
    package struct ResolutionError: Error, Sendable {
        package var message: String
        /// getaddrinfo's status (`EAI_AGAIN` when no name server answered: often no network).
        package var status: Int32 = 0

        package init(message: String, status: Int32 = 0) {
            self.message = message
            self.status = status
        }
    }

    /// Resolves `host` on the caller's thread (it blocks); the addresses ordered as `resolve`'s.
    /// - Parameter flags: getaddrinfo's `ai_flags` (`AI_NUMERICHOST`: numeric addresses only).
    package static func resolveNow(host: String, port: Int, flags: Int32 = 0) -> Result<[SocketAddress], ResolutionError> {
        var hints = addrinfo()
        hints.ai_flags = flags
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_protocol = Int32(IPPROTO_TCP)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let first = list else {
            let message = status == EAI_SYSTEM ? errnoMessage(errno) : String(cString: gai_strerror(status))
            return .failure(ResolutionError(message: message, status: status))
        }
        defer { freeaddrinfo(first) }
        var v6: [SocketAddress] = []
        var v4: [SocketAddress] = []
        var preferred: Int32 = 0
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            let info = entry.pointee
            if let address = info.ai_addr, info.ai_family == AF_INET || info.ai_family == AF_INET6 {
                var storage = sockaddr_storage()
                withUnsafeMutableBytes(of: &storage) { raw in
                    raw.copyMemory(from: UnsafeRawBufferPointer(start: address, count: Int(info.ai_addrlen)))
                }
                let socketAddress = SocketAddress(storage: storage, length: info.ai_addrlen)
                if preferred == 0 { preferred = info.ai_family }
                if info.ai_family == AF_INET6 { v6.append(socketAddress) } else { v4.append(socketAddress) }
            }
            cursor = info.ai_next
        }
        return .success(interleave(first: preferred == AF_INET ? v4 : v6, second: preferred == AF_INET ? v6 : v4))
    }

    /// Alternates two lists, starting with `first`.
    package static func interleave(first: [SocketAddress], second: [SocketAddress]) -> [SocketAddress] {
        var result: [SocketAddress] = []
        result.reserveCapacity(first.count + second.count)
        for index in 0..<max(first.count, second.count) {
            if index < first.count { result.append(first[index]) }
            if index < second.count { result.append(second[index]) }
        }
        return result
    }
}
