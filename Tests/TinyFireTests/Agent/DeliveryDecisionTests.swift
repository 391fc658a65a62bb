import Foundation
import Testing

@testable import FireAgentBase
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
    func verdicts() {
        let now = Date(timeIntervalSince1970: 784_111_777)  // Sun, 06 Nov 1994 08:49:37 GMT
        #expect(UploadVerdict.decide(status: 204, retryAfter: nil, message: "", lines: 10) == .delivered)
        // Only InfluxDB's 204 is a delivery: a captive portal's 200 page or its 302 is not.
        #expect(
            UploadVerdict.decide(status: 200, retryAfter: nil, message: "<html>Welcome</html>", lines: 10)
                == .retry(after: nil, reason: "HTTP 200: <html>Welcome</html> (not InfluxDB's 204: a captive portal or a proxy answered?)"))
        #expect(UploadVerdict.decide(status: 302, retryAfter: nil, message: "", lines: 10) == .retry(after: nil, reason: "HTTP 302"))
        #expect(
            UploadVerdict.decide(status: 429, retryAfter: "7", message: "slow down", lines: 10)
                == .retry(after: .seconds(7), reason: "HTTP 429: slow down"))
        #expect(
            UploadVerdict.decide(status: 503, retryAfter: "Sun, 06 Nov 1994 08:50:07 GMT", message: "", now: now, lines: 1)
                == .retry(after: .seconds(30), reason: "HTTP 503"))
        #expect(
            UploadVerdict.decide(status: 503, retryAfter: "999999", message: "", lines: 1)
                == .retry(after: .seconds(3600), reason: "HTTP 503"))
        #expect(UploadVerdict.decide(status: 503, retryAfter: "soon", message: "", lines: 1) == .retry(after: nil, reason: "HTTP 503"))
        #expect(UploadVerdict.decide(status: 413, retryAfter: nil, message: "too big", lines: 8) == .split)
        #expect(
            UploadVerdict.decide(status: 413, retryAfter: nil, message: "", lines: 1)
                == .deadLetter(reason: "HTTP 413 (a single line larger than the server accepts)"))
        // A 400 refuses lines of the batch: halves until the refused lines stand alone.
        #expect(UploadVerdict.decide(status: 400, retryAfter: nil, message: #"{"error":"unable to parse 'x'"}"#, lines: 3) == .split)
        #expect(
            UploadVerdict.decide(status: 400, retryAfter: nil, message: #"{"error":"unable to parse 'x'"}"#, lines: 1)
                == .deadLetter(reason: #"HTTP 400: {"error":"unable to parse 'x'"}"#))
        #expect(
            UploadVerdict.decide(status: 401, retryAfter: nil, message: "bad token", lines: 3)
                == .holdForCredentials(reason: "HTTP 401: bad token"))
        #expect(UploadVerdict.decide(status: 403, retryAfter: nil, message: "", lines: 3) == .holdForCredentials(reason: "HTTP 403"))
        #expect(UploadVerdict.decide(status: 500, retryAfter: nil, message: "", lines: 3) == .retry(after: nil, reason: "HTTP 500"))
        #expect(
            UploadVerdict.decide(status: 404, retryAfter: nil, message: "database not found", lines: 3)
                == .deadLetter(reason: "HTTP 404: database not found"))
        #expect(UploadVerdict.parseHTTPDate("Sun, 06 Nov 1994 08:49:37 GMT") == now)
    }

    /// The agent's judge on a batch of `lines`, gzip'd as it is queued.
    func fate(_ status: Int, lines: [String], message: String = "", requestBody: [UInt8]? = nil) throws -> BatchUpload.Fate {
        let body = try Gzip.compress(Array(lines.map { $0 + "\n" }.joined().utf8))
        return BatchUpload.judge(
            status: status, retryAfter: nil, message: Array(message.utf8), requestBody: requestBody ?? body, maxAge: .seconds(3600),
            age: .zero, batchBytes: 1 << 20, now: .now())
    }

    /// The lines of each gzip'd half of a split.
    func halves(_ fate: BatchUpload.Fate) throws -> [[String]] {
        guard case .split(let bodies) = fate else { return [] }
        return try bodies.map { body in
            String(decoding: try Gzip.decompress(body, limit: 1 << 20), as: UTF8.self).split(separator: "\n").map(String.init)
        }
    }

    @Test("a 400 costs only the refused lines: a batch is split in halves down to the refused line, which alone is dead-lettered")
    func badRequestSplits() throws {
        let conflict = #"{"error":"partial write: field type conflict: input field \"v\" on measurement \"m\" is type string"}"#
        let good = (0..<20).map { "m,writer=b,n=\($0) v=\($0)i 1700000000000000000" }
        let bad = #"m,writer=a v="text" 1700000000000000000"#
        // 21 lines: the halves as for a 413, 10 and 11.
        let first = try fate(400, lines: Array(good[..<10]) + [bad] + Array(good[10...]), message: conflict)
        #expect(try halves(first) == [Array(good[..<10]), [bad] + Array(good[10...])])
        // Halved again and again, the refused line ends alone and only it is a dead letter.
        var batch = [bad] + Array(good[10...])
        var requests = 1
        while batch.count > 1 {
            let parts = try halves(try fate(400, lines: batch, message: conflict))
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
        let bounded = BatchUpload.judge(
            status: 400, retryAfter: nil, message: [], requestBody: huge, maxAge: .seconds(3600), age: .zero, batchBytes: 1 << 20,
            now: .now())
        #expect(bounded == .deadLetter(reason: "HTTP 400"))
    }

    @Test("the other permanent 4xx keep what they did: 401/403 hold the batch, 404/405/422 dead-letter it whole, even of many lines")
    func otherClientErrorsUnchanged() throws {
        let lines = (0..<8).map { "m n=\($0)i \($0)" }
        for status in [401, 403] {
            #expect(
                UploadVerdict.decide(status: status, retryAfter: nil, message: "no", lines: 8)
                    == .holdForCredentials(reason: "HTTP \(status): no"))
            #expect(try fate(status, lines: lines, message: "no") == .retry, "\(status) keeps the batch")
        }
        for status in [404, 405, 422] {
            #expect(
                UploadVerdict.decide(status: status, retryAfter: nil, message: "no", lines: 8) == .deadLetter(reason: "HTTP \(status): no"))
            #expect(try fate(status, lines: lines, message: "no") == .deadLetter(reason: "HTTP \(status): no"))
        }
        // 408 and 425 are retried, as before.
        #expect(UploadVerdict.decide(status: 425, retryAfter: nil, message: "", lines: 8) == .retry(after: nil, reason: "HTTP 425"))
        #expect(UploadVerdict.decide(status: 408, retryAfter: nil, message: "", lines: 8) == .retry(after: nil, reason: "HTTP 408"))
    }
}
