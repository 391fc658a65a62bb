/// The clocks of one transfer, without I/O: which timeout applies in which phase, when the next
/// one falls due, and what it means when a timer fires. Time is passed in as an `Instant`, so
/// every branch is testable with made-up times.
///
/// - The total timeout runs from the start, across redirects and pauses.
/// - Resolving plus connecting share `connect`; the TLS handshake has `handshake`.
/// - While the request is sent and the response read: `idle` from the last byte moved either
///   way, and the low-speed window (fewer than `bytesPerSecond` over `window` fails).
/// - Paused (the caller suspended the request, its consumer is behind, or the receive-rate limit
///   holds reading back): only the total timeout and the end of the throttle run; the idle and
///   low-speed clocks restart when reading resumes.
/// - The receive-rate limit: after each read, reading pauses until the bytes of the hop so far
///   are due at the rate (the average stays at the rate, give or take one read buffer).
package struct TransferDeadlines: Sendable {
    /// The limits, from the session's configuration and the request.
    package struct Limits: Sendable, Equatable {
        package var connect: Duration
        package var handshake: Duration
        package var idle: Duration
        package var total: Duration?
        package var lowSpeed: LowSpeedLimit?
        package var maxReceiveBytesPerSecond: Int?

        package init(
            connect: Duration, handshake: Duration, idle: Duration, total: Duration?, lowSpeed: LowSpeedLimit?,
            maxReceiveBytesPerSecond: Int?
        ) {
            self.connect = connect
            self.handshake = handshake
            self.idle = idle
            self.total = total
            self.lowSpeed = lowSpeed
            self.maxReceiveBytesPerSecond = maxReceiveBytesPerSecond
        }
    }

    /// Which clock the transfer's phase runs on.
    package enum Stage: Sendable, Equatable {
        /// Waiting for a pool slot: only the total timeout.
        case waiting
        /// Resolving the name and connecting.
        case connecting
        /// TLS handshake.
        case handshaking
        /// Sending the request or reading the response.
        case exchanging
    }

    /// What a fired timer found.
    package enum Verdict: Sendable, Equatable {
        /// Nothing is due yet (or the low-speed window passed and a new one started).
        case none
        /// The throttle ended: reading resumes.
        case resumeReading
        /// A timeout expired: the transfer fails.
        case expired(Expiry)
    }

    /// A timeout that expired.
    package enum Expiry: Sendable, Equatable {
        case timedOut(TimeoutKind, limit: Duration)
        case lowSpeed(bytesPerSecond: Int, window: Duration, measuredBytesPerSecond: Int)
    }

    package let limits: Limits
    package let started: Instant
    package private(set) var stage: Stage = .waiting
    private var stageDeadline: Instant?
    private var lastActivity: Instant
    private var lowSpeedWindowStart: Instant
    private var lowSpeedWindowBytes: UInt64 = 0
    /// Reading held back until then by the receive-rate limit.
    package private(set) var throttledUntil: Instant?
    private var rateStart: Instant
    private var rateBytes: UInt64 = 0
    /// Suspended by the caller or held back by the consumer.
    package private(set) var paused = false

    package init(limits: Limits, now: Instant) {
        self.limits = limits
        started = now
        lastActivity = now
        lowSpeedWindowStart = now
        rateStart = now
    }

    /// Not reading: paused or throttled.
    package var holdsReading: Bool { paused || throttledUntil != nil }

    /// Enters a stage: connecting and handshaking start their own deadline; exchanging starts
    /// the idle, low-speed and rate clocks afresh (a new hop).
    package mutating func enter(_ stage: Stage, now: Instant) {
        self.stage = stage
        switch stage {
        case .waiting, .exchanging: stageDeadline = nil
        case .connecting: stageDeadline = now + limits.connect
        case .handshaking: stageDeadline = now + limits.handshake
        }
        if stage == .exchanging {
            restartActivityClocks(now: now)
            throttledUntil = nil
        }
    }

    /// Bytes were written.
    package mutating func sent(_ bytes: Int, now: Instant) {
        lastActivity = now
        lowSpeedWindowBytes &+= UInt64(bytes)
    }

    /// Bytes were read. Returns the instant reading must wait for when the receive-rate limit
    /// now holds it back (nil: read on).
    package mutating func received(_ bytes: Int, now: Instant) -> Instant? {
        lastActivity = now
        lowSpeedWindowBytes &+= UInt64(bytes)
        guard let rate = limits.maxReceiveBytesPerSecond, throttledUntil == nil else { return nil }
        rateBytes &+= UInt64(bytes)
        let due = rateStart + .seconds(Double(rateBytes) / Double(max(1, rate)))
        // Under 2 ms ahead is not worth a timer.
        guard due > now + .milliseconds(2) else { return nil }
        throttledUntil = due
        return due
    }

    /// Pauses or resumes (caller or consumer). Resuming restarts the idle and low-speed clocks,
    /// and the rate's: a pause is not credit for a burst afterwards.
    package mutating func setPaused(_ on: Bool, now: Instant) {
        paused = on
        if !on {
            restartActivityClocks(now: now)
        }
    }

    private mutating func restartActivityClocks(now: Instant) {
        lastActivity = now
        lowSpeedWindowStart = now
        lowSpeedWindowBytes = 0
        rateStart = now
        rateBytes = 0
    }

    /// When the next timer must fire; nil for none.
    package var nextDeadline: Instant? {
        var deadline: Instant?
        func consider(_ candidate: Instant?) {
            guard let candidate else { return }
            if let current = deadline, current <= candidate { return }
            deadline = candidate
        }
        if let total = limits.total { consider(started + total) }
        consider(throttledUntil)
        if holdsReading { return deadline }
        switch stage {
        case .waiting: break
        case .connecting, .handshaking: consider(stageDeadline)
        case .exchanging:
            consider(lastActivity + limits.idle)
            if let lowSpeed = limits.lowSpeed { consider(lowSpeedWindowStart + lowSpeed.window) }
        }
        return deadline
    }

    /// A timer fired at `now`: what is due.
    package mutating func fire(now: Instant) -> Verdict {
        if let total = limits.total, started + total <= now { return .expired(.timedOut(.total, limit: total)) }
        var verdict = Verdict.none
        if let until = throttledUntil, until <= now {
            // The throttle ends: the pause was not idleness. The low-speed window keeps
            // counting (the limited rate is the rate).
            throttledUntil = nil
            lastActivity = now
            if !paused { verdict = .resumeReading }
        }
        if holdsReading { return verdict }
        switch stage {
        case .waiting:
            break
        case .connecting:
            if let deadline = stageDeadline, deadline <= now { return .expired(.timedOut(.connect, limit: limits.connect)) }
        case .handshaking:
            if let deadline = stageDeadline, deadline <= now {
                return .expired(.timedOut(.tlsHandshake, limit: limits.handshake))
            }
        case .exchanging:
            if lastActivity + limits.idle <= now { return .expired(.timedOut(.idle, limit: limits.idle)) }
            if let limit = limits.lowSpeed, lowSpeedWindowStart + limit.window <= now {
                let elapsed = max(now.since(lowSpeedWindowStart).seconds, 0.001)
                let rate = Double(lowSpeedWindowBytes) / elapsed
                if rate < Double(limit.bytesPerSecond) {
                    return .expired(
                        .lowSpeed(bytesPerSecond: limit.bytesPerSecond, window: limit.window, measuredBytesPerSecond: Int(rate)))
                }
                lowSpeedWindowStart = now
                lowSpeedWindowBytes = 0
            }
        }
        return verdict
    }
}

/// A minimum transfer rate: fewer than `bytesPerSecond` on average over any whole `window`
/// aborts the transfer (for dying cellular links that never quite drop).
public struct LowSpeedLimit: Sendable, Equatable {
    /// Minimum average rate, bytes per second.
    public var bytesPerSecond: Int
    /// Length of the measuring window.
    public var window: Duration

    /// Creates a limit.
    /// - Parameters:
    ///   - bytesPerSecond: minimum average rate.
    ///   - window: how long the rate may stay below it.
    public init(bytesPerSecond: Int, window: Duration) {
        self.bytesPerSecond = bytesPerSecond
        self.window = window
    }
}
