import Testing

@testable import TinyFireCore

@Suite("StatusClass: one rule for what a status means to a request sent again")
struct StatusClassTests {
    @Test("every status falls in its class; 425 and 408 are transient everywhere, 429 and 503 throttle")
    func table() {
        let table: [(Int, StatusClass)] = [
            (200, .success), (204, .success), (206, .success), (299, .success),
            (100, .transient), (301, .transient), (302, .transient), (304, .transient),
            (400, .refused), (405, .refused), (409, .refused), (411, .refused), (412, .refused), (414, .refused),
            (415, .refused), (416, .refused), (422, .refused), (431, .refused), (451, .refused), (499, .refused),
            (401, .credentials), (403, .credentials), (407, .credentials),
            (404, .gone), (410, .gone),
            (413, .tooLarge),
            (408, .transient), (425, .transient),
            (429, .throttled(retryAfter: nil)), (503, .throttled(retryAfter: nil)),
            (500, .transient), (501, .transient), (502, .transient), (504, .transient), (599, .transient), (0, .transient),
        ]
        for (status, expected) in table {
            #expect(StatusClass(status: status) == expected, "\(status)")
            #expect(StatusClass(status: status).isPermanent == [.refused, .credentials, .gone, .tooLarge].contains(expected), "\(status)")
        }
    }

    @Test("Retry-After: seconds or an IMF date, capped at an hour, a past date no wait, anything else unread; only with 429 and 503")
    func retryAfter() {
        let now = WallTime(millisecondsSince1970: 784_111_777_000)  // Sun, 06 Nov 1994 08:49:37 GMT
        #expect(StatusClass(status: 429, retryAfter: "7", now: now) == .throttled(retryAfter: .seconds(7)))
        #expect(StatusClass(status: 503, retryAfter: " 0 ", now: now) == .throttled(retryAfter: .zero))
        #expect(StatusClass(status: 503, retryAfter: "999999", now: now) == .throttled(retryAfter: .seconds(3600)))
        #expect(
            StatusClass(status: 503, retryAfter: "Sun, 06 Nov 1994 08:50:07 GMT", now: now) == .throttled(retryAfter: .seconds(30)))
        #expect(StatusClass(status: 503, retryAfter: "Sun, 06 Nov 1994 08:00:00 GMT", now: now) == .throttled(retryAfter: .zero))
        #expect(StatusClass(status: 503, retryAfter: "Mon, 07 Nov 1994 08:49:37 GMT", now: now) == .throttled(retryAfter: .seconds(3600)))
        for unread in ["soon", "-5", "1.5", "", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            #expect(StatusClass(status: 429, retryAfter: unread, now: now) == .throttled(retryAfter: nil), "\(unread)")
        }
        // A date no arithmetic may overflow on, whatever the header or the clock says.
        #expect(StatusClass(status: 429, retryAfter: "Sun, 06 Nov 400000000 08:49:37 GMT", now: now) == .throttled(retryAfter: nil))
        let far = WallTime(millisecondsSince1970: .min)
        #expect(StatusClass(status: 429, retryAfter: "Fri, 31 Dec 9999 23:59:59 GMT", now: far) == .throttled(retryAfter: .seconds(3600)))
        // A Retry-After beside a status that does not throttle changes nothing.
        #expect(StatusClass(status: 500, retryAfter: "7", now: now) == .transient)
        #expect(StatusClass(status: 301, retryAfter: "7", now: now) == .transient)
    }

    @Test("HTTP dates: IMF-fixdate only, fields in range")
    func dates() {
        #expect(HTTPDate.secondsSince1970("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.secondsSince1970("Thu, 01 Jan 1970 00:00:00 GMT") == 0)
        #expect(HTTPDate.secondsSince1970("Tue, 29 Feb 2028 23:59:59 GMT") == 1_835_481_599)
        #expect(HTTPDate.secondsSince1970("Sat, 21 Nov 2026 10:00:00 GMT") == 1_795_255_200)
        #expect(HTTPDate.secondsSince1970("Fri, 31 Dec 9999 23:59:59 GMT") == 253_402_300_799)
        for bad in [
            "Sun, 06 Nov 300000000000 08:49:37 GMT", "Sun, 06 Nov 10000 08:49:37 GMT", "Sun, 06 Nov 0 08:49:37 GMT",
            "Sun, 06 Nov -5 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:61:00 GMT", "Sun, 06 Nov 1994 08:49 GMT", "06 Nov 1994 08:49:37 GMT",
        ] {
            #expect(HTTPDate.secondsSince1970(bad) == nil, "\(bad)")
        }
    }
}
