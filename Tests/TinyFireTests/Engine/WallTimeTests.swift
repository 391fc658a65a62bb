import Foundation
import Testing

@testable import FireAgentCore
@testable import TinyFireCore

@Suite("the core's wall time: the same moments and text as Foundation's Date")
struct WallTimeTests {
    @Test("seconds round towards the past, RFC 3339 text as the agent's log writes it, Date both ways")
    func againstDate() {
        for milliseconds: Int64 in [0, 1, 999, 1000, -1, -999, -1000, -1001, 1_767_225_600_123, 4_102_444_800_000, -86_400_000] {
            let time = WallTime(millisecondsSince1970: milliseconds)
            let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
            #expect(time.secondsSince1970 == Int64(date.timeIntervalSince1970.rounded(.down)), "\(milliseconds)")
            #expect(time.description == AgentLogHandler.timestamp(date), "\(milliseconds)")
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
}
