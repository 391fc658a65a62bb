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
    public var secondsSince1970: Int64 { millisecondsSince1970.floorDivided(by: 1000).quotient }

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

extension WallTime {
    /// Reads an RFC 3339 date-time: `2027-01-31T00:00:00Z`, `2027-01-31T01:00:00.5+01:00`
    /// (`T` and `Z` in either case; a fraction is kept to the millisecond, rounded down; a leap
    /// second `:60` counts as `:59`). Nil for anything else: a date alone, no offset, an offset
    /// without its colon, a day the month does not have (`2027-02-29`), an hour of 24.
    /// - Parameter text: the date-time.
    public init?(rfc3339 text: String) {
        let b = Array(text.utf8)
        func number(_ range: Range<Int>) -> Int64? {
            guard range.upperBound <= b.count else { return nil }
            var value: Int64 = 0
            for index in range {
                guard b[index] >= 0x30, b[index] <= 0x39 else { return nil }
                value = value * 10 + Int64(b[index] - 0x30)
            }
            return value
        }
        guard b.count >= 20, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: "t"),
            b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"),
            let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19),
            (1...12).contains(month), day >= 1, day <= CivilDate.days(inMonth: month, of: year), hour < 24, minute < 60, second <= 60
        else { return nil }
        var index = 19
        var milliseconds: Int64 = 0
        if index < b.count, b[index] == UInt8(ascii: ".") {
            index += 1
            let start = index
            while index < b.count, b[index] >= 0x30, b[index] <= 0x39 {
                if index - start < 3 { milliseconds = milliseconds * 10 + Int64(b[index] - 0x30) }
                index += 1
            }
            guard index > start else { return nil }
            for _ in min(index - start, 3)..<3 { milliseconds *= 10 }
        }
        guard index < b.count else { return nil }
        var offset: Int64 = 0
        if b[index] == UInt8(ascii: "Z") || b[index] == UInt8(ascii: "z") {
            index += 1
        } else if b[index] == UInt8(ascii: "+") || b[index] == UInt8(ascii: "-") {
            guard index + 6 == b.count, b[index + 3] == UInt8(ascii: ":"), let hours = number(index + 1..<index + 3),
                let minutes = number(index + 4..<index + 6), hours < 24, minutes < 60
            else { return nil }
            offset = (hours * 60 + minutes) * 60 * (b[index] == UInt8(ascii: "+") ? 1 : -1)
            index += 6
        }
        guard index == b.count else { return nil }
        let days = CivilDate(year: year, month: month, day: day).daysSince1970
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + min(second, 59) - offset
        self.init(millisecondsSince1970: seconds * 1000 + milliseconds)
    }
}

/// A day of the proleptic Gregorian calendar, converted to and from days since 1970-01-01 with
/// integer arithmetic (the civil-from-days algorithm: 400-year eras of 146,097 days, years
/// counted from March so the leap day ends them). No `time_t`, no time zone: exact for any
/// `Int64` day count a `WallTime` can hold.
package struct CivilDate: Equatable {
    package var year: Int64
    /// 1–12.
    package var month: Int64
    /// 1–31.
    package var day: Int64

    package init(year: Int64, month: Int64, day: Int64) {
        self.year = year
        self.month = month
        self.day = day
    }

    /// The date `days` after 1970-01-01 (before it when negative).
    package init(daysSince1970 days: Int64) {
        let shifted = days + 719_468  // from 0000-03-01
        let era = shifted.floorDivided(by: 146_097).quotient
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153  // 0 is March
        day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    }

    /// Days from 1970-01-01 to this date (negative before it).
    package var daysSince1970: Int64 {
        let marchYear = month <= 2 ? year - 1 : year
        let era = marchYear.floorDivided(by: 400).quotient
        let yearOfEra = marchYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The days `month` (1–12) has in `year`.
    package static func days(inMonth month: Int64, of year: Int64) -> Int64 {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

extension Int64 {
    /// The quotient rounded towards minus infinity, and the remainder that goes with it (0 up to
    /// `divisor`, for a positive divisor).
    package func floorDivided(by divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        let (quotient, remainder) = quotientAndRemainder(dividingBy: divisor)
        return remainder < 0 ? (quotient - 1, remainder + divisor) : (quotient, remainder)
    }
}
