import TinyFireCore

/// What the offline queue's deliveries have come to, gathered from its events for
/// `fire-agent status` and the agent's own `fire_agent` measurement. Thread-safe.
///
/// Memory: a few fields and the listeners given; nothing grows with deliveries.
package final class DeliveryTracker: Sendable {
    /// The figures at one moment.
    package struct Snapshot: Sendable, Equatable {
        /// The last attempt's outcome.
        package var lastDelivery: AgentStatus.Delivery?
        /// When a batch was last delivered.
        package var lastSuccess: WallTime?
        /// Dead letters kept.
        package var deadLetters: Int
        /// Spool lines refused.
        package var rejectedSpoolLines = 0
        /// Entries removed from the spool's `rejected/` to keep it within its bounds.
        package var droppedRejectedSpool = 0
    }

    private let state: Locked<Snapshot>
    private let listeners = Locked<[@Sendable () -> Void]>([])

    /// A tracker.
    /// - Parameter deadLetters: dead letters already kept when the agent starts.
    package init(deadLetters: Int) {
        state = Locked(Snapshot(deadLetters: deadLetters))
    }

    /// The figures now.
    package var snapshot: Snapshot { state.withLock { $0 } }

    /// Calls `listener` after every change (on the thread that made it).
    package func onChange(_ listener: @escaping @Sendable () -> Void) {
        listeners.withLock { $0.append(listener) }
    }

    /// Takes in one delivery event.
    /// - Parameters:
    ///   - event: what the queue did.
    ///   - now: when (the wall clock, for the status; not judged).
    package func record(_ event: QueueDeliveryEvent, at now: WallTime = .now()) {
        state.withLock { state in
            switch event {
            case .delivered(_, _, let status):
                state.lastDelivery = .init(at: now, result: "delivered", status: status)
                state.lastSuccess = now
            case .discarded(_, _, let status):
                state.lastDelivery = .init(at: now, result: "discarded", status: status)
            case .failed(_, _, let reason, _):
                state.lastDelivery = .init(at: now, result: "failed", reason: reason)
            case .dropped:
                state.lastDelivery = .init(at: now, result: "dropped", reason: "the queue was full (dropOldest)")
            case .quarantined(_, let reason):
                state.lastDelivery = .init(at: now, result: "quarantined", reason: reason)
            case .deadLettered(_, _, let status, let reason):
                state.lastDelivery = .init(at: now, result: "dead-lettered", status: status, reason: reason)
                state.deadLetters += 1
            case .replaced(_, _, let status, let count):
                state.lastDelivery = .init(at: now, result: "split", status: status, reason: "replaced by \(count) smaller batches")
            }
        }
        notify()
    }

    /// Counts spool lines refused.
    package func rejectedSpool(_ lines: Int) {
        state.withLock { $0.rejectedSpoolLines += lines }
        notify()
    }

    /// Counts entries removed from the spool's `rejected/` to keep it within its bounds.
    package func droppedRejectedSpool(_ entries: Int) {
        state.withLock { $0.droppedRejectedSpool += entries }
        notify()
    }

    private func notify() {
        for listener in listeners.withLock({ $0 }) { listener() }
    }
}
