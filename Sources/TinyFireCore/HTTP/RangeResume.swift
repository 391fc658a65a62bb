import HTTPTypes

/// What a response to a resumed download's Range request means for the partial file, without
/// I/O: the status and the headers that matter, the bytes on disk and the length known from the
/// first attempt go in; a verdict comes out. The library's `DownloadRequest` and fire-agent's
/// `ImageDownload` carry it out (appends, empties the file and starts again, or fails the
/// attempt keeping the partial file).
package enum RangeResume {
    /// The verdict on one response.
    package enum Verdict: Sendable, Equatable {
        /// A 206 that continues the file exactly where it ends, to the end.
        case append
        /// The body is the whole resource again (a 200: Range ignored, or If-Range found it
        /// changed): the partial file is replaced.
        case replace
        /// Start a new attempt at once: from zero (`fromZero`, the partial file is removed), or
        /// asking again from where the file ends. `reason` says why, for the log.
        case restart(fromZero: Bool, reason: String)
        /// This attempt fails and the partial file stays for a later one (a 206 that would end
        /// the file short).
        case reject(reason: String)
        /// Not about the partial file (an error page): it stays as it is.
        case leaveAlone
    }

    /// The response's parts the verdict reads.
    package struct Response: Sendable, Equatable {
        package var status: Int
        package var contentRange: String?
        package var contentLength: String?
        package var contentEncoding: String?

        package init(status: Int, contentRange: String?, contentLength: String?, contentEncoding: String?) {
            self.status = status
            self.contentRange = contentRange
            self.contentLength = contentLength
            self.contentEncoding = contentEncoding
        }
    }

    /// Judges `response` to a request for the bytes from `offset` on (the partial file's length
    /// `partialBytes`, or its last byte when it looked complete); `knownTotal` is the resource's
    /// length the first attempt saw, if any.
    package static func judge(_ response: Response, offset: UInt64, partialBytes: UInt64, knownTotal: UInt64?) -> Verdict {
        switch response.status {
        case 206: return judgeContinuation(response, offset: offset, knownTotal: knownTotal)
        case 200: return .replace
        case 416: return judgeUnsatisfiable(response, partialBytes: partialBytes)
        default: return .leaveAlone
        }
    }

    /// A 206 must continue exactly where the partial file ends, describe the same resource when
    /// its length was known, and run to the end without a coding.
    private static func judgeContinuation(_ response: Response, offset: UInt64, knownTotal: UInt64?) -> Verdict {
        guard let value = response.contentRange, let contentRange = ContentRange(value), let range = contentRange.range else {
            return .restart(fromZero: true, reason: "206 without a usable Content-Range")
        }
        guard range.lowerBound == offset else {
            return .restart(
                fromZero: true, reason: "the server sent bytes \(range.lowerBound)-\(range.upperBound) for a request from byte \(offset)")
        }
        if let knownTotal, let complete = contentRange.completeLength, knownTotal != complete {
            return .restart(fromZero: true, reason: "the resource is now \(complete) bytes, it was \(knownTotal)")
        }
        // The body must be the whole rest: a range that stops before the announced end, or a
        // body shorter than its range, would be renamed into place as a short file. Refused
        // before a byte is written; the partial file stays for a later attempt.
        let spanned = range.upperBound - range.lowerBound + 1
        if let length = response.contentLength.flatMap(parseDecimal), length != spanned {
            return .reject(reason: "the 206 body is \(length) bytes but its Content-Range spans \(spanned)")
        }
        if let complete = contentRange.completeLength ?? knownTotal, range.upperBound + 1 != complete {
            return .reject(reason: "the server sent bytes \(range.lowerBound)-\(range.upperBound) of \(complete): the file would end short")
        }
        if let coding = response.contentEncoding, coding.lowercased() != "identity" {
            return .restart(fromZero: true, reason: "a range with Content-Encoding \(coding) cannot continue decoded bytes")
        }
        return .append
    }

    /// 416: the partial file is complete (`bytes */N` with N its length: ask again for the last
    /// byte, which gives a normal 206), or the resource shrank (start from zero).
    private static func judgeUnsatisfiable(_ response: Response, partialBytes: UInt64) -> Verdict {
        let complete = response.contentRange.flatMap(ContentRange.init)?.completeLength
        if let complete, complete == partialBytes, complete > 0 {
            return .restart(fromZero: false, reason: "the partial file is already complete (\(complete) bytes)")
        }
        return .restart(
            fromZero: true,
            reason: "416 for a request from byte \(partialBytes) (resource length \(complete.map(String.init) ?? "unknown"))")
    }

    /// What a later `If-Range` can use from a 200 or 206 response: its strong ETag (RFC 9110
    /// §13.1.5 takes no weak one), its Last-Modified, and the whole resource's length (a 206's
    /// complete length, a 200's Content-Length).
    package static func validators(status: Int, fields: HTTPFields) -> (entityTag: String?, lastModified: String?, totalLength: UInt64?) {
        let tag = fields[.eTag].flatMap { $0.hasPrefix("W/") ? nil : $0 }
        let total =
            status == 206 ? fields[.contentRange].flatMap(ContentRange.init)?.completeLength : fields[.contentLength].flatMap(parseDecimal)
        return (tag, fields[.lastModified], total)
    }

    /// Whether a 200 or 206 body can be continued later with a Range request: no content coding
    /// (offsets count the resource's bytes), ranges not refused (`Accept-Ranges: none`), and a
    /// validator, without which a later Range could splice two versions of the resource.
    package static func isResumable(status: Int, fields: HTTPFields) -> Bool {
        guard status == 200 || status == 206 else { return false }
        if let coding = fields[.contentEncoding], coding.lowercased() != "identity" { return false }
        if fields[.acceptRanges]?.lowercased() == "none" { return false }
        let tags = validators(status: status, fields: fields)
        return tags.entityTag != nil || tags.lastModified != nil
    }

    /// How `fields` (of a 200 to a continued request) show that the resource is not the one the
    /// partial file holds (recorded with `entityTag`, else `lastModified`), or nil when they
    /// match (the server ignored Range).
    package static func change(fromEntityTag entityTag: String?, lastModified: String?, to fields: HTTPFields) -> String? {
        if let old = entityTag {
            let new = fields[.eTag]
            guard new != old else { return nil }
            return "the resource changed on the server (ETag \(old) → \(new ?? "none")); If-Range answered 200 with all of it"
        }
        guard let old = lastModified else { return nil }
        let new = fields[.lastModified]
        guard new != old else { return nil }
        return "the resource changed on the server (Last-Modified \(old) → \(new ?? "none")); If-Range answered 200 with all of it"
    }

    /// The body's final size on disk as a 200 or 206 announces it: `base` (the bytes a 206
    /// continues) plus Content-Length, or a 206's complete length from Content-Range; nil when
    /// neither says. Size limits refuse a response by it before any byte is written.
    package static func announcedSize(status: Int, fields: HTTPFields, base: UInt64) -> UInt64? {
        if status == 206, let complete = fields[.contentRange].flatMap(ContentRange.init)?.completeLength { return complete }
        guard let length = fields[.contentLength].flatMap(parseDecimal) else { return nil }
        let (sum, overflow) = base.addingReportingOverflow(length)
        return overflow ? .max : sum
    }
}
