import Testing

@testable import TinyFire

@Suite("the pool's lease decisions, without sockets: reuse, the per-origin limit, waiters, replacement, expiry, capacity")
struct PoolLedgerTests {
    typealias Ledger = PoolLedger<Int, String>
    let a = PoolKey(scheme: "http", host: "a.test", port: 80)
    let b = PoolKey(scheme: "https", host: "a.test", port: 443)
    let t0 = Instant(nanoseconds: 5_000_000_000)

    @Test("the first request opens a connection; once released it is reused, most recently used first")
    func reuse() {
        var ledger = Ledger(maxPerOrigin: 2, idleTimeout: .seconds(60))
        #expect(ledger.lease(a, forceNew: false, waiter: "r1") == .connect)
        #expect(ledger.opened(1, key: a, capacity: 1) == nil)
        #expect(ledger.lease(a, forceNew: false, waiter: "r2") == .connect)
        #expect(ledger.opened(2, key: a, capacity: 1) == nil)
        #expect(ledger.released(1, key: a, now: t0) == nil)
        #expect(ledger.released(2, key: a, now: t0 + .seconds(1)) == nil)
        #expect(ledger.idleCount == 2)
        #expect(ledger.lease(a, forceNew: false, waiter: "r3") == .reuse(2))
        #expect(ledger.lease(a, forceNew: false, waiter: "r4") == .reuse(1))
        // Origins do not share: https on the same host is another.
        #expect(ledger.lease(b, forceNew: false, waiter: "r5") == .connect)
    }

    @Test("at the per-origin limit requests wait, in order; a release, a close or a failed connect names the next")
    func waiters() {
        var ledger = Ledger(maxPerOrigin: 1, idleTimeout: .seconds(60))
        #expect(ledger.lease(a, forceNew: false, waiter: "r1") == .connect)
        #expect(ledger.lease(a, forceNew: false, waiter: "r2") == .wait)
        #expect(ledger.lease(a, forceNew: false, waiter: "r3") == .wait)
        // Asking again while waiting does not queue twice.
        #expect(ledger.lease(a, forceNew: false, waiter: "r2") == .wait)
        #expect(ledger.connectFailed(a) == "r2")
        #expect(ledger.lease(a, forceNew: false, waiter: "r2") == .connect)
        #expect(ledger.opened(7, key: a, capacity: 1) == nil)
        #expect(ledger.released(7, key: a, now: t0) == "r3")
        #expect(ledger.lease(a, forceNew: false, waiter: "r3") == .reuse(7))
        #expect(ledger.lease(a, forceNew: false, waiter: "r4") == .wait)
        ledger.removeWaiter("r4", for: a)
        #expect(ledger.closed(7, key: a) == nil)
        #expect(ledger.lease(a, forceNew: false, waiter: "r5") == .connect)
    }

    @Test("forceNew skips idle connections; at the limit it replaces the oldest idle one instead of waiting")
    func forceNew() {
        var ledger = Ledger(maxPerOrigin: 2, idleTimeout: .seconds(60))
        _ = ledger.lease(a, forceNew: false, waiter: "r1")
        _ = ledger.opened(1, key: a, capacity: 1)
        _ = ledger.lease(a, forceNew: false, waiter: "r2")
        _ = ledger.opened(2, key: a, capacity: 1)
        _ = ledger.released(1, key: a, now: t0)
        _ = ledger.released(2, key: a, now: t0 + .seconds(1))
        #expect(ledger.lease(a, forceNew: true, waiter: "r3") == .replace(1))
        #expect(ledger.opened(3, key: a, capacity: 1) == nil)
        // Both slots busy and nothing idle: even forceNew waits.
        #expect(ledger.lease(a, forceNew: false, waiter: "r4") == .reuse(2))
        #expect(ledger.lease(a, forceNew: true, waiter: "r5") == .wait)
        // Under the limit forceNew simply connects.
        var roomy = Ledger(maxPerOrigin: 3, idleTimeout: .seconds(60))
        _ = roomy.lease(a, forceNew: false, waiter: "r1")
        _ = roomy.opened(1, key: a, capacity: 1)
        _ = roomy.released(1, key: a, now: t0)
        #expect(roomy.lease(a, forceNew: true, waiter: "r2") == .connect)
    }

    @Test("idle connections expire after the idle timeout, counted from their last release; in-use ones never")
    func expiry() {
        var ledger = Ledger(maxPerOrigin: 4, idleTimeout: .seconds(60))
        for id in 1...3 {
            _ = ledger.lease(a, forceNew: false, waiter: "r\(id)")
            _ = ledger.opened(id, key: a, capacity: 1)
        }
        _ = ledger.released(1, key: a, now: t0)
        _ = ledger.released(2, key: a, now: t0 + .seconds(30))
        var (expired, next) = ledger.expired(now: t0 + .seconds(59))
        #expect(expired.isEmpty && next == t0 + .seconds(60))
        (expired, next) = ledger.expired(now: t0 + .seconds(60))
        #expect(expired == [1] && next == t0 + .seconds(90))
        _ = ledger.closed(1, key: a)
        // Leased again, 2 is no longer idle.
        #expect(ledger.lease(a, forceNew: false, waiter: "r9") == .reuse(2))
        (expired, next) = ledger.expired(now: t0 + .seconds(1000))
        #expect(expired.isEmpty && next == nil)
        #expect(ledger.idleConnections.isEmpty)
    }

    @Test("a connection that carries several exchanges at once (a multiplexed protocol) is leased up to its capacity")
    func capacity() {
        var ledger = Ledger(maxPerOrigin: 1, idleTimeout: .seconds(60))
        #expect(ledger.lease(b, forceNew: false, waiter: "r1") == .connect)
        #expect(ledger.lease(b, forceNew: false, waiter: "r2") == .wait)
        #expect(ledger.lease(b, forceNew: false, waiter: "r3") == .wait)
        // It opens with room for 3: the first waiter is named at once.
        #expect(ledger.opened(1, key: b, capacity: 3) == "r2")
        #expect(ledger.lease(b, forceNew: false, waiter: "r2") == .reuse(1))
        #expect(ledger.lease(b, forceNew: false, waiter: "r3") == .reuse(1))
        #expect(ledger.lease(b, forceNew: false, waiter: "r4") == .wait)
        #expect(ledger.idleCount == 0)
        #expect(ledger.released(1, key: b, now: t0) == "r4")
        #expect(ledger.lease(b, forceNew: false, waiter: "r4") == .reuse(1))
        for _ in 0..<3 { _ = ledger.released(1, key: b, now: t0) }
        #expect(ledger.idleCount == 1)
    }
}
