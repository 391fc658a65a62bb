import Foundation
import Testing

@testable import FireAgent
@testable import TinyFireCore

@Suite("fire-agent delivery decisions: batches, spool files, the server's answer")
struct DeliveryDecisionTests {
    @Test("batches are bounded by points and bytes, in order; a line larger than a batch is refused; halves for 413")
    func batching() throws {
        var batcher = Batcher(maxPoints: 3, maxBytes: 20)
        var batches: [Batch] = []
        for line in ["a x=1", "b x=2", "c x=3", "d x=4", "eeeeeeeeee x=5"] {
            if let full = try batcher.add(line) { batches.append(full) }
        }
        if let rest = batcher.flush() { batches.append(rest) }
        #expect(batches.map(\.lines) == [["a x=1", "b x=2", "c x=3"], ["d x=4"], ["eeeeeeeeee x=5"]])
        #expect(batches.allSatisfy { $0.lines.count <= 3 && $0.body.count <= 20 })
        #expect(String(decoding: batches[0].body, as: UTF8.self) == "a x=1\nb x=2\nc x=3\n")
        #expect(throws: Batcher.LineTooLong.self) { _ = try batcher.add(String(repeating: "z", count: 25)) }
        #expect(batcher.flush() == nil)
        let (left, right) = try #require(batches[0].halves)
        #expect(left.lines == ["a x=1"] && right.lines == ["b x=2", "c x=3"])
        #expect(batches[1].halves == nil)
    }

    @Test("a spool file keeps its valid lines and names each refused one by number and reason; a last line without newline is torn")
    func spoolFile() {
        let text = "# header\ncpu,host=a usage=1.5 1700000000000\n\nmem used=3i\ncpu usage=hot\r\ntorn,line\n\u{0}x y=1\nlast x=1"
        let file = SpoolFile(text: text, maxLineBytes: 1024)
        #expect(file.lines == ["cpu,host=a usage=1.5 1700000000000", "mem used=3i"])
        #expect(file.rejected.map(\.number) == [5, 6, 7, 8])
        #expect(file.rejected[0].reason.contains("'hot' is not a field value"))
        #expect(file.rejected[1].reason.contains("a tag needs key=value"))
        #expect(file.rejected[2].reason.contains("NUL"))
        // `seq=99…` cut to `seq=99` would be a float of the wrong value: the cut line is refused.
        #expect(file.rejected[3].text == "last x=1" && file.rejected[3].reason.contains("no newline"))
        let whole = SpoolFile(text: "m seq=991i 5\nm seq=99", maxLineBytes: 1024)
        #expect(whole.lines == ["m seq=991i 5"] && whole.rejected.map(\.number) == [2])
        let long = SpoolFile(text: "m x=" + String(repeating: "1", count: 100) + "\n", maxLineBytes: 50)
        #expect(long.lines.isEmpty && long.rejected.first?.reason.contains("longer than a batch") == true)
    }

    @Test(
        "the server's answer decides: 204 done (other 2xx and 3xx kept), 429/503 honour Retry-After, 413 and 400 split, one line dead-letters, 401/403 hold"
    )
    func verdicts() throws {
        let now = Date(timeIntervalSince1970: 784_111_777)  // Sun, 06 Nov 1994 08:49:37 GMT
        let ten = (0..<10).map { "m n=\($0)i \($0)" }
        #expect(try InfluxWrite.judge(204, lines: ten) == .delivered)
        // Only InfluxDB's 204 is a delivery: a captive portal's 200 page or its 302 is not.
        #expect(try InfluxWrite.judge(200, message: "<html>Welcome</html>", lines: ten) == .retry)
        #expect(
            try InfluxWrite.judge(200, message: "<html>Welcome</html>", lines: ten, age: .seconds(7200))
                == .deadLetter(
                    reason:
                        "HTTP 200: <html>Welcome</html> (not InfluxDB's 204: a captive portal or a proxy answered?); still refused after 7200 s (queue.maxRecordAge)"
                ))
        #expect(try InfluxWrite.judge(302, lines: ten) == .retry)
        #expect(try InfluxWrite.judge(429, retryAfter: "7", message: "slow down", lines: ten) == .retryAfter(.seconds(7)))
        let date = "Sun, 06 Nov 1994 08:50:07 GMT"
        #expect(try InfluxWrite.judge(503, retryAfter: date, lines: ["m x=1i"], now: now) == .retryAfter(.seconds(30)))
        #expect(try InfluxWrite.judge(503, retryAfter: "999999", lines: ["m x=1i"]) == .retryAfter(.seconds(3600)))
        #expect(try InfluxWrite.judge(503, retryAfter: "soon", lines: ["m x=1i"]) == .retry)
        #expect(try InfluxWrite.judge(413, message: "too big", lines: ten) == .split([Array(ten[..<5]), Array(ten[5...])]))
        #expect(
            try InfluxWrite.judge(413, lines: ["m x=1i"]) == .deadLetter(reason: "HTTP 413 (a single line larger than the server accepts)"))
        // A 400 refuses lines of the batch: halves until the refused lines stand alone.
        let refusal = #"{"error":"unable to parse 'x'"}"#
        #expect(try InfluxWrite.judge(400, message: refusal, lines: Array(ten[..<3])) == .split([[ten[0]], [ten[1], ten[2]]]))
        #expect(try InfluxWrite.judge(400, message: refusal, lines: ["x"]) == .deadLetter(reason: "HTTP 400: " + refusal))
        #expect(try InfluxWrite.judge(401, message: "bad token", lines: ten) == .retry, "401 keeps the batch")
        #expect(try InfluxWrite.judge(403, lines: ten) == .retry)
        #expect(try InfluxWrite.judge(500, lines: ten) == .retry)
        #expect(
            try InfluxWrite.judge(404, message: "database not found", lines: ten) == .deadLetter(reason: "HTTP 404: database not found"))
        #expect(HTTPDate.secondsSince1970("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
    }

    /// The agent's judge on a batch of `lines`, gzip'd as it is queued.
    func fate(_ status: Int, lines: [String], message: String = "", requestBody: [UInt8]? = nil) throws -> JudgedBatch {
        try InfluxWrite.judge(status, message: message, lines: lines, requestBody: requestBody)
    }

    /// The lines of each half of a split.
    func halves(_ fate: JudgedBatch) -> [[String]] {
        guard case .split(let halves) = fate else { return [] }
        return halves
    }

    @Test("a 400 costs only the refused lines: a batch is split in halves down to the refused line, which alone is dead-lettered")
    func badRequestSplits() throws {
        let conflict = #"{"error":"partial write: field type conflict: input field \"v\" on measurement \"m\" is type string"}"#
        let good = (0..<20).map { "m,writer=b,n=\($0) v=\($0)i 1700000000000000000" }
        let bad = #"m,writer=a v="text" 1700000000000000000"#
        // 21 lines: the halves as for a 413, 10 and 11.
        let first = try fate(400, lines: Array(good[..<10]) + [bad] + Array(good[10...]), message: conflict)
        #expect(halves(first) == [Array(good[..<10]), [bad] + Array(good[10...])])
        // Halved again and again, the refused line ends alone and only it is a dead letter.
        var batch = [bad] + Array(good[10...])
        var requests = 1
        while batch.count > 1 {
            let parts = halves(try fate(400, lines: batch, message: conflict))
            #expect(parts.count == 2 && parts.joined().count == batch.count)
            batch = try #require(parts.first { $0.contains(bad) })
            requests += 1
        }
        #expect(requests == 4 && batch == [bad], "21, 11, 5 and 2 lines, then the refused one alone")
        #expect(try fate(400, lines: [bad], message: conflict) == .deadLetter(reason: "HTTP 400: " + conflict))
        // A body that cannot be read back as lines (not gzip): the whole batch, as before.
        #expect(
            try fate(400, lines: good, message: "bad", requestBody: [1, 2, 3]) == .deadLetter(reason: "HTTP 400: bad"),
            "a batch whose lines are unknown cannot be split")
        // A body beyond twice batchBytes is not decompressed (the bound of a 413's split).
        let huge = try Gzip.compress(Array(String(repeating: "m v=1i 1\n", count: 300_000).utf8))
        #expect(try InfluxWrite.judge(400, lines: [], requestBody: huge) == .deadLetter(reason: "HTTP 400"))
    }

    @Test("the other permanent 4xx keep what they did: 401/403 hold the batch, 404/405/422 dead-letter it whole, even of many lines")
    func otherClientErrorsUnchanged() throws {
        let lines = (0..<8).map { "m n=\($0)i \($0)" }
        for status in [401, 403, 407] {
            #expect(try fate(status, lines: lines, message: "no") == .retry, "\(status) keeps the batch")
            // Whatever its age: wrong credentials are not the batch's fault (a reload sends it).
            #expect(try InfluxWrite.judge(status, lines: lines, age: .seconds(30 * 86400)) == .retry, "\(status) of an old batch")
        }
        for status in [404, 405, 410, 422] {
            #expect(try fate(status, lines: lines, message: "no") == .deadLetter(reason: "HTTP \(status): no"))
        }
        // 408 and 425 are retried, as before.
        #expect(try fate(425, lines: lines) == .retry)
        #expect(try fate(408, lines: lines) == .retry)
    }
}
