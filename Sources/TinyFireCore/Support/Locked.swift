#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A value behind a pthread mutex: what `Synchronization.Mutex` is in the full build, for code
/// that must also build in Embedded Swift (which has no `Mutex`). A class, so it can be shared
/// by reference like the `Mutex` stored in a class; the mutex lives in its own allocation and
/// is never moved. Not recursive: calling `withLock` again from inside `body` deadlocks.
package final class Locked<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    package init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock.
    package func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    /// Runs `body` with the value when the lock is free now; nil, without waiting, when another
    /// thread holds it.
    package func withLockIfAvailable<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result? {
        guard pthread_mutex_trylock(mutex) == 0 else { return nil }
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}

/// A value behind a pthread mutex with a condition variable: a thread waits, without spinning,
/// until another thread changes the value so that it can go on. Every `withLock` wakes the
/// waiting threads when it ends (cheap when none waits). Not recursive.
package final class ConditionLocked<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var value: Value

    package init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        // Timed waits count on the monotonic clock (`Instant`), not the wall clock a board
        // may step by years at its first NTP answer.
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock, then wakes the waiting threads.
    package func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        pthread_mutex_lock(mutex)
        defer {
            pthread_cond_broadcast(condition)
            pthread_mutex_unlock(mutex)
        }
        return body(&value)
    }

    /// Waits until `ready` returns a result (it runs with the lock held, first at once, then
    /// each time another thread's `withLock` ends), and returns it.
    package func wait<Result>(until ready: (inout Value) -> Result?) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while true {
            if let result = ready(&value) { return result }
            pthread_cond_wait(condition, mutex)
        }
    }

    /// Waits as `wait(until:)` does, but no later than `deadline`: nil when it passed first.
    package func wait<Result>(until ready: (inout Value) -> Result?, deadline: Instant) -> Result? {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        var limit = timespec()
        limit.tv_sec = .init(clamping: deadline.nanoseconds / 1_000_000_000)
        limit.tv_nsec = .init(deadline.nanoseconds % 1_000_000_000)
        while true {
            if let result = ready(&value) { return result }
            if pthread_cond_timedwait(condition, mutex, &limit) == ETIMEDOUT { return ready(&value) }
        }
    }
}

/// A one-time wake-up between threads (what a `DispatchSemaphore` of value 0 signalled once
/// does): `wait` returns once `signal` was called, before or after it.
package final class WakeSignal: Sendable {
    private let signalled = ConditionLocked(false)

    package init() {}

    /// Wakes the waiter (or lets its coming `wait` return at once).
    package func signal() {
        signalled.withLock { $0 = true }
    }

    /// Blocks until `signal` was called.
    package func wait() {
        signalled.wait { $0 ? () : nil }
    }

    /// Blocks until `signal` was called or `timeout` passed.
    /// - Returns: whether it was signalled.
    package func wait(timeout: Duration) -> Bool {
        signalled.wait(until: { $0 ? () : nil }, deadline: .now() + timeout) != nil
    }
}
