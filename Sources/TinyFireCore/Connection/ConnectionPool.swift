/// Someone waiting for a connection slot to the same origin.
package protocol ConnectionPoolWaiter: AnyObject {
    /// A connection was released or closed: lease again.
    func poolSlotMayBeAvailable()
    /// The waiter's identity (a protocol requirement because Embedded Swift cannot take the
    /// identity of an existential; the default is the object's).
    var poolWaiterID: ObjectIdentifier { get }
}

extension ConnectionPoolWaiter {
    package var poolWaiterID: ObjectIdentifier { ObjectIdentifier(self) }
}

/// Keep-alive connections per scheme/host/port, with a per-origin limit and an idle timeout:
/// carries out what `PoolLedger` decides (closes, wakes a waiter, arms the prune timer).
/// Loop-confined.
///
/// Memory: at most `maxConnectionsPerHost` connections per origin (each one read buffer), and
/// one waiter entry per request queued for a slot.
package final class ConnectionPool {
    /// What `lease` decided.
    package enum Lease {
        /// Use this connection.
        case reuse(HTTPConnection)
        /// A slot is reserved: open a new connection (and report it with `didOpen` or
        /// `connectFailed`).
        case connect
        /// Every slot is busy; the waiter is told when one frees up.
        case wait
    }

    private let loop: EventLoop
    private var ledger: PoolLedger<ObjectIdentifier, ObjectIdentifier>
    private var connections: [ObjectIdentifier: HTTPConnection] = [:]
    private var waiters: [ObjectIdentifier: ConnectionPoolWaiter] = [:]
    private var pruneTimer: TimerHandle?

    package init(loop: EventLoop, maxConnectionsPerHost: Int, idleTimeout: Duration) {
        self.loop = loop
        ledger = PoolLedger(maxPerOrigin: maxConnectionsPerHost, idleTimeout: idleTimeout)
    }

    /// Number of idle connections (for tests and metrics).
    package var idleCount: Int { ledger.idleCount }

    /// Asks for a connection to `key`.
    /// - Parameters:
    ///   - forceNew: skip kept-alive connections (after a stale-connection failure).
    ///   - waiter: told when to lease again if the answer is `.wait`.
    package func lease(_ key: PoolKey, forceNew: Bool, waiter: ConnectionPoolWaiter) -> Lease {
        let id = waiter.poolWaiterID
        let decision = ledger.lease(key, forceNew: forceNew, waiter: id)
        if !waiters.isEmpty, decision != .wait { waiters[id] = nil }
        switch decision {
        case .reuse(let connectionID):
            guard let connection = connections[connectionID] else {
                // Cannot happen (every leased connection is in the table); a new one is safe.
                _ = ledger.closed(connectionID, key: key)
                return lease(key, forceNew: true, waiter: waiter)
            }
            return .reuse(connection)
        case .connect:
            return .connect
        case .replace(let connectionID):
            // Its slot passes to the new connection: closed without telling the ledger.
            if let oldest = connections.removeValue(forKey: connectionID) {
                oldest.pool = nil
                oldest.close()
            }
            return .connect
        case .wait:
            waiters[id] = waiter
            return .wait
        }
    }

    /// Stops waiting (the request was cancelled or timed out).
    package func removeWaiter(_ waiter: ConnectionPoolWaiter, for key: PoolKey) {
        guard !waiters.isEmpty else { return }
        let id = waiter.poolWaiterID
        ledger.removeWaiter(id, for: key)
        waiters[id] = nil
    }

    /// A reserved slot's connect attempt failed.
    package func connectFailed(_ key: PoolKey) {
        wake(ledger.connectFailed(key))
    }

    /// A connection opened on a reserved slot, carrying the exchange that reserved it.
    package func didOpen(_ connection: HTTPConnection) {
        connection.pool = self
        let id = ObjectIdentifier(connection)
        connections[id] = connection
        wake(ledger.opened(id, key: connection.key, capacity: HTTPConnection.maxConcurrentExchanges))
    }

    /// A connection finished an exchange and can carry another.
    package func release(_ connection: HTTPConnection) {
        let now = Instant.now()
        connection.markIdle(now: now)
        let waiter = ledger.released(ObjectIdentifier(connection), key: connection.key, now: now)
        if pruneTimer == nil { schedulePrune(at: now + ledger.idleTimeout) }
        wake(waiter)
    }

    /// A connection closed (idle or not).
    package func connectionClosed(_ connection: HTTPConnection) {
        let id = ObjectIdentifier(connection)
        connections[id] = nil
        wake(ledger.closed(id, key: connection.key))
    }

    /// Closes every idle connection (Session invalidation).
    package func closeAll() {
        for id in ledger.idleConnections { connections[id]?.close() }
    }

    private func wake(_ id: ObjectIdentifier?) {
        guard let id, let waiter = waiters.removeValue(forKey: id) else { return }
        waiter.poolSlotMayBeAvailable()
    }

    private func schedulePrune(at deadline: Instant) {
        // The timer holds the pool until it fires: at most the idle timeout after the last
        // connection went idle, and it ends by closing the expired ones.
        pruneTimer = loop.schedule(at: deadline) { [self] in
            prune()
        }
    }

    private func prune() {
        pruneTimer = nil
        let (expired, next) = ledger.expired(now: .now())
        for id in expired { connections[id]?.close() }
        if let next, pruneTimer == nil { schedulePrune(at: next) }
    }
}
