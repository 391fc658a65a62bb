import CTinyFireSystem
import HTTPTypes
import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Where `fire-agent request` puts a body.
enum RequestOutput: Sendable {
    /// Straight to a descriptor: standard output, or `-o` naming something that is not a
    /// regular file (/dev/null, a FIFO, a terminal). An error page goes there too.
    case descriptor(Int32)
    /// Into a hidden file beside `path`, renamed into place once the body is complete and the
    /// status 2xx (`-o FILE`).
    case file(path: String)
    /// Into `path` itself, kept when the transfer fails and continued by the next `-C -`.
    case inPlace(path: String, record: String)
}

/// What an earlier attempt (or an earlier `-C -` run) left of the body: the bytes in the file
/// and the validators they belong to.
struct PartialBody: Sendable {
    var path: String
    var bytes: UInt64
    var entityTag: String?
    var lastModified: String?
    var totalLength: UInt64?
}

/// One attempt of `fire-agent request`: makes the sink for the final response (the output,
/// the response head first with `-i`, an error page never into a file), checks a continued
/// download's answer (`RangeResume`), shows heads with `-v` and progress with `-#`, and hands
/// back how it ended. Memory: the sink's state; the body passes through the engine's read
/// buffer only.
final class RequestAttempt: PlainTransferOwner, @unchecked Sendable {
    // @unchecked: `sink`, `partial`, `restart` and `rejectedStatus` are touched on the engine's
    // loop thread while the transfer runs; the command reads them through `ended` after it
    // ended.

    /// What every attempt of one command shares.
    struct Plan: Sendable {
        var output: RequestOutput
        var includeHead: Bool
        var verbose: Bool
        var maximumFileSize: UInt64?
        var progress: ProgressDisplay?
        var hasBody: Bool
        var trust: (@Sendable (TrustFacts) -> String?)?
        /// The URL as given (the resume record's).
        var url: String
    }

    /// How an attempt ended.
    struct Ending: Sendable {
        var result: Result<Void, TransferFailure>
        var response: HTTPResponse?
        var report: TransferReport
        /// The trust judge's reason, when it refused.
        var refusal: String?
        /// A status outside 2xx (its body went to a descriptor or nowhere).
        var rejectedStatus: Int?
        /// What the output holds for a next attempt.
        var partial: PartialBody?
        /// The answer cannot continue the partial file: try again at once.
        var restart: Bool
        /// The complete body's temporary file, to move into place.
        var staged: String?
    }

    let plan: Plan
    let ended = ConditionLocked<Ending?>(nil)
    private var partial: PartialBody?
    private let rangeOffset: UInt64?
    private let method: HTTPMethod
    private var restart = false
    private var rejectedStatus: Int?
    private var sink: (any ResponseBodySink)?
    private var fileSink: PartialFileSink?
    private let refusal = Locked<String?>(nil)
    private var progressBase: UInt64 = 0

    init(plan: Plan, partial: PartialBody?, rangeOffset: UInt64?, method: HTTPMethod) {
        self.plan = plan
        self.partial = partial
        self.rangeOffset = rangeOffset
        self.method = method
    }

    var transferWantsProgress: Bool { plan.progress != nil }

    func transferMakeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> any ResponseBodySink {
        let sink = try makeTargetSink(for: response)
        self.sink = sink
        if plan.includeHead {
            var head = "HTTP/1.1 \(response.status.code) \(response.status.reasonPhrase)\r\n"
            for field in response.headerFields { head += "\(field.name.rawName): \(field.value)\r\n" }
            head += "\r\n"
            let bytes = Array(head.utf8)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 1)
            defer { buffer.deallocate() }
            buffer.copyBytes(from: bytes)
            try sink.write(UnsafeRawBufferPointer(buffer))
        }
        return sink
    }

    private func makeTargetSink(for response: HTTPResponse) throws(SinkError) -> any ResponseBodySink {
        let code = response.status.code
        let fields = response.headerFields
        if !(200..<300).contains(code) && !(code == 416 && rangeOffset != nil) {
            rejectedStatus = code
            // The body still goes to a descriptor (a terminal shows the error page), never into
            // a file.
            if case .descriptor(let fd) = plan.output { return DescriptorSink(fd: fd, name: "descriptor \(fd)") }
            return DiscardSink()
        }
        let path: String
        var record: String?
        switch plan.output {
        case .descriptor(let fd):
            let sink = DescriptorSink(fd: fd, name: "descriptor \(fd)")
            return try limited(sink, code: code, fields: fields, base: 0)
        case .file(let destination): path = destination
        case .inPlace(let destination, let recordPath):
            path = destination
            record = recordPath
        }
        var append: UInt64?
        if let offset = rangeOffset, let known = partial {
            let verdict = RangeResume.judge(
                RangeResume.Response(
                    status: code, contentRange: fields[.contentRange], contentLength: fields[.contentLength],
                    contentEncoding: fields[.contentEncoding]),
                offset: offset, partialBytes: known.bytes, knownTotal: known.totalLength)
            switch verdict {
            case .append:
                append = offset
            case .replace:
                // The server ignored Range, or If-Range found the resource changed: the whole
                // body comes again and replaces the partial file.
                break
            case .restart(let fromZero, let reason):
                restart = true
                if fromZero {
                    unlink(known.path)
                    partial = nil
                } else {
                    // A complete file asks again for its last byte, knowing its length now.
                    partial?.totalLength = known.bytes
                }
                throw .resumeRejected(reason)
            case .reject(let reason):
                throw .resumeRejected(reason)
            case .leaveAlone:
                return DiscardSink()
            }
        }
        let resumable = method == .get && RangeResume.isResumable(status: code, fields: fields)
        let validators = RangeResume.validators(status: code, fields: fields)
        let startsFromZero = append == nil && (code == 200 || code == 206)
        // The old validator goes before the file is emptied: no moment pairs it with bytes of
        // another version.
        if let record, startsFromZero { unlink(record) }
        let sink: PartialFileSink
        if let append {
            sink = try PartialFileSink(.append(path: path, offset: append))
            progressBase = append
        } else if record != nil {
            sink = try PartialFileSink(.empty(path: path))
        } else {
            sink = try PartialFileSink(.besides(destination: path))
        }
        fileSink = sink
        if resumable {
            partial = PartialBody(
                path: sink.path, bytes: append ?? 0, entityTag: validators.entityTag, lastModified: validators.lastModified,
                totalLength: validators.totalLength)
        } else {
            partial = nil
        }
        if let record, startsFromZero, resumable {
            ImageResumeRecord(
                url: plan.url, partialFile: sink.path, bytesOnDisk: 0, entityTag: validators.entityTag,
                lastModified: validators.lastModified, totalLength: validators.totalLength
            ).writeDurably(to: record)
        }
        return try limited(sink, code: code, fields: fields, base: append ?? 0)
    }

    /// `sink`, held to `--max-filesize`: refused at once when the response announces more,
    /// stopped when the bytes cross it.
    private func limited(_ sink: any ResponseBodySink, code: Int, fields: HTTPFields, base: UInt64) throws(SinkError)
        -> any ResponseBodySink
    {
        guard let limit = plan.maximumFileSize, code == 200 || code == 206 else { return sink }
        if let announced = RangeResume.announcedSize(status: code, fields: fields, base: base), announced > limit {
            sink.discard()
            throw .fileSizeExceeded(limit: limit)
        }
        return LimitedSink(sink, written: base, limit: limit)
    }

    func transferDidReceiveResponse(_ response: HTTPResponse, request sent: SentRequestHead) -> Bool {
        if plan.verbose {
            var lines = "> \(sent.method.rawValue) \(sent.path) HTTP/1.1\n> Host: \(sent.authority)\n"
            for field in sent.httpRequest.headerFields { lines += "> \(field.name.rawName): \(field.value)\n" }
            lines += ">\n< HTTP/1.1 \(response.status.code) \(response.status.reasonPhrase)\n"
            for field in response.headerFields { lines += "< \(field.name.rawName): \(field.value)\n" }
            lines += "<"
            AgentCommandLine.printError(lines)
        }
        return false
    }

    func transferJudgeTrust(host: String) -> TrustJudgement {
        .judged(by: plan.trust, keepingRefusalIn: refusal)
    }

    func transferProgress(upload: (UInt64, UInt64?)?, download: (UInt64, UInt64?)?, final: Bool) {
        guard let display = plan.progress else { return }
        if let (sent, total) = upload, plan.hasBody { display.update("upload", done: sent, of: total) }
        if let (received, expected) = download {
            display.update("download", done: progressBase + received, of: expected.map { progressBase + $0 })
        }
    }

    func transferDidFinish(
        _ result: Result<Void, TransferFailure>, request sent: SentRequestHead?, response: HTTPResponse?, report: TransferReport
    ) {
        var staged: String?
        if let fileSink {
            partial?.bytes = fileSink.bytesOnDisk
            if case .success = result, rejectedStatus == nil { staged = fileSink.path }
        }
        if case .failure = result, let fileSink, partial == nil || !plan.output.keepsPartial {
            // Nothing worth keeping, or an output that is not continued later: the bytes go.
            if case .inPlace = plan.output {} else { unlink(fileSink.path) }
            partial = nil
        }
        let ending = Ending(
            result: result, response: response, report: report, refusal: refusal.withLock { $0 }, rejectedStatus: rejectedStatus,
            partial: partial, restart: restart, staged: staged)
        ended.withLock { $0 = ending }
    }
}

extension RequestOutput {
    /// Whether a failed transfer's bytes stay for a later run (`-C -`).
    var keepsPartial: Bool {
        if case .inPlace = self { return true }
        return false
    }
}

/// Stops a body that grows past `limit` bytes (`--max-filesize`).
private final class LimitedSink: ResponseBodySink {
    private let base: any ResponseBodySink
    private var written: UInt64
    private let limit: UInt64

    init(_ base: any ResponseBodySink, written: UInt64, limit: UInt64) {
        self.base = base
        self.written = written
        self.limit = limit
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {
        let (grown, overflow) = written.addingReportingOverflow(UInt64(bytes.count))
        if overflow || grown > limit { throw .fileSizeExceeded(limit: limit) }
        try base.write(bytes)
        written = grown
    }

    func finish() throws(SinkError) { try base.finish() }
    func discard() { base.discard() }
}

/// Moves a complete body into place (`commitPartialFile`).
/// - Returns: nil, or the reason it could not.
func commitOutput(_ staged: String, to destination: String) -> String? {
    guard let code = commitPartialFile(staged, to: destination) else { return nil }
    return "cannot put the download at \(destination): \(errnoMessage(code))"
}
