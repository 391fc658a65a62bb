import CTinyFireSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A wake-up between threads on a pipe: `signal` from any thread, `wait` with a timeout on the
/// waiting one. poll(2) takes a relative timeout, so the wait is not moved by a wall clock
/// that jumps, nor by a library that fakes it (libfaketime converts the absolute deadlines of
/// condition variables, which then wait far too long or not at all).
///
/// Memory: a pipe (two descriptors).
package final class WakePipe: Sendable {
    private let readEnd: Int32
    private let writeEnd: Int32

    /// - Throws: `SystemResourceError` when no pipe can be made.
    package init() throws(SystemResourceError) {
        var fds: [Int32] = [-1, -1]
        guard tinyfire_pipe_cloexec(&fds) == 0 else { throw SystemResourceError("pipe: \(errnoMessage(errno))") }
        readEnd = fds[0]
        writeEnd = fds[1]
        _ = fcntl(readEnd, F_SETFL, O_NONBLOCK)
        _ = fcntl(writeEnd, F_SETFL, O_NONBLOCK)
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }

    /// Wakes the waiter, now or at its next wait (a full pipe already holds a wake-up).
    package func signal() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Waits for a wake-up at most `timeout`.
    /// - Parameter consume: take the wake-up (false leaves it for every later wait: a one-time
    ///   event such as "finished").
    /// - Returns: whether it was woken.
    @discardableResult
    package func wait(timeout: Duration, consume: Bool = true) -> Bool {
        let deadline = Instant.now() + timeout
        var descriptor = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
        while true {
            let left = deadline.since(.now())
            let milliseconds = Int32(clamping: (left.wholeMilliseconds + (left > .milliseconds(left.wholeMilliseconds) ? 1 : 0)))
            let ready = poll(&descriptor, 1, milliseconds)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { return false }
            if consume {
                var buffer = [UInt8](repeating: 0, count: 64)
                while read(readEnd, &buffer, buffer.count) > 0 {}
            }
            return true
        }
    }
}
