/// When the offline queue sends its head record, as a state machine without I/O or clocks:
/// events in (started, records available, network up or down, an attempt's outcome, the
/// retry timer), actions out (send the head, arm or cancel the retry timer). One record is in
/// flight at a time, so delivery keeps the queue's order.
package struct OfflineQueueReplay: Sendable {
    package init() {}

    /// What reachability says.
    package enum Network: Equatable, Sendable {
        /// No reachability manager, or no answer yet: treated as reachable.
        case unknown
        case reachable
        case notReachable
    }

    package enum Phase: Equatable, Sendable {
        /// Delivery is off.
        case stopped
        /// Nothing to send.
        case idle
        /// The head record is in flight.
        case sending
        /// The head failed; the retry timer is armed.
        case backingOff
        /// The head failed or is due while the network is down; waiting for it to come back.
        case waitingForNetwork
    }

    package enum Event: Equatable, Sendable {
        case start(hasRecords: Bool)
        case stop
        /// A record was enqueued.
        case recordsAvailable
        case network(Network)
        /// The head was removed (delivered, discarded or dropped); `more` when others wait.
        case headRemoved(more: Bool)
        /// The head's attempt failed and it stays at the head.
        case attemptFailed
        /// The retry timer fired.
        case timerFired
    }

    package enum Action: Equatable, Sendable {
        case sendHead
        /// Arm the timer for the delay of this consecutive failure (1 for the first).
        case scheduleRetry(failure: Int)
        case cancelRetry
    }

    package private(set) var phase: Phase = .stopped
    package private(set) var network: Network = .unknown
    /// Consecutive failed attempts of the current head.
    package private(set) var failures = 0

    private var networkUsable: Bool { network != .notReachable }

    /// Applies `event` and says what to do.
    package mutating func handle(_ event: Event) -> [Action] {
        switch (phase, event) {
        case (.stopped, .start(let hasRecords)):
            failures = 0
            return next(hasRecords: hasRecords)
        case (.stopped, _), (_, .start):
            if case .network(let network) = event { self.network = network }
            return []
        case (_, .stop):
            let wasBackingOff = phase == .backingOff
            phase = .stopped
            return wasBackingOff ? [.cancelRetry] : []
        case (.idle, .recordsAvailable):
            return next(hasRecords: true)
        case (_, .recordsAvailable):
            return []
        case (_, .network(let network)):
            self.network = network
            switch (phase, networkUsable) {
            case (.backingOff, false):
                phase = .waitingForNetwork
                return [.cancelRetry]
            case (.backingOff, true):
                // The network came back (or changed): try at once, with a fresh backoff.
                failures = 0
                phase = .sending
                return [.cancelRetry, .sendHead]
            case (.waitingForNetwork, true):
                failures = 0
                phase = .sending
                return [.sendHead]
            default:
                return []
            }
        case (.sending, .headRemoved(let more)):
            failures = 0
            return next(hasRecords: more)
        case (.sending, .attemptFailed):
            failures += 1
            if !networkUsable {
                phase = .waitingForNetwork
                return []
            }
            phase = .backingOff
            return [.scheduleRetry(failure: failures)]
        case (.backingOff, .timerFired):
            phase = .sending
            return [.sendHead]
        case (_, .headRemoved(let more)) where phase == .backingOff || phase == .waitingForNetwork:
            // The head was dropped from under a waiting retry (overflow, drop-oldest): the next
            // head starts with a fresh count.
            failures = 0
            if more { return [] }
            let wasBackingOff = phase == .backingOff
            phase = .idle
            return wasBackingOff ? [.cancelRetry] : []
        default:
            return []
        }
    }

    private mutating func next(hasRecords: Bool) -> [Action] {
        guard hasRecords else {
            phase = .idle
            return []
        }
        guard networkUsable else {
            phase = .waitingForNetwork
            return []
        }
        phase = .sending
        return [.sendHead]
    }
}
