import Foundation
import Testing

@testable import FireAgent
@testable import TinyFireCore

#if canImport(Glibc)
    import Glibc
#endif

@Suite("the core's wall time: the same moments and text as Foundation's Date")
struct WallTimeTests {
    @Test("seconds round towards the past, RFC 3339 text as the agent's log writes it, Date both ways")
    func againstDate() {
        for milliseconds: Int64 in [0, 1, 999, 1000, -1, -999, -1000, -1001, 1_767_225_600_123, 4_102_444_800_000, -86_400_000] {
            let time = WallTime(millisecondsSince1970: milliseconds)
            let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
            #expect(time.secondsSince1970 == Int64(date.timeIntervalSince1970.rounded(.down)), "\(milliseconds)")
            #expect(time.description == rfc3339Timestamp(date), "\(milliseconds)")
            #expect(time.date == date && WallTime(date) == time, "\(milliseconds)")
        }
        #expect(WallTime(secondsSince1970: 1_800_000_000).description == "2027-01-15T08:00:00Z")
        let now = WallTime.now()
        #expect(abs(now.date.timeIntervalSinceNow) < 5)
    }

    @Test("moving and measuring: to the millisecond, saturating instead of trapping")
    func arithmetic() {
        let start = WallTime(secondsSince1970: 1_767_225_600)
        #expect(start.adding(.milliseconds(1500)).millisecondsSince1970 == 1_767_225_601_500)
        #expect(start.adding(.seconds(-60)).duration(since: start) == .seconds(-60))
        #expect(start.adding(.microseconds(999)) == start, "below a millisecond is not a step")
        #expect(WallTime(millisecondsSince1970: .max - 1).adding(.seconds(10)).millisecondsSince1970 == .max)
        #expect(WallTime(millisecondsSince1970: .min + 1).adding(.seconds(-10)).millisecondsSince1970 == .min)
        #expect(WallTime(millisecondsSince1970: .max).duration(since: WallTime(millisecondsSince1970: .min)) == .milliseconds(Int64.max))
        #expect(WallTime(secondsSince1970: .max).millisecondsSince1970 == .max)
        #expect(WallTime(secondsSince1970: .min).millisecondsSince1970 == .min)
        #expect(Duration.seconds(Int64.max).wholeMilliseconds == .max)
        #expect(Duration.milliseconds(-1234).wholeMilliseconds == -1234)
    }

    @Test("the calendar: every day from year 1 to 9999 sampled against gmtime_r, its text read back, 2038 and leap days")
    func calendar() {
        func gmtimeText(_ seconds: Int64) -> String {
            var value = time_t(seconds)
            var parts = tm()
            gmtime_r(&value, &parts)
            func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
            let year = String(parts.tm_year + 1900)
            return String(repeating: "0", count: 4 - year.count) + year + "-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
                + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
        }
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        var samples: [Int64] = [
            0, -1, 86_399, 86_400, 951_782_400, 2_147_483_647, 2_147_483_648, 4_107_542_399, -62_135_596_800, 253_402_300_799,
        ]
        for _ in 0..<20_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            samples.append(-62_135_596_800 + Int64(state >> 11) % (253_402_300_799 + 62_135_596_800))
        }
        for seconds in samples {
            let time = WallTime(secondsSince1970: seconds)
            #expect(time.description == gmtimeText(seconds), "\(seconds)")
            #expect(WallTime(rfc3339: time.description) == time, "\(time)")
            let days = seconds.floorDivided(by: 86_400).quotient
            #expect(CivilDate(daysSince1970: days).daysSince1970 == days, "\(days)")
        }
        #expect(WallTime(secondsSince1970: 2_147_483_648).description == "2038-01-19T03:14:08Z", "past armv7's 32-bit time_t")
        #expect(WallTime(rfc3339: "2024-02-29T12:00:00Z")?.secondsSince1970 == 1_709_208_000)
        #expect(WallTime(rfc3339: "2000-02-29T00:00:00Z") != nil && WallTime(rfc3339: "1900-02-29T00:00:00Z") == nil)
    }

    @Test("RFC 3339 read: offsets, fractions to the millisecond, case; as Foundation's ISO 8601 reader where both read")
    func rfc3339() throws {
        let cases: [(String, Int64?)] = [
            ("2027-01-31T00:00:00Z", 1_801_353_600_000), ("2027-01-31T01:00:00+01:00", 1_801_353_600_000),
            ("2027-01-30T23:00:00.5-01:00", 1_801_353_600_500), ("2027-01-31t00:00:00.123456z", 1_801_353_600_123),
            ("2016-12-31T23:59:60Z", 1_483_228_799_000), ("1969-12-31T23:59:59.999Z", -1),
            ("2027-01-31", nil), ("2027-13-01T00:00:00Z", nil), ("2027-01-31T24:00:00Z", nil), ("2027-01-31T00:00:00", nil),
            ("2027-01-31T00:00:00+0100", nil), ("2027-02-29T00:00:00Z", nil), ("2027-04-31T00:00:00Z", nil),
            ("2027-01-31T00:00:00.Z", nil), ("2027-01-31T00:00:00Z ", nil), ("+027-01-31T00:00:00Z", nil), ("", nil),
        ]
        for (text, milliseconds) in cases {
            #expect(WallTime(rfc3339: text)?.millisecondsSince1970 == milliseconds, "\(text)")
        }
        for text in ["2027-01-31T00:00:00Z", "2027-01-31T01:00:00+01:00", "1999-12-31T23:59:59-08:00", "2038-01-19T03:14:08Z"] {
            let foundation = try Date(text, strategy: .iso8601)
            #expect(WallTime(rfc3339: text)?.date == foundation, "\(text)")
        }
    }
}
