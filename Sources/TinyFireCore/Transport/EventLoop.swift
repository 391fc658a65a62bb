import CTinyFireSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Something registered with the event loop that wants readiness events for one descriptor.
/// Implementations are loop work: touched only by the thread holding the loop.
package protocol EventLoopHandler: AnyObject {
    /// Called on the loop thread with the epoll event bits that fired.
    func handleEvents(_ events: UInt32)
}

/// Readiness interest for a registered descriptor.
package struct Interest: OptionSet, Sendable {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }
    package static let read = Interest(rawValue: tinyfire_epollin | tinyfire_epollrdhup)
    package static let write = Interest(rawValue: tinyfire_epollout)
}

/// Epoll bits, for handlers.
package enum EpollBits {
    package static let readable = tinyfire_epollin
    package static let writable = tinyfire_epollout
    package static let hangup = tinyfire_epollhup | tinyfire_epollrdhup
    package static let error = tinyfire_epollerr
}

/// A handle to a scheduled timer, for cancelling it.
package struct TimerHandle: Hashable, Sendable {
    fileprivate let id: UInt64
}

/// A registration of a descriptor with the loop, for changing interest or removing it.
package struct Registration: Hashable, Sendable {
    package let fd: Int32
    fileprivate let id: UInt64
}

/// One I/O thread running epoll over non-blocking descriptors, with timers.
///
/// Everything that touches sockets, parsers and connection state is loop work. It runs on the
/// loop's thread, or on a caller's thread that found the loop waiting for events
/// (`runIfWaiting(_:)`): loop work is done by one thread at a time, whichever holds the loop's
/// ownership. Other threads hand work over with `execute(_:)`. One per `Session`. Memory: the
/// registration table and the timer heap grow with the number of live connections and pending
/// timers only.
package final class EventLoop: @unchecked Sendable {
    private let epollFD: Int32
    /// The eventfd that wakes the loop; open for the loop's whole lifetime.
    package let wakeFD: Int32
    private let inbox = Locked<[@Sendable () -> Void]>([])
    private var thread = pthread_t()
    private let threadStarted = Locked<Bool>(false)
    private let stopRequested = Atomic<Bool>(false)
    /// Held by the thread doing loop work: the loop thread, except while it waits in
    /// epoll_wait, or a caller running work in that window.
    private let ownership = Locked<Void>(())
    /// The thread holding `ownership` (`tinyfire_thread_id`), 0 when none.
    private let owner = Atomic<UInt>(0)
    /// True from the end of a pass until the loop's wait returns: callers run work only then,
    /// so a loop with events to handle never queues behind them for its ownership.
    private let waiting = Atomic<Bool>(false)

    // Loop state, touched only under `ownership`.
    private var handlers: [UInt64: EventLoopHandler] = [:]
    private var nextRegistrationID: UInt64 = 1
    private var timers = TimerQueue()
    /// When the loop's current wait ends by itself; nil when only an event or a wake ends it.
    private var waitDeadline: Instant?

    /// Creates the loop and starts its thread.
    /// - Parameter name: the thread's name (visible in `top -H`), at most 15 bytes.
    /// - Throws: `SystemResourceError` when the kernel refuses epoll, eventfd or a thread.
    package init(name: String) throws(SystemResourceError) {
        let ep = tinyfire_epoll_create()
        guard ep >= 0 else { throw SystemResourceError("epoll_create1: \(errnoMessage(errno))") }
        let wake = tinyfire_eventfd()
        guard wake >= 0 else {
            close(ep)
            throw SystemResourceError("eventfd: \(errnoMessage(errno))")
        }
        epollFD = ep
        wakeFD = wake
        tinyfire_epoll_ctl(epollFD, tinyfire_epoll_ctl_add, wakeFD, tinyfire_epollin, 0)

        let box = Unmanaged.passRetained(LoopStart(loop: self, name: name))
        let status = pthread_create(
            &thread, nil,
            { raw in
                let start = Unmanaged<LoopStart>.fromOpaque(raw!).takeRetainedValue()
                let loop = start.loop
                start.name.withCString { tinyfire_set_thread_name($0) }
                // Socket writes never raise SIGPIPE (MSG_NOSIGNAL), but sendfile and body sink
                // writes to a pipe can: on this thread a peer that is gone must be an EPIPE
                // error, never a signal that kills the host program, whether or not the program
                // ignores SIGPIPE itself. (Callers running loop work never send files.)
                tinyfire_block_sigpipe()
                loop.run()
                return nil
            }, box.toOpaque())
        guard status == 0 else {
            box.release()
            close(ep)
            close(wake)
            throw SystemResourceError("pthread_create: \(errnoMessage(status))")
        }
        threadStarted.withLock { $0 = true }
    }

    /// Whether the caller is doing loop work: on the loop thread, or inside `runIfWaiting`.
    package var inEventLoop: Bool { owner.load(ordering: .relaxed) == UInt(tinyfire_thread_id()) }

    /// Whether the caller is doing loop work on a thread other than the loop's own (inside
    /// `runIfWaiting`): what would call back into the caller's code is better handed to the
    /// loop thread.
    package var runsOnCallerThread: Bool { inEventLoop && pthread_equal(pthread_self(), thread) == 0 }

    /// Runs `task` on the loop thread, soon. After `shutdown()` the task is dropped (a DNS
    /// answer or a stream chunk that arrives after its Session is gone): the loop's
    /// descriptors stay open until the loop is released, so a late caller never writes to a
    /// closed descriptor whose number another file may have taken since.
    /// - Returns: whether the task was taken (false: the loop was asked to stop).
    @discardableResult
    package func execute(_ task: @escaping @Sendable () -> Void) -> Bool {
        let wasEmpty = inbox.withLock { queue -> Bool? in
            guard !stopRequested.load(ordering: .acquiring) else { return nil }
            queue.append(task)
            return queue.count == 1
        }
        if wasEmpty == true { wake() }
        return wasEmpty != nil
    }

    /// Runs `task` as loop work and returns once it ran: at once when the caller is doing loop
    /// work, else on the loop thread, the caller waiting. On a loop asked to stop the task runs
    /// on the caller's thread (nothing else runs on that loop any more). For what ends an
    /// owner's part of a shared loop (`Engine.shutdown`, `DeliveryQueue.close`): after it
    /// returns, no earlier task of that owner is still running.
    package func runAndWait(_ task: @escaping @Sendable () -> Void) {
        if inEventLoop {
            task()
            return
        }
        let done = ConditionLocked(false)
        let queued = inbox.withLock { queue -> Bool in
            guard !stopRequested.load(ordering: .acquiring) else { return false }
            queue.append {
                task()
                done.withLock { $0 = true }
            }
            return true
        }
        guard queued else {
            // As loop work: the loop thread may still be in its last pass.
            ownership.withLock { _ in
                owner.store(UInt(tinyfire_thread_id()), ordering: .relaxed)
                defer { owner.store(0, ordering: .relaxed) }
                task()
            }
            return
        }
        wake()
        done.wait { $0 ? () : nil }
    }

    /// Runs `task` as loop work on the calling thread, now, if the loop thread is waiting for
    /// events, and returns true; returns false without running it when the loop is busy (its
    /// wait returned, or another caller runs work) or stopped (then hand it over with
    /// `execute`). This saves the wake-up of the loop thread
    /// and a trip through its inbox: a request started this way writes its head from the
    /// caller's thread and the loop thread wakes only for the answer. The loop is woken when
    /// the task set a timer earlier than the loop's wait ends. The task must not block, and
    /// must not send files (sendfile can raise SIGPIPE, which only the loop thread blocks).
    package func runIfWaiting(_ task: () -> Void) -> Bool {
        guard waiting.load(ordering: .relaxed) else { return false }
        let me = UInt(tinyfire_thread_id())
        let ran: Bool?? = ownership.withLockIfAvailable { _ -> Bool? in
            guard !stopRequested.load(ordering: .acquiring) else { return nil }
            owner.store(me, ordering: .relaxed)
            defer { owner.store(0, ordering: .relaxed) }
            task()
            guard let first = timers.earliestDeadline else { return false }
            return waitDeadline.map { first < $0 } ?? true
        }
        guard let ran, let needsWake = ran else { return false }
        if needsWake { wake() }
        return true
    }

    /// Asks the loop to stop after the current iteration, and waits for its thread to end
    /// unless called from loop work. Pending tasks are dropped. A second call waits for nothing.
    package func shutdown() {
        // Set under the inbox lock: a task is either queued before it (and runs in the loop's
        // last pass) or refused by `execute`.
        inbox.withLock { _ in stopRequested.store(true, ordering: .releasing) }
        wake()
        guard !inEventLoop else { return }
        // Joined once: the first caller from outside the loop takes the thread.
        let join = threadStarted.withLock { started -> Bool in
            defer { started = false }
            return started
        }
        if join { pthread_join(thread, nil) }
    }

    deinit {
        // Closed here, not when the thread ends: `execute` and `wake` may still be called by
        // anything that holds the loop, and must find these descriptors, not reused numbers.
        close(epollFD)
        close(wakeFD)
    }

    private func wake() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakeFD, $0.baseAddress, 8) }
    }

    // MARK: - Descriptors (loop work only)

    /// Starts watching `fd` for `interest` on behalf of `handler` (held strongly until
    /// `deregister`).
    package func register(_ fd: Int32, interest: Interest, handler: EventLoopHandler) throws(SystemResourceError) -> Registration {
        let id = nextRegistrationID
        nextRegistrationID += 1
        guard tinyfire_epoll_ctl(epollFD, tinyfire_epoll_ctl_add, fd, interest.rawValue, id) == 0 else {
            throw SystemResourceError("epoll_ctl(ADD): \(errnoMessage(errno))")
        }
        handlers[id] = handler
        return Registration(fd: fd, id: id)
    }

    /// Changes what a registered descriptor is watched for.
    package func reregister(_ registration: Registration, interest: Interest) {
        tinyfire_epoll_ctl(epollFD, tinyfire_epoll_ctl_mod, registration.fd, interest.rawValue, registration.id)
    }

    /// Stops watching a descriptor (before it is closed).
    package func deregister(_ registration: Registration) {
        tinyfire_epoll_ctl(epollFD, tinyfire_epoll_ctl_del, registration.fd, 0, 0)
        handlers[registration.id] = nil
    }

    // MARK: - Timers (loop work only)

    /// Runs `action` as loop work (on the loop thread) at or after `deadline`.
    @discardableResult
    package func schedule(at deadline: Instant, _ action: @escaping () -> Void) -> TimerHandle {
        TimerHandle(id: timers.insert(deadline: deadline, action: action))
    }

    /// Cancels a timer; harmless if it already ran.
    package func cancel(_ timer: TimerHandle) {
        timers.remove(timer.id)
    }

    // MARK: - The loop

    private func run() {
        let me = UInt(tinyfire_thread_id())
        let capacity: Int32 = 64
        let eventBits = UnsafeMutablePointer<UInt32>.allocate(capacity: Int(capacity))
        let eventData = UnsafeMutablePointer<UInt64>.allocate(capacity: Int(capacity))
        defer {
            eventBits.deallocate()
            eventData.deallocate()
        }
        var count: Int32 = 0
        var timedOut = false
        while true {
            // Loop work happens under `ownership`; the wait does not, so that a caller can
            // start work meanwhile (`runIfWaiting`).
            let timeoutMs = ownership.withLock { _ -> Int32? in
                owner.store(me, ordering: .relaxed)
                defer { owner.store(0, ordering: .relaxed) }
                for index in 0..<Int(max(count, 0)) {
                    let id = eventData[index]
                    if id == 0 {
                        var value: UInt64 = 0
                        _ = withUnsafeMutableBytes(of: &value) { read(wakeFD, $0.baseAddress, 8) }
                        continue
                    }
                    // Looked up per event: an earlier handler in this batch, or a caller's
                    // work since the wait ended, may have deregistered this one. A readiness
                    // that caller's work consumed meanwhile finds the descriptor empty
                    // (EAGAIN), which every handler expects.
                    handlers[id]?.handleEvents(eventBits[index])
                }
                runInbox()
                runTimers()
                if stopRequested.load(ordering: .acquiring) {
                    // Tasks posted just before shutdown (the engine's "close every
                    // connection") still run.
                    runInbox()
                    handlers.removeAll()
                    timers = TimerQueue()
                    return nil
                }
                // A wait that ended by itself at a cancelled timer: skip the cancelled ones
                // now, or the next waits would end at each of them in turn.
                if timedOut { timers.dropCancelledHead() }
                let timeout = waitTimeout()
                waiting.store(true, ordering: .relaxed)
                return timeout
            }
            guard let timeoutMs else { return }
            count = tinyfire_epoll_wait(epollFD, eventBits, eventData, capacity, timeoutMs)
            waiting.store(false, ordering: .relaxed)
            timedOut = count == 0
        }
    }

    /// The epoll timeout until the earliest timer, and `waitDeadline`. Cancelled timers count
    /// until the wait reaches them: a transfer's timer cancelled when it ended keeps the wait
    /// bounded, so the next transfer's later timer, set from a caller's thread, needs no
    /// wake-up.
    private func waitTimeout() -> Int32 {
        guard let next = timers.earliestDeadline else {
            waitDeadline = nil
            return -1
        }
        waitDeadline = next
        let now = Instant.now()
        guard next > now else { return 0 }
        let ns = next.nanoseconds - now.nanoseconds
        return Int32(clamping: (ns + 999_999) / 1_000_000)
    }

    private func runInbox() {
        let tasks = inbox.withLock { queue -> [@Sendable () -> Void] in
            let tasks = queue
            queue.removeAll(keepingCapacity: true)
            return tasks
        }
        for task in tasks { task() }
    }

    private func runTimers() {
        let now = Instant.now()
        while let action = timers.popExpired(now: now) {
            action()
        }
    }
}

private final class LoopStart {
    package let loop: EventLoop
    package let name: String
    package init(loop: EventLoop, name: String) {
        self.loop = loop
        self.name = String(name.utf8.prefix(15)) ?? "tinyfire"
    }
}

/// A binary min-heap of deadlines with cancellation by id. Cancelled entries stay in the heap
/// until they surface or the heap is compacted (when they outnumber live ones), so memory is
/// bounded by a small multiple of the live timers.
package struct TimerQueue {
    private struct Entry {
        package var deadline: Instant
        package var id: UInt64
    }

    package init() {}

    private var heap: [Entry] = []
    private var actions: [UInt64: () -> Void] = [:]
    private var nextID: UInt64 = 1

    /// The first deadline in the heap, cancelled or not (nil when empty).
    package var earliestDeadline: Instant? { heap.first?.deadline }

    /// Removes cancelled timers from the front of the heap.
    package mutating func dropCancelledHead() {
        while let first = heap.first, actions[first.id] == nil {
            _ = popFirst()
        }
    }

    package mutating func insert(deadline: Instant, action: @escaping () -> Void) -> UInt64 {
        let id = nextID
        nextID += 1
        actions[id] = action
        heap.append(Entry(deadline: deadline, id: id))
        siftUp(heap.count - 1)
        return id
    }

    package mutating func remove(_ id: UInt64) {
        guard actions.removeValue(forKey: id) != nil else { return }
        if heap.count > 64 && heap.count > actions.count * 3 { compact() }
    }

    package mutating func popExpired(now: Instant) -> (() -> Void)? {
        while let first = heap.first, first.deadline <= now {
            _ = popFirst()
            if let action = actions.removeValue(forKey: first.id) { return action }
        }
        return nil
    }

    private mutating func compact() {
        heap.removeAll { actions[$0.id] == nil }
        for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
    }

    private mutating func popFirst() -> Entry {
        let first = heap[0]
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            siftDown(0)
        }
        return first
    }

    private func less(_ a: Int, _ b: Int) -> Bool {
        heap[a].deadline < heap[b].deadline
            || (heap[a].deadline == heap[b].deadline && heap[a].id < heap[b].id)
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard less(child, parent) else { return }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count && less(left, smallest) { smallest = left }
            if right < heap.count && less(right, smallest) { smallest = right }
            if smallest == parent { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
