import TinyFireCore

#if canImport(Glibc)
    import CTinyFireSystem
    import Glibc
#elseif canImport(Musl)
    import CTinyFireSystem
    import Musl
#endif

/// Talks to systemd's service manager the way `sd_notify(3)` does, without libsystemd: one
/// datagram per message to the `AF_UNIX` socket named by `NOTIFY_SOCKET` (a path, or an
/// abstract name starting with `@`). With `Type=notify` systemd waits for `READY=1` before it
/// calls the service started; with `WatchdogSec` it restarts a service that stops sending
/// `WATCHDOG=1`.
///
/// Memory: one socket; messages are built on the stack of the caller.
package final class SystemdNotifier: Sendable {
    /// The socket's address as given.
    package let socketPath: String
    /// systemd's watchdog interval (`WATCHDOG_USEC`), when it asked this process for one.
    package let watchdogInterval: Duration?
    private let fd: Int32
    /// `socketPath` as a socket address, and its length (an abstract name's length says where
    /// it ends: it is not NUL-terminated).
    private let address: sockaddr_un
    private let addressLength: socklen_t

    /// A notifier for the socket in `environment`, or nil when there is none (not started
    /// by systemd with `Type=notify`) or it cannot be used.
    /// - Parameter environment: the process environment (`NOTIFY_SOCKET`, `WATCHDOG_USEC`,
    ///   `WATCHDOG_PID`).
    package init?(environment: [String: String]) {
        guard let path = environment["NOTIFY_SOCKET"], !path.isEmpty, path.utf8.count < 108,
            path.hasPrefix("/") || path.hasPrefix("@")
        else { return nil }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        self.fd = fd
        socketPath = path
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in pathBytes.enumerated() { raw[index] = byte }
            // An abstract socket's name starts with a NUL byte instead of '@'.
            if pathBytes.first == UInt8(ascii: "@") { raw[0] = 0 }
        }
        self.address = address
        addressLength = socklen_t(
            MemoryLayout<sa_family_t>.size + pathBytes.count + (pathBytes.first == UInt8(ascii: "@") ? 0 : 1))
        // WATCHDOG_PID, when set, names the process the watchdog is for.
        let forUs = environment["WATCHDOG_PID"].map { Int32($0) == getpid() } ?? true
        if forUs, let text = environment["WATCHDOG_USEC"], let micros = Int64(text), micros > 0 {
            watchdogInterval = .microseconds(micros)
        } else {
            watchdogInterval = nil
        }
    }

    deinit { close(fd) }

    /// How long a state message (`READY=1`, `RELOADING=1`, `STOPPING=1`) waits for room in a
    /// full socket before it is dropped.
    package static let stateMessageWait: Duration = .seconds(1)

    /// Sends `state` (newline-separated `KEY=value` assignments, e.g. `READY=1`) without
    /// blocking for long. systemd reads its socket at once; one that stops reading (hung, or
    /// a socket whose queue of `net.unix.max_dgram_qlen` datagrams is full) must not stall the
    /// caller, which for the daemon is the loop that collects, syncs and pings. A message that
    /// finds the queue full is retried every 10 ms for up to `wait`, then dropped.
    /// - Parameters:
    ///   - state: the message.
    ///   - wait: how long to wait for room; zero tries once.
    /// - Returns: whether the datagram was sent.
    @discardableResult
    package func notify(_ state: String, waitingUpTo wait: Duration = .zero) -> Bool {
        let message = Array(state.utf8)
        let deadline = Instant.now() + wait
        while true {
            let sent = message.withUnsafeBytes { bytes in
                withUnsafePointer(to: address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT), $0, addressLength)
                    }
                }
            }
            if sent == message.count { return true }
            guard sent < 0, errno == EAGAIN || errno == EINTR, Instant.now() < deadline else { return false }
            usleep(10_000)
        }
    }

    /// `READY=1` with a status line (waits up to `stateMessageWait` for room).
    @discardableResult
    package func ready(status: String) -> Bool { notify("READY=1\nSTATUS=\(status)", waitingUpTo: Self.stateMessageWait) }

    /// `WATCHDOG=1`. Dropped at once when the socket is full: the next ping follows.
    @discardableResult
    package func watchdog() -> Bool { notify("WATCHDOG=1") }

    /// `RELOADING=1` with the monotonic time, as `Type=notify-reload` expects (waits up to
    /// `stateMessageWait` for room).
    @discardableResult
    package func reloading() -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return notify(
            "RELOADING=1\nMONOTONIC_USEC=\(Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000)",
            waitingUpTo: Self.stateMessageWait)
    }

    /// `STOPPING=1` with a status line (waits up to `stateMessageWait` for room).
    @discardableResult
    package func stopping(status: String) -> Bool { notify("STOPPING=1\nSTATUS=\(status)", waitingUpTo: Self.stateMessageWait) }
}
