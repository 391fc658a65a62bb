import Foundation

/// Waits for something that follows an event on another thread (a cancellation reaching the
/// request, a handler that runs after the awaited value): true as soon as `condition` holds,
/// false if it still does not after `timeout`. The timeout is a hang guard, not a pass mark:
/// it is far longer than the wait on any machine the tests run on, emulators included.
func eventually(within timeout: Duration = .seconds(30), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return true
}

/// `eventually` for synchronous tests (which may block their thread).
@discardableResult
func waitUntil(within timeout: Duration = .seconds(30), _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        Thread.sleep(forTimeInterval: 0.01)
    }
    return true
}

/// Waits for outstanding work (points not yet in the database) to reach zero: true when `remaining` says 0, false once its answer has not changed for `stall`. The
/// guard catches a hang, not slowness: under qemu, with every suite running at once, a backlog
/// can take many minutes to drain, but it never stands still for long. `remaining` is asked
/// every `interval`, and answers nil while it cannot tell, which counts as no change.
func drains(
    stallingAfter stall: Duration = .seconds(120), every interval: Duration = .milliseconds(250), _ remaining: () -> Int?
) async -> Bool {
    var last: Int? = nil
    var changed = ContinuousClock.now
    while true {
        let now = remaining()
        if now == 0 { return true }
        if now != last {
            last = now
            changed = ContinuousClock.now
        } else if ContinuousClock.now - changed >= stall {
            return false
        }
        try? await Task.sleep(for: interval)
    }
}
