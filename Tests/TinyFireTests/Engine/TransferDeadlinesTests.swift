import Testing

@testable import TinyFire

@Suite("a transfer's deadlines, from made-up times: connect, handshake, idle, total, low speed, pauses, the receive rate")
struct TransferDeadlinesTests {
    let t0 = Instant(nanoseconds: 1_000_000_000_000)

    func at(_ seconds: Double) -> Instant { t0 + .seconds(seconds) }

    func limits(
        total: Duration? = nil, lowSpeed: LowSpeedLimit? = nil, rate: Int? = nil
    ) -> TransferDeadlines.Limits {
        TransferDeadlines.Limits(
            connect: .seconds(30), handshake: .seconds(10), idle: .seconds(60), total: total, lowSpeed: lowSpeed,
            maxReceiveBytesPerSecond: rate)
    }

    @Test("connecting (DNS plus TCP) has the connect limit, the handshake its own; waiting for a slot has none but the total")
    func establishing() {
        var clock = TransferDeadlines(limits: limits(), now: t0)
        clock.enter(.waiting, now: t0)
        #expect(clock.nextDeadline == nil)
        clock.enter(.connecting, now: at(1))
        #expect(clock.nextDeadline == at(31))
        #expect(clock.fire(now: at(30.9)) == .none)
        #expect(clock.fire(now: at(31)) == .expired(.timedOut(.connect, limit: .seconds(30))))
        clock.enter(.handshaking, now: at(5))
        #expect(clock.nextDeadline == at(15))
        #expect(clock.fire(now: at(15)) == .expired(.timedOut(.tlsHandshake, limit: .seconds(10))))
    }

    @Test("while exchanging, each byte sent or received pushes the idle deadline; silence for the idle limit fails")
    func idle() {
        var clock = TransferDeadlines(limits: limits(), now: t0)
        clock.enter(.exchanging, now: t0)
        #expect(clock.nextDeadline == at(60))
        clock.sent(100, now: at(10))
        #expect(clock.nextDeadline == at(70))
        #expect(clock.received(5, now: at(50)) == nil)
        #expect(clock.fire(now: at(70)) == .none)
        #expect(clock.nextDeadline == at(110))
        #expect(clock.fire(now: at(110)) == .expired(.timedOut(.idle, limit: .seconds(60))))
    }

    @Test("the total limit counts from the start across stages and pauses, and wins over every other")
    func total() {
        var clock = TransferDeadlines(limits: limits(total: .seconds(20)), now: t0)
        clock.enter(.connecting, now: at(1))
        #expect(clock.nextDeadline == at(20))
        clock.enter(.exchanging, now: at(5))
        clock.setPaused(true, now: at(6))
        #expect(clock.nextDeadline == at(20))
        #expect(clock.fire(now: at(20)) == .expired(.timedOut(.total, limit: .seconds(20))))
    }

    @Test("paused, the idle clock stops; resuming restarts idle and low-speed windows from the resume")
    func pauses() {
        let lowSpeed = LowSpeedLimit(bytesPerSecond: 1000, window: .seconds(10))
        var clock = TransferDeadlines(limits: limits(lowSpeed: lowSpeed), now: t0)
        clock.enter(.exchanging, now: t0)
        #expect(clock.nextDeadline == at(10))
        clock.setPaused(true, now: at(2))
        #expect(clock.holdsReading && clock.nextDeadline == nil)
        #expect(clock.fire(now: at(500)) == .none)
        clock.setPaused(false, now: at(500))
        #expect(!clock.holdsReading && clock.nextDeadline == at(510))
    }

    @Test("low speed: under the rate over a window fails with the measured rate; at or above it a new window starts")
    func lowSpeed() {
        let lowSpeed = LowSpeedLimit(bytesPerSecond: 1000, window: .seconds(10))
        var clock = TransferDeadlines(limits: limits(lowSpeed: lowSpeed), now: t0)
        clock.enter(.exchanging, now: t0)
        _ = clock.received(10_000, now: at(9))
        #expect(clock.fire(now: at(10)) == .none)
        #expect(clock.nextDeadline == at(20))
        _ = clock.received(2_000, now: at(19))
        #expect(clock.fire(now: at(20)) == .expired(.lowSpeed(bytesPerSecond: 1000, window: .seconds(10), measuredBytesPerSecond: 200)))
    }

    @Test("the receive rate: reading pauses until the bytes so far are due, then resumes; a new hop starts the rate afresh")
    func receiveRate() {
        var clock = TransferDeadlines(limits: limits(rate: 1000), now: t0)
        clock.enter(.exchanging, now: t0)
        // 500 bytes at once are due at 0.5 s: hold reading until then.
        #expect(clock.received(500, now: at(0)) == at(0.5))
        #expect(clock.holdsReading && clock.nextDeadline == at(0.5))
        #expect(clock.fire(now: at(0.4)) == .none)
        #expect(clock.fire(now: at(0.5)) == .resumeReading)
        #expect(!clock.holdsReading)
        // 1 byte more at 1.0 s is not ahead of the rate.
        #expect(clock.received(1, now: at(1.0)) == nil)
        // Less than 2 ms ahead is not worth a timer.
        var fine = TransferDeadlines(limits: limits(rate: 1_000_000), now: t0)
        fine.enter(.exchanging, now: t0)
        #expect(fine.received(1000, now: at(0)) == nil)
        // A new hop: the earlier bytes are not owed any more.
        clock.enter(.exchanging, now: at(1.0))
        #expect(clock.received(250, now: at(1.0)) == at(1.25))
        // Throttled while paused: the end of the throttle does not resume reading.
        clock.setPaused(true, now: at(1.05))
        #expect(clock.fire(now: at(1.25)) == .none)
        #expect(clock.holdsReading)
    }

    @Test("a huge limit is never, not a deadline wrapped into the past")
    func saturates() {
        var clock = TransferDeadlines(
            limits: TransferDeadlines.Limits(
                connect: .seconds(Int64.max), handshake: .seconds(10), idle: .seconds(Int64.max), total: .seconds(Int64.max),
                lowSpeed: nil, maxReceiveBytesPerSecond: nil),
            now: t0)
        clock.enter(.connecting, now: t0)
        #expect(clock.nextDeadline == Instant(nanoseconds: .max))
        #expect(clock.fire(now: at(1_000_000)) == .none)
    }
}
