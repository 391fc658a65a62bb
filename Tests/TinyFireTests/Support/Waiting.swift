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
