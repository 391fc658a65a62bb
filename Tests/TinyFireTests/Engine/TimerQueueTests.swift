import Testing

@testable import TinyFire

@Suite("the event loop's timer heap, without a loop: order, ties, cancellation, compaction")
struct TimerQueueTests {
    let t0 = Instant(nanoseconds: 1_000_000_000)

    /// Pops everything due at `now`, running each action; returns the labels in firing order.
    func fire(_ queue: inout TimerQueue, at now: Instant, log: Log) -> [Int] {
        while let action = queue.popExpired(now: now) { action() }
        return log.take()
    }

    final class Log {
        var fired: [Int] = []
        func take() -> [Int] {
            defer { fired = [] }
            return fired
        }
    }

    @Test("timers fire in deadline order, ties in the order they were set, and only once due")
    func order() {
        var queue = TimerQueue()
        let log = Log()
        for (label, offset) in [(1, 30), (2, 10), (3, 20), (4, 10), (5, 0)] {
            _ = queue.insert(deadline: t0 + .milliseconds(offset)) { log.fired.append(label) }
        }
        #expect(queue.nextDeadline() == t0)
        #expect(fire(&queue, at: t0 + .milliseconds(9), log: log) == [5])
        #expect(fire(&queue, at: t0 + .milliseconds(20), log: log) == [2, 4, 3])
        #expect(queue.nextDeadline() == t0 + .milliseconds(30))
        #expect(fire(&queue, at: t0 + .seconds(10), log: log) == [1])
        #expect(queue.nextDeadline() == nil)
    }

    @Test("a cancelled timer never fires and does not hold up the next deadline; cancelling twice is harmless")
    func cancellation() {
        var queue = TimerQueue()
        let log = Log()
        let first = queue.insert(deadline: t0 + .milliseconds(5)) { log.fired.append(1) }
        _ = queue.insert(deadline: t0 + .milliseconds(50)) { log.fired.append(2) }
        queue.remove(first)
        queue.remove(first)
        #expect(queue.nextDeadline() == t0 + .milliseconds(50))
        #expect(fire(&queue, at: t0 + .seconds(1), log: log) == [2])
    }

    @Test("the loop's wait: a cancelled timer at the front still bounds it until dropped; dropping stops at the first live one")
    func cancelledHeadBoundsTheWait() {
        var queue = TimerQueue()
        let log = Log()
        let a = queue.insert(deadline: t0 + .milliseconds(5)) { log.fired.append(1) }
        let b = queue.insert(deadline: t0 + .milliseconds(10)) { log.fired.append(2) }
        _ = queue.insert(deadline: t0 + .milliseconds(20)) { log.fired.append(3) }
        _ = queue.insert(deadline: t0 + .milliseconds(30)) { log.fired.append(4) }
        queue.remove(a)
        queue.remove(b)
        #expect(queue.earliestDeadline == t0 + .milliseconds(5))
        queue.dropCancelledHead()
        #expect(queue.earliestDeadline == t0 + .milliseconds(20))
        queue.dropCancelledHead()
        #expect(queue.earliestDeadline == t0 + .milliseconds(20))
        #expect(fire(&queue, at: t0 + .seconds(1), log: log) == [3, 4])
        #expect(queue.earliestDeadline == nil)
    }

    @Test("many cancelled timers are compacted away; the live ones still fire in order")
    func compaction() {
        var queue = TimerQueue()
        let log = Log()
        var ids: [UInt64] = []
        for index in 0..<1000 {
            ids.append(queue.insert(deadline: t0 + .milliseconds(index)) { log.fired.append(index) })
        }
        for (index, id) in ids.enumerated() where index % 100 != 0 { queue.remove(id) }
        #expect(queue.nextDeadline() == t0)
        #expect(fire(&queue, at: t0 + .seconds(5), log: log) == Array(stride(from: 0, to: 1000, by: 100)))
        #expect(queue.nextDeadline() == nil)
    }
}

extension TimerQueue {
    /// The first deadline of a timer not cancelled (nil when none), as the tests read it.
    mutating func nextDeadline() -> Instant? {
        dropCancelledHead()
        return earliestDeadline
    }
}
