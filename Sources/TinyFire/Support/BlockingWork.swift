import Dispatch

/// Runs code that may block for long (getaddrinfo, an app's trust evaluator) where its blocking
/// costs nobody else a thread.
///
/// Each call gets a new serial Dispatch queue. libdispatch backs serial queues with its
/// "overcommit" threads, created on demand whatever the CPU count, whereas concurrent queues
/// and `DispatchQueue.global()` share a pool as wide as the CPU count, which on Linux is also
/// the pool Swift's async tasks run on. A getaddrinfo that waits 5 s for a DNS server, or an
/// evaluator that waits for a lock, would otherwise take a slot of that pool from the app's
/// tasks (and from every other lookup) until it returns: on a 2-core board, two such waits
/// starve everything. Memory: one queue and at most one thread per call in progress.
enum BlockingWork {
    /// Runs `work` soon, on a thread of its own; `label` names the queue (visible in a
    /// debugger's thread list).
    static func run(label: String, _ work: @escaping @Sendable () -> Void) {
        DispatchQueue(label: label).async(execute: work)
    }
}
