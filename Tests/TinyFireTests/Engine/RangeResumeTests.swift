import Testing
import TinyFireCore

@testable import TinyFire

@Suite("resuming a download, from responses alone: continue, replace, restart, reject, leave alone")
struct RangeResumeTests {
    func judge(
        _ status: Int, range: String? = nil, length: String? = nil, coding: String? = nil, offset: UInt64 = 1000,
        partial: UInt64? = nil, total: UInt64? = 5000
    ) -> RangeResume.Verdict {
        RangeResume.judge(
            RangeResume.Response(status: status, contentRange: range, contentLength: length, contentEncoding: coding),
            offset: offset, partialBytes: partial ?? offset, knownTotal: total)
    }

    func restarts(_ verdict: RangeResume.Verdict, fromZero: Bool, saying text: String) -> Bool {
        if case .restart(let zero, let reason) = verdict { return zero == fromZero && reason.contains(text) }
        return false
    }

    func rejects(_ verdict: RangeResume.Verdict, saying text: String) -> Bool {
        if case .reject(let reason) = verdict { return reason.contains(text) }
        return false
    }

    @Test("a 206 from exactly the end of the partial file to the end of the resource continues it")
    func continues() {
        #expect(judge(206, range: "bytes 1000-4999/5000", length: "4000") == .append)
        // Unknown complete length, and no length known from before: nothing contradicts it.
        #expect(judge(206, range: "bytes 1000-4999/*", total: nil) == .append)
        #expect(judge(206, range: "bytes 1000-4999/5000", coding: "identity") == .append)
    }

    @Test("a 206 that starts elsewhere, has no usable Content-Range, describes another length or is encoded starts from zero")
    func restartsFromZero() {
        #expect(restarts(judge(206, range: nil), fromZero: true, saying: "without a usable Content-Range"))
        #expect(restarts(judge(206, range: "bytes */5000"), fromZero: true, saying: "without a usable Content-Range"))
        #expect(restarts(judge(206, range: "bytes 0-4999/5000"), fromZero: true, saying: "bytes 0-4999 for a request from byte 1000"))
        #expect(restarts(judge(206, range: "bytes 1000-5999/6000"), fromZero: true, saying: "now 6000 bytes, it was 5000"))
        #expect(restarts(judge(206, range: "bytes 1000-4999/5000", coding: "gzip"), fromZero: true, saying: "Content-Encoding gzip"))
    }

    @Test("a 206 that would end the file short is refused and the partial file kept")
    func rejectsShort() {
        #expect(rejects(judge(206, range: "bytes 1000-1999/5000"), saying: "bytes 1000-1999 of 5000: the file would end short"))
        // Unknown complete length: the length from the first attempt decides.
        #expect(rejects(judge(206, range: "bytes 1000-1999/*"), saying: "of 5000"))
        #expect(
            rejects(judge(206, range: "bytes 1000-4999/5000", length: "10"), saying: "body is 10 bytes but its Content-Range spans 4000"))
    }

    @Test("a 200 replaces the partial file; an error status leaves it alone")
    func otherStatuses() {
        #expect(judge(200, length: "5000") == .replace)
        for status in [304, 404, 412, 500, 503] { #expect(judge(status) == .leaveAlone, "\(status)") }
    }

    @Test("416: a partial file that is the whole resource asks again for its last byte; otherwise it starts from zero")
    func unsatisfiable() {
        // The file looked complete: the request asked for its last byte (offset 4999).
        #expect(
            restarts(
                judge(416, range: "bytes */5000", offset: 4999, partial: 5000), fromZero: false, saying: "already complete (5000 bytes)"))
        #expect(restarts(judge(416, range: "bytes */800", offset: 1000), fromZero: true, saying: "resource length 800"))
        #expect(restarts(judge(416, range: nil, offset: 1000), fromZero: true, saying: "resource length unknown"))
        #expect(restarts(judge(416, range: "bytes */0", offset: 0, partial: 0), fromZero: true, saying: "416"))
    }
}
