/// Which of the offline queue's records background delivery may send, and when, as a state
/// machine without I/O or clocks (time comes in as a value): the head when
/// `OfflineQueueReplay` says it is due, the records after it while there is room
/// (`maxConcurrentDeliveries`), what the attempts after the head came to, and the server's
/// throttle. Events in (the head is due, room to fill, an attempt ended, the server asked to
/// wait), decisions out. The queue keeps one, on its delivery thread.
///
/// - A record is never in flight twice: a head the window is sending already rides that
///   attempt.
/// - A record the window got a final answer for (`Verdict`: taken, discarded, a dead letter, a
///   split) is acted on when it is the head, with that answer, without being sent again.
/// - A record the window did not get through (a retry, no answer) is sent again only as the
///   head.
/// - The server's throttle (a 429 or 503 with its `Retry-After`, or the backoff without one),
///   from the head's attempt or the window's, holds the whole queue: until it runs out no
///   attempt starts, neither the head's nor the window's; attempts in flight finish. Then the
///   head goes first, alone: the window opens again once the head has been removed.
///
/// Memory: one entry per record in flight or answered early, at most `limit` of them past the
/// head, each holding its `Verdict`.
package struct DeliveryWindow<Verdict: Sendable>: Sendable {
    /// Records in flight at once, the head's attempt included (`maxConcurrentDeliveries`); 1
    /// sends the head alone.
    package let limit: Int

    /// Creates a window of `limit` records in flight at once.
    package init(limit: Int) {
        self.limit = limit
    }

    /// The server's throttle.
    package enum Throttle: Equatable, Sendable {
        /// No throttle: the head and the window go.
        case open
        /// Nothing starts before `until`.
        case closed(until: Instant)
        /// The throttle ran out: the head goes alone; the window opens once it is removed.
        case probing
    }

    /// What to do with the head now that it is due.
    package enum HeadStep: Sendable {
        /// Send it: its attempt is in flight now (end it with `headEnded`).
        case send
        /// Act on the answer the window got for it; send nothing.
        case act(Verdict)
        /// It is in flight already (the window's attempt, which is now the head's, or the
        /// head's own): the end of that attempt moves the queue on.
        case inFlight
        /// The server's throttle holds it: it is due again at `until` (`holdingHead`).
        case hold(until: Instant)
    }

    /// What the window's attempt of a record came to.
    package enum WindowOutcome: Sendable {
        /// A final answer: acted on when the record is the head.
        case judged(Verdict)
        /// The server asked to wait this long (429 or 503): the whole queue waits.
        case throttled(Duration)
        /// Anything else (a retry, no answer): sent again as the head.
        case failed
        /// Not sent (its record cannot be read back): the head's path deals with it.
        case unsent
    }

    /// What the queue does after a window attempt ended.
    package enum WindowStep: Equatable, Sendable {
        /// Nothing more (the record waits for its turn as the head).
        case none
        /// It was the head's attempt and got a final answer: the head is due (`headDue` acts
        /// on it).
        case headJudged
        /// It was the head's attempt and failed (or was throttled): the head's failure.
        case headFailed
        /// It was the head's attempt and sent nothing: the head is due.
        case headDue
    }

    private enum Slot: Sendable {
        /// The head's own attempt is in flight.
        case head
        /// The window's attempt is in flight.
        case window
        /// The window's attempt got this final answer.
        case judged(Verdict)
        /// The window's attempt did not deliver it: sent again only as the head.
        case deferred

        var inFlight: Bool {
            switch self {
            case .head, .window: return true
            case .judged, .deferred: return false
            }
        }
    }

    package private(set) var throttle: Throttle = .open
    /// The head is due but held by the throttle: `headDue` again when it runs out.
    package private(set) var holdingHead = false
    private var slots: [UInt64: Slot] = [:]
    /// The head whose attempt is the window's, in flight.
    private var riding: UInt64?

    /// Attempts in flight (the head's and the window's).
    package var attemptsInFlight: Int {
        var count = 0
        for slot in slots.values where slot.inFlight { count += 1 }
        return count
    }

    /// The head (`OfflineQueueReplay` said `.sendHead`) is `head`: what to do with it.
    package mutating func headDue(_ head: UInt64, now: Instant) -> HeadStep {
        forget(before: head)
        riding = nil
        holdingHead = false
        switch slots[head] {
        case .judged(let verdict)?:
            // Acted on even while throttled: nothing is sent.
            slots[head] = nil
            return .act(verdict)
        case .window?:
            riding = head
            return .inFlight
        case .head?:
            return .inFlight
        case .deferred?, nil:
            break
        }
        if case .closed(let until) = throttle {
            guard now >= until else {
                holdingHead = true
                return .hold(until: until)
            }
            throttle = .probing
        }
        slots[head] = .head
        return .send
    }

    /// The head's own attempt of `head` ended; `removed` when the record was removed (taken,
    /// discarded, dead-lettered, split).
    package mutating func headEnded(_ head: UInt64, removed: Bool, now: Instant) {
        if case .head? = slots[head] { slots[head] = nil }
        guard removed else { return }
        switch throttle {
        case .probing: throttle = .open
        case .closed(let until) where now >= until: throttle = .open
        case .open, .closed: break
        }
    }

    /// Of `candidates` (the records after the head, in order), those to send now, each
    /// counted in flight. Only while the head is being sent (`sending`), with room, and no
    /// throttle.
    package mutating func fill(_ candidates: [UInt64], sending: Bool) -> [UInt64] {
        guard limit > 1, sending, throttle == .open else { return [] }
        var inFlight = attemptsInFlight
        var started: [UInt64] = []
        for record in candidates where inFlight < limit && slots[record] == nil {
            slots[record] = .window
            inFlight += 1
            started.append(record)
        }
        return started
    }

    /// The window's attempt of `record` ended with `outcome`.
    package mutating func windowEnded(_ record: UInt64, _ outcome: WindowOutcome, now: Instant) -> WindowStep {
        let wasHead = riding == record
        if wasHead { riding = nil }
        switch outcome {
        case .judged(let verdict):
            slots[record] = .judged(verdict)
            return wasHead ? .headJudged : .none
        case .throttled(let delay):
            serverThrottled(until: now + delay)
            slots[record] = wasHead ? nil : .deferred
            return wasHead ? .headFailed : .none
        case .failed:
            slots[record] = wasHead ? nil : .deferred
            return wasHead ? .headFailed : .none
        case .unsent:
            slots[record] = wasHead ? nil : .deferred
            return wasHead ? .headDue : .none
        }
    }

    /// The server asked the queue to wait until `until` (a later throttle extends it).
    package mutating func serverThrottled(until: Instant) {
        if case .closed(let current) = throttle, current >= until { return }
        throttle = .closed(until: until)
    }

    /// Delivery stopped: the head is no longer due (a window attempt in flight is the
    /// window's again); what the window learned stays.
    package mutating func stopped() {
        holdingHead = false
        riding = nil
    }

    /// For a flush (nothing in flight): the answer the window got for `head`, taken.
    package mutating func takeJudgement(for head: UInt64) -> Verdict? {
        forget(before: head)
        guard case .judged(let verdict)? = slots[head] else { return nil }
        slots[head] = nil
        return verdict
    }

    /// Forgets the answers for records before `head` (removed another way: dropped to stay
    /// within the bounds); attempts in flight are kept until they end.
    private mutating func forget(before head: UInt64) {
        if let record = riding, record < head { riding = nil }
        slots = slots.filter { record, slot in record >= head || slot.inFlight }
    }
}

extension DeliveryWindow.HeadStep: Equatable where Verdict: Equatable {}
