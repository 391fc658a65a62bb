import CTinyFireSystem

/// Runs code that may block for long (getaddrinfo, an app's trust evaluator) where its blocking
/// costs nobody else a thread.
///
/// Each call gets a detached thread of its own, with every asynchronous signal blocked, that ends
/// when the work returns. A shared pool as wide as the CPU count (Swift's async tasks, Dispatch's
/// global queues) would let a getaddrinfo that waits 5 s for a DNS server, or an evaluator that
/// waits for a lock, take a slot from the app's tasks and from every other lookup until it
/// returns: on a 2-core board, two such waits starve everything. Plain pthreads, so the core
/// builds in Embedded Swift too (no Dispatch there).
///
/// Memory: at most one thread per call in progress, with a stack of `stackBytes` (reserved;
/// only the pages it touches are resident).
package enum BlockingWork {
    /// The stack for a lookup: getaddrinfo with the NSS modules a board has needs a few tens of
    /// KiB (musl's default thread stack is 128 KiB).
    package static let lookupStack = 256 << 10
    /// The stack for an app's closure (a trust evaluator), whose depth is not ours to know.
    package static let callbackStack = 1 << 20

    /// Runs `work` now on a new thread; `label` names it (up to 15 bytes are visible in `ps -L`
    /// and a debugger's thread list).
    /// - Throws: `SystemResourceError` when no thread can be started (`work` then never runs).
    package static func run(
        label: String, stackBytes: Int = lookupStack, _ work: @escaping @Sendable () -> Void
    ) throws(SystemResourceError) {
        let box = Unmanaged.passRetained(Work(label: label, work: work))
        let status = tinyfire_spawn_detached(
            { raw in
                let job = Unmanaged<Work>.fromOpaque(raw!).takeRetainedValue()
                job.label.withCString { tinyfire_set_thread_name($0) }
                job.work()
                return nil
            }, box.toOpaque(), stackBytes)
        guard status == 0 else {
            box.release()
            throw SystemResourceError("pthread_create (\(label)): \(errnoMessage(status))")
        }
    }

    private final class Work {
        let label: String
        let work: @Sendable () -> Void

        init(label: String, work: @escaping @Sendable () -> Void) {
            self.label = label
            self.work = work
        }
    }
}
