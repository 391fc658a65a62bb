/// Someone waiting for a connection slot to the same origin.
protocol ConnectionPoolWaiter: AnyObject {
    /// A connection was released or closed: lease again.
    func poolSlotMayBeAvailable()
}

/// Keep-alive connections per scheme/host/port, with a per-origin limit and an idle timeout.
/// Loop-confined.
///
/// Memory: at most `maxConnectionsPerHost` connections per origin (each one read buffer), and
/// one waiter entry per request queued for a slot.
final class ConnectionPool {
    /// What `lease` decided.
    enum Lease {
        /// Use this idle connection.
        case reuse(HTTPConnection)
        /// A slot is reserved: open a new connection (and report it with `didOpen` or
        /// `connectFailed`).
        case connect
        /// Every slot is busy; the waiter is told when one frees up.
        case wait
    }

    private let loop: EventLoop
    private let maxPerHost: Int
    private let idleTimeout: Duration
    private var idle: [PoolKey: [HTTPConnection]] = [:]
    private var slots: [PoolKey: Int] = [:]
    private var waiters: [PoolKey: [ConnectionPoolWaiter]] = [:]
    private var pruneTimer: TimerHandle?

    init(loop: EventLoop, maxConnectionsPerHost: Int, idleTimeout: Duration) {
        self.loop = loop
        self.maxPerHost = max(1, maxConnectionsPerHost)
        self.idleTimeout = idleTimeout
    }

    /// Number of idle connections (for tests and metrics).
    var idleCount: Int { idle.values.reduce(0) { $0 + $1.count } }

    /// Asks for a connection to `key`.
    /// - Parameters:
    ///   - forceNew: skip idle connections (after a stale-connection failure).
    ///   - waiter: told when to lease again if the answer is `.wait`.
    func lease(_ key: PoolKey, forceNew: Bool, waiter: ConnectionPoolWaiter) -> Lease {
        if !forceNew, var list = idle[key], let connection = list.popLast() {
            idle[key] = list.isEmpty ? nil : list
            return .reuse(connection)
        }
        let used = slots[key, default: 0]
        if used < maxPerHost {
            slots[key] = used + 1
            return .connect
        }
        if forceNew, var list = idle[key], !list.isEmpty {
            // Make room by closing the oldest idle connection; its slot becomes ours.
            let oldest = list.removeFirst()
            idle[key] = list.isEmpty ? nil : list
            oldest.pool = nil
            oldest.close()
            return .connect
        }
        waiters[key, default: []].append(waiter)
        return .wait
    }

    /// Stops waiting (the request was cancelled or timed out).
    func removeWaiter(_ waiter: ConnectionPoolWaiter, for key: PoolKey) {
        waiters[key]?.removeAll { $0 === waiter }
    }

    /// A reserved slot's connect attempt failed.
    func connectFailed(_ key: PoolKey) {
        freeSlot(key)
    }

    /// A connection opened on a reserved slot.
    func didOpen(_ connection: HTTPConnection) {
        connection.pool = self
    }

    /// A connection finished an exchange and can be reused.
    func release(_ connection: HTTPConnection) {
        let now = Instant.now()
        connection.markIdle(now: now)
        idle[connection.key, default: []].append(connection)
        schedulePrune(at: now + idleTimeout)
        wakeWaiter(connection.key)
    }

    /// A connection closed (idle or not).
    func connectionClosed(_ connection: HTTPConnection) {
        if var list = idle[connection.key], let index = list.firstIndex(where: { $0 === connection }) {
            list.remove(at: index)
            idle[connection.key] = list.isEmpty ? nil : list
        }
        freeSlot(connection.key)
    }

    /// Closes every idle connection (Session invalidation).
    func closeAll() {
        let all = idle.values.flatMap { $0 }
        idle.removeAll()
        for connection in all { connection.close() }
    }

    private func freeSlot(_ key: PoolKey) {
        let used = slots[key, default: 1] - 1
        slots[key] = used > 0 ? used : nil
        wakeWaiter(key)
    }

    private func wakeWaiter(_ key: PoolKey) {
        guard var list = waiters[key], !list.isEmpty else { return }
        let waiter = list.removeFirst()
        waiters[key] = list.isEmpty ? nil : list
        waiter.poolSlotMayBeAvailable()
    }

    private func schedulePrune(at deadline: Instant) {
        guard pruneTimer == nil else { return }
        pruneTimer = loop.schedule(at: deadline) { [weak self] in
            self?.prune()
        }
    }

    private func prune() {
        pruneTimer = nil
        let now = Instant.now()
        var earliest: Instant?
        for connection in idle.values.flatMap({ $0 }) {
            guard case .idle(let since) = connection.state else { continue }
            let expiry = since + idleTimeout
            if expiry <= now {
                connection.close()
            } else {
                earliest = min(earliest ?? expiry, expiry)
            }
        }
        if let earliest { schedulePrune(at: earliest) }
    }
}
