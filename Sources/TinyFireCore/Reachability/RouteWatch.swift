/// Reachability watched from the caller's own poll loop (the agent's daemon, `fire-agent
/// reachability --watch`): the netlink event socket to poll, the debounce, and the last status.
/// The caller polls `descriptor`, calls `readEvents` when it is readable, sleeps no longer
/// than `checkAt`, and calls `checkIfDue`, which judges the routing state once a burst of events
/// has settled and returns the status when it changed. No thread of its own.
///
/// Memory: the judge's (one query socket, a bounded snapshot while judging), the event socket's
/// 32 KiB buffer and `receiveBuffer` bytes of kernel buffer.
/// Not thread-safe: one loop owns it.
package final class RouteWatch {
    /// How long events are gathered before the state is judged again: 50 ms.
    package static let debounce: Duration = .milliseconds(50)

    /// Who judges.
    package let judge: RouteJudge
    private let events: NetlinkSocket
    /// The last status judged (nil before the first).
    package private(set) var status: ReachabilityStatus?
    /// When the state is judged next, if a check is pending.
    package private(set) var checkAt: Instant?

    /// Opens the event socket; the first `checkIfDue` judges at once.
    /// - Parameters:
    ///   - judge: the judge whose namespace is watched.
    ///   - receiveBuffer: the event socket's SO_RCVBUF (an overrun means "read everything again").
    /// - Throws: `NetworkReachabilityError` when the socket cannot be opened.
    package init(judge: RouteJudge, receiveBuffer: Int32) throws(NetworkReachabilityError) {
        self.judge = judge
        events = try judge.eventSocket(receiveBuffer: receiveBuffer)
        checkAt = .now()
    }

    /// The event socket, for poll(2).
    package var descriptor: Int32 { events.fd }

    /// Reads every waiting event and schedules a check when any arrived.
    /// - Returns: what to log when the kernel dropped events or the socket failed, else nil.
    package func readEvents() -> String? {
        var note: String?
        switch events.drain() {
        case .messages(0): return nil
        case .messages: break
        case .overrun: note = "netlink events were dropped (buffer overrun); reading the routing state again"
        case .failed(let code): note = "netlink event socket failed: \(errnoMessage(code))"
        }
        scheduleCheck()
        return note
    }

    /// Schedules a check `debounce` from now, unless one is pending.
    package func scheduleCheck() {
        if checkAt == nil { checkAt = .now() + Self.debounce }
    }

    /// Judges the routing state when a check is due.
    /// - Parameter addressesChanged: called on another thread when a host name's resolution
    ///   brought new addresses (the caller then calls `scheduleCheck` from its loop).
    /// - Returns: the new status when it changed (the first judgment always counts as a change),
    ///   and the netlink failure that made it `.unknown`, if any.
    package func checkIfDue(addressesChanged: @escaping @Sendable () -> Void) -> (
        changed: ReachabilityStatus?, failure: NetworkReachabilityError?
    ) {
        guard let due = checkAt, Instant.now() >= due else { return (nil, nil) }
        checkAt = nil
        let (update, failure) = judge.evaluate(addressesChanged: addressesChanged)
        guard update != status else { return (nil, failure) }
        status = update
        return (update, failure)
    }
}
