#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A point on the monotonic clock, in nanoseconds. Never goes back, unaffected by wall-clock
/// changes (NTP steps on a board that just booted are common).
package struct Instant: Comparable, Sendable, Hashable {
    package var nanoseconds: UInt64

    package init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }

    package static func now() -> Instant {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Instant(nanoseconds: UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec))
    }

    package static func < (a: Instant, b: Instant) -> Bool { a.nanoseconds < b.nanoseconds }

    /// Milliseconds since 1970 by the wall clock (0 for a clock set before 1970).
    package static func wallClockMilliseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        guard ts.tv_sec >= 0 else { return 0 }
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec / 1_000_000)
    }

    /// `a` plus `d`, saturating at the end of time (a huge timeout is "never", not a wrapped
    /// deadline in the past).
    package static func + (a: Instant, d: Duration) -> Instant {
        let (sum, overflow) = a.nanoseconds.addingReportingOverflow(d.nanosecondsClamped)
        return Instant(nanoseconds: overflow ? .max : sum)
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    package func since(_ earlier: Instant) -> Duration {
        .nanoseconds(Int64(clamping: nanoseconds >= earlier.nanoseconds ? nanoseconds - earlier.nanoseconds : 0))
    }
}

extension Duration {
    /// A time interval in seconds (Foundation's `TimeInterval`, a CLI or config value) as a
    /// duration with millisecond precision, clamped to what a duration holds; nil when it is
    /// not a positive finite number (NaN, infinity, zero or less) — never a trap.
    /// - Parameter seconds: the interval.
    /// - Returns: the duration, or nil.
    public static func timeInterval(_ seconds: Double) -> Duration? {
        guard seconds.isFinite, seconds > 0 else { return nil }
        return .milliseconds(Int64(clamping: Int64(exactly: (seconds * 1000).rounded(.up)) ?? .max))
    }

    /// The duration in whole nanoseconds, clamped to 0...UInt64.max.
    package var nanosecondsClamped: UInt64 {
        let (seconds, attoseconds) = components
        if seconds < 0 { return 0 }
        let (ns, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return UInt64.max }
        let (total, wrapped) = ns.addingReportingOverflow(UInt64(attoseconds / 1_000_000_000))
        return wrapped ? .max : total
    }

    /// The duration in seconds as a Double, for messages and rates.
    package var seconds: Double {
        let (s, a) = components
        return Double(s) + Double(a) / 1e18
    }
}
