/// A moment on the wall clock (`CLOCK_REALTIME`), to the millisecond, without Foundation: what
/// the agent stamps, compares with its clock floor and writes in its status. The wall clock can
/// be anything on a board (1970 after a boot without a real-time clock, stepped by NTP at any
/// moment): measure durations on `Instant`, and judge a wall time before trusting it.
public struct WallTime: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Milliseconds since 1970-01-01T00:00:00Z (negative before it).
    public var millisecondsSince1970: Int64

    /// The moment `millisecondsSince1970` after the epoch.
    public init(millisecondsSince1970: Int64) {
        self.millisecondsSince1970 = millisecondsSince1970
    }

    /// The moment `secondsSince1970` after the epoch (saturating far outside ±292 million years).
    public init(secondsSince1970: Int64) {
        let (product, overflow) = secondsSince1970.multipliedReportingOverflow(by: 1000)
        millisecondsSince1970 = overflow ? (secondsSince1970 < 0 ? .min : .max) : product
    }

    /// The wall clock now.
    public static func now() -> WallTime {
        WallTime(millisecondsSince1970: Int64(clamping: Instant.wallClockMilliseconds()))
    }

    /// Whole seconds since the epoch, rounded down (towards the past).
    public var secondsSince1970: Int64 {
        let (quotient, remainder) = millisecondsSince1970.quotientAndRemainder(dividingBy: 1000)
        return remainder < 0 ? quotient - 1 : quotient
    }

    /// `2026-11-18T11:06:40Z`: RFC 3339 in UTC, whole seconds.
    public var description: String { rfc3339(epochSeconds: secondsSince1970) }

    /// This moment moved by `duration` (to the millisecond, saturating).
    public func adding(_ duration: Duration) -> WallTime {
        let (sum, overflow) = millisecondsSince1970.addingReportingOverflow(duration.wholeMilliseconds)
        return WallTime(millisecondsSince1970: overflow ? (duration < .zero ? .min : .max) : sum)
    }

    /// How long after `earlier` this moment is (negative when it is before it).
    public func duration(since earlier: WallTime) -> Duration {
        let (difference, overflow) = millisecondsSince1970.subtractingReportingOverflow(earlier.millisecondsSince1970)
        return .milliseconds(overflow ? (earlier > self ? Int64.min : Int64.max) : difference)
    }

    /// Earlier is less.
    public static func < (lhs: WallTime, rhs: WallTime) -> Bool { lhs.millisecondsSince1970 < rhs.millisecondsSince1970 }
}

extension Duration {
    /// The duration in whole milliseconds (rounded towards zero, clamped to `Int64`).
    package var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflowSum) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000_000_000)
        return overflowSum ? (seconds < 0 ? .min : .max) : sum
    }
}
