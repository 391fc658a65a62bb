/// The connection pool's decisions, without I/O: which connection a request gets, when a new
/// one may be opened, who waits, which idle connections expired. `ConnectionPool` executes
/// them (closes, opens, wakes waiters, arms the prune timer).
///
/// A connection is counted in exchanges it can carry at once (`capacity`): 1 for HTTP/1.1, the
/// peer's stream limit for a multiplexed protocol. This is the one place that knows how many
/// exchanges share a connection; a connection with spare capacity is leased again at once, and
/// one with none in use is idle (and expires after `idleTimeout`).
///
/// Memory: one entry per open connection and per request waiting for a slot; at most
/// `maxPerOrigin` connections per origin.
package struct PoolLedger<ConnectionID: Hashable & Sendable, Waiter: Hashable & Sendable>: Sendable {
    /// What `lease` decided.
    package enum Lease: Sendable, Equatable {
        /// Run the exchange on this open connection.
        case reuse(ConnectionID)
        /// A slot is reserved: open a connection (then `opened` or `connectFailed`).
        case connect
        /// Close this idle connection to make room, then open one on its slot (a request that
        /// must not reuse connections, at the origin's limit).
        case replace(ConnectionID)
        /// Every slot is busy: the waiter is named again by a later call when one frees up.
        case wait
    }

    private struct Entry: Sendable {
        var id: ConnectionID
        var capacity: Int
        var inUse: Int
        /// Since when nothing ran on it (nil while in use).
        var idleSince: Instant?
    }

    package let maxPerOrigin: Int
    package let idleTimeout: Duration
    /// Open connections per origin, oldest first.
    private var open: [PoolKey: [Entry]] = [:]
    /// Slots taken per origin: open connections plus connects under way.
    private var slots: [PoolKey: Int] = [:]
    private var waiters: [PoolKey: [Waiter]] = [:]

    package init(maxPerOrigin: Int, idleTimeout: Duration) {
        self.maxPerOrigin = max(1, maxPerOrigin)
        self.idleTimeout = idleTimeout
    }

    /// Open connections with nothing running on them.
    package var idleCount: Int { open.values.reduce(0) { $0 + $1.count { $0.inUse == 0 } } }

    /// Asks for a connection to `key`.
    /// - Parameters:
    ///   - forceNew: skip open connections (a retry after a stale kept-alive connection).
    ///   - waiter: who to name later if the answer is `.wait`.
    package mutating func lease(_ key: PoolKey, forceNew: Bool, waiter: Waiter) -> Lease {
        let lease = decideLease(key, forceNew: forceNew, waiter: waiter)
        // A waiter served (named earlier, or lucky now) leaves the queue.
        if lease != .wait, !waiters.isEmpty { removeWaiter(waiter, for: key) }
        return lease
    }

    private mutating func decideLease(_ key: PoolKey, forceNew: Bool, waiter: Waiter) -> Lease {
        // Entries are changed in place through the dictionary's values (one hash per call, no
        // copy of the list).
        let slot = open.index(forKey: key)
        if !forceNew, let slot, let index = open.values[slot].lastIndex(where: { $0.inUse < $0.capacity }) {
            // The most recently used connection first: the likeliest to still be open.
            open.values[slot][index].inUse += 1
            open.values[slot][index].idleSince = nil
            return .reuse(open.values[slot][index].id)
        }
        let used = slots[key, default: 0]
        if used < maxPerOrigin {
            slots[key] = used + 1
            return .connect
        }
        if forceNew, let slot, let index = open.values[slot].firstIndex(where: { $0.inUse == 0 }) {
            // Make room: the oldest idle connection goes, and its slot becomes this request's.
            let oldest = open.values[slot].remove(at: index)
            if open.values[slot].isEmpty { open.remove(at: slot) }
            return .replace(oldest.id)
        }
        if !(waiters[key]?.contains(waiter) ?? false) { waiters[key, default: []].append(waiter) }
        return .wait
    }

    /// A reserved slot's connection opened, carrying the exchange that reserved it.
    /// - Parameter capacity: exchanges it can carry at once (1 for HTTP/1.1).
    /// - Returns: a waiter to name when the connection has spare capacity at once.
    package mutating func opened(_ id: ConnectionID, key: PoolKey, capacity: Int) -> Waiter? {
        open[key, default: []].append(Entry(id: id, capacity: max(1, capacity), inUse: 1, idleSince: nil))
        return capacity > 1 ? nextWaiter(key) : nil
    }

    /// A reserved slot's connect failed.
    /// - Returns: the waiter that may now take the slot.
    package mutating func connectFailed(_ key: PoolKey) -> Waiter? {
        freeSlot(key)
        return nextWaiter(key)
    }

    /// An exchange ended and the connection can carry another.
    /// - Returns: the waiter that may now lease it.
    package mutating func released(_ id: ConnectionID, key: PoolKey, now: Instant) -> Waiter? {
        guard let slot = open.index(forKey: key), let index = open.values[slot].firstIndex(where: { $0.id == id }) else { return nil }
        var entry = open.values[slot].remove(at: index)
        entry.inUse = max(0, entry.inUse - 1)
        if entry.inUse == 0 { entry.idleSince = now }
        // Most recently used last.
        open.values[slot].append(entry)
        return waiters.isEmpty ? nil : nextWaiter(key)
    }

    /// A connection closed, in use or idle (its slot frees).
    /// - Returns: the waiter that may now take the slot.
    package mutating func closed(_ id: ConnectionID, key: PoolKey) -> Waiter? {
        if var list = open[key], let index = list.firstIndex(where: { $0.id == id }) {
            list.remove(at: index)
            open[key] = list.isEmpty ? nil : list
        }
        freeSlot(key)
        return nextWaiter(key)
    }

    /// A waiter gave up (cancelled, timed out).
    package mutating func removeWaiter(_ waiter: Waiter, for key: PoolKey) {
        guard !waiters.isEmpty, var list = waiters[key] else { return }
        list.removeAll { $0 == waiter }
        waiters[key] = list.isEmpty ? nil : list
    }

    /// The idle connections whose time is up at `now` (to close; each is reported back with
    /// `closed`), and when the next one expires.
    package func expired(now: Instant) -> (expired: [ConnectionID], next: Instant?) {
        var expired: [ConnectionID] = []
        var next: Instant?
        for list in open.values {
            for entry in list {
                guard let since = entry.idleSince else { continue }
                let expiry = since + idleTimeout
                if expiry <= now {
                    expired.append(entry.id)
                } else {
                    next = min(next ?? expiry, expiry)
                }
            }
        }
        return (expired, next)
    }

    /// Every idle connection (to close when the session goes away).
    package var idleConnections: [ConnectionID] { open.values.flatMap { $0.filter { $0.inUse == 0 }.map { $0.id } } }

    private mutating func freeSlot(_ key: PoolKey) {
        let used = slots[key, default: 1] - 1
        slots[key] = used > 0 ? used : nil
    }

    private mutating func nextWaiter(_ key: PoolKey) -> Waiter? {
        guard var list = waiters[key], !list.isEmpty else { return nil }
        let waiter = list.removeFirst()
        waiters[key] = list.isEmpty ? nil : list
        return waiter
    }
}
