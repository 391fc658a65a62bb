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

/// Who asked the pool for a connection that it builds: hears the build's stages, its trust
/// question, and its end; nothing of the slot it holds, which the pool keeps. Called on the loop.
package protocol ConnectionRequester: ConnectionPoolWaiter {
    /// The build entered `stage` (the transfer's phase and clock follow it).
    func connectionBuild(entered stage: ConnectionBuildStage)
    /// The origin's handshake finished: judge `trust`, then call `completion(true)` to go on.
    /// On a refusal the requester fails itself and calls `completion(false)`.
    func connectionBuild(evaluate trust: TrustFacts, completion: @escaping (Bool) -> Void)
    /// The connection is ready for exchanges, or failed; `timings` says what the build took.
    func connectionBuild(finished result: Result<HTTPConnection, ConnectionBuildFailure>, timings: ConnectionBuildTimings)
}

/// What a build took, for the transfer's report.
package struct ConnectionBuildTimings {
    /// The name lookup and the TCP connect, once the socket opened (nil before).
    package var nameLookup: Duration?
    package var connect: Duration?
    /// The origin's TLS facts and handshake time (https, on success).
    package var tls: TLSStreamDetails?
    package var handshake: Duration?
}

/// Keep-alive connections per scheme/host/port, with a per-origin limit and an idle timeout:
/// carries out what `PoolLedger` decides (closes, wakes a waiter, arms the prune timer), and
/// builds the connections it grants through its `ConnectionFactory`, keeping the slot each
/// build holds until the connection opens or the build ends. Loop-confined.
///
/// Memory: at most `maxConnectionsPerHost` connections per origin (each one read buffer), and
/// one waiter entry per request queued for a slot.
package final class ConnectionPool {
    /// What `lease` decided.
    package enum Lease {
        /// Use this connection.
        case reuse(HTTPConnection)
        /// A slot was reserved and a connection is being built on it: the requester hears how
        /// it goes; `cancel()` the build to give the slot back.
        case building(PooledBuild)
        /// Every slot is busy; the waiter is told when one frees up.
        case wait
    }

    private let loop: EventLoop
    /// Builds what the pool grants (resolve, connect, proxies, TLS, trust).
    package let factory: ConnectionFactory
    private var ledger: PoolLedger<ObjectIdentifier, ObjectIdentifier>
    private var connections: [ObjectIdentifier: HTTPConnection] = [:]
    private var waiters: [ObjectIdentifier: ConnectionPoolWaiter] = [:]
    private var pruneTimer: TimerHandle?

    package init(loop: EventLoop, factory: ConnectionFactory, maxConnectionsPerHost: Int, idleTimeout: Duration) {
        self.loop = loop
        self.factory = factory
        ledger = PoolLedger(maxPerOrigin: maxConnectionsPerHost, idleTimeout: idleTimeout)
    }

    /// Number of idle connections (for tests and metrics).
    package var idleCount: Int { ledger.idleCount }

    /// Asks for a connection to `target`'s origin (its pool key): a kept-alive one, one built
    /// now on a reserved slot, or a wait for a slot.
    /// - Parameters:
    ///   - forceNew: skip kept-alive connections (after a stale-connection failure, or to answer
    ///     a proxy's challenge).
    ///   - sendsProxyCredentials: a CONNECT carries the proxy's credentials.
    ///   - requester: hears the build, or is told when to lease again if the answer is `.wait`.
    package func lease(_ target: RequestTarget, forceNew: Bool, sendsProxyCredentials: Bool, requester: ConnectionRequester) -> Lease {
        switch reserve(target.poolKey, forceNew: forceNew, waiter: requester) {
        case .reuse(let connection): return .reuse(connection)
        case .wait: return .wait
        case .connect:
            let build = PooledBuild(pool: self, key: target.poolKey, requester: requester)
            build.start(factory.build(target, key: target.poolKey, sendsProxyCredentials: sendsProxyCredentials, delegate: build))
            return .building(build)
        }
    }

    private enum Reservation {
        case reuse(HTTPConnection)
        case connect
        case wait
    }

    private func reserve(_ key: PoolKey, forceNew: Bool, waiter: ConnectionPoolWaiter) -> Reservation {
        let id = waiter.poolWaiterID
        let decision = ledger.lease(key, forceNew: forceNew, waiter: id)
        if !waiters.isEmpty, decision != .wait { waiters[id] = nil }
        switch decision {
        case .reuse(let connectionID):
            guard let connection = connections[connectionID] else {
                // Cannot happen (every leased connection is in the table); a new one is safe.
                _ = ledger.closed(connectionID, key: key)
                return reserve(key, forceNew: true, waiter: waiter)
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

    /// A reserved slot's build ended before its connection opened (failed, or cancelled).
    fileprivate func connectFailed(_ key: PoolKey) {
        wake(ledger.connectFailed(key))
    }

    /// A connection opened on a reserved slot, carrying the exchange that reserved it.
    fileprivate func didOpen(_ connection: HTTPConnection) {
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

/// One connection the pool builds for a requester, on a slot it reserved: the factory's
/// delegate. It gives the opened connection the slot (`didOpen`), or the slot back when the
/// build ends before that (failed, or cancelled by the requester), and passes the requester
/// the stages, the trust question and the end. Loop-confined.
package final class PooledBuild: ConnectionBuildDelegate {
    /// Cleared when the build ends (it breaks the cycle with the pool).
    private var pool: ConnectionPool?
    private let key: PoolKey
    /// Cleared when the build ends or is cancelled (it breaks the cycle with the transfer).
    private var requester: ConnectionRequester?
    private var build: ConnectionBuild?
    /// The connection once the socket opened (its reading is paused while an evaluator thinks).
    private var connection: HTTPConnection?
    /// What the build took so far (the name lookup and connect once the socket opened).
    package private(set) var timings = ConnectionBuildTimings()
    /// The build finished or was cancelled.
    package private(set) var ended = false

    fileprivate init(pool: ConnectionPool, key: PoolKey, requester: ConnectionRequester) {
        self.pool = pool
        self.key = key
        self.requester = requester
    }

    fileprivate func start(_ build: ConnectionBuild) {
        if !ended { self.build = build }
    }

    /// Abandons the build: its connection, if one opened, is closed; a slot still reserved goes
    /// back to the pool; the requester hears nothing more.
    package func cancel() {
        guard !ended else { return }
        ended = true
        requester = nil
        connection = nil
        build?.cancel()
        build = nil
        giveSlotBack()
    }

    /// Stops reading the connection while the requester's trust evaluator runs elsewhere (a
    /// TLS 1.3 server's tickets wait in the socket); the exchange reads again when it starts.
    package func pauseReading() { connection?.setReadingPaused(true) }

    private func giveSlotBack() {
        pool?.connectFailed(key)
        pool = nil
    }

    package func connectionBuild(entered stage: ConnectionBuildStage) {
        requester?.connectionBuild(entered: stage)
    }

    package func connectionBuild(opened connection: HTTPConnection, nameLookup: Duration, connect: Duration) {
        self.connection = connection
        timings.nameLookup = nameLookup
        timings.connect = connect
        // The slot is the connection's now: its close frees it.
        pool?.didOpen(connection)
        pool = nil
    }

    package func connectionBuild(evaluate trust: TrustFacts, completion: @escaping (Bool) -> Void) {
        guard let requester else { return completion(false) }
        requester.connectionBuild(evaluate: trust, completion: completion)
    }

    package func connectionBuild(
        finished result: Result<HTTPConnection, ConnectionBuildFailure>, tls: TLSStreamDetails?, handshake: Duration?
    ) {
        guard !ended else { return }
        ended = true
        build = nil
        connection = nil
        giveSlotBack()
        timings.tls = tls
        timings.handshake = handshake
        let requester = self.requester
        self.requester = nil
        requester?.connectionBuild(finished: result, timings: timings)
    }
}
