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
final class RequestAttempt: TransferOwner, @unchecked Sendable {
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
    private var fileSink: OutputFileSink?
    private let refusal = Locked<String?>(nil)
    private var progressBase: UInt64 = 0

    init(plan: Plan, partial: PartialBody?, rangeOffset: UInt64?, method: HTTPMethod) {
        self.plan = plan
        self.partial = partial
        self.rangeOffset = rangeOffset
        self.method = method
    }

    var transferOwnerID: ObjectIdentifier { ObjectIdentifier(self) }
    var isCancelled: Bool { false }
    var isSuspended: Bool { false }
    var transferAsksRedirects: Bool { false }
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
        let sink: OutputFileSink
        if let append {
            sink = try OutputFileSink(appendingTo: path, at: append)
            progressBase = append
        } else if record != nil {
            sink = try OutputFileSink(emptying: path)
        } else {
            sink = try OutputFileSink(besides: path)
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
        if let announced = Self.announcedSize(code: code, fields: fields, base: base), announced > limit {
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

    func transferWillRedirect(to redirect: RequestSpec, for response: HTTPResponse) {}
    func transferDecideRedirect(to target: RequestSpec, for response: HTTPResponse, sent: SentRequestHead?, answer: RedirectAnswer)
        -> Bool
    { false }

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

    /// The body's final size as the response announces it: `base` plus Content-Length, or a
    /// 206's complete length.
    private static func announcedSize(code: Int, fields: HTTPFields, base: UInt64) -> UInt64? {
        if code == 206, let complete = fields[.contentRange].flatMap(ContentRange.init)?.completeLength { return complete }
        guard let length = fields[.contentLength].flatMap(parseDecimal) else { return nil }
        let (sum, overflow) = base.addingReportingOverflow(length)
        return overflow ? .max : sum
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

/// A body written to a file: a new hidden one beside the destination (`.NAME.tinyfire-XXXXXX`,
/// 0600 until complete), or the output itself continued or emptied (`-C -`). A failed
/// transfer leaves the bytes fsync'd; the command removes or keeps them.
final class OutputFileSink: ResponseBodySink {
    private var fd: Int32
    /// The file written.
    let path: String
    /// Bytes in it.
    private(set) var bytesOnDisk: UInt64

    /// A new hidden file in `destination`'s directory.
    init(besides destination: String) throws(SinkError) {
        let slash = destination.utf8.lastIndex(of: UInt8(ascii: "/"))
        let directory = slash.map { String(destination[...$0]) } ?? ""
        let name = slash.map { String(destination[destination.index(after: $0)...]) } ?? destination
        var template = Array((directory + "." + name + ".tinyfire-XXXXXX").utf8CString)
        let created = template.withUnsafeMutableBufferPointer { buffer -> Int32 in
            guard let base = buffer.baseAddress else { return -1 }
            return tinyfire_mkstemp_cloexec(base)
        }
        guard created >= 0 else {
            let code = errno
            throw .destinationUnusable(path: destination, code: code, message: "cannot create temporary file: \(errnoMessage(code))")
        }
        fd = created
        var bytes: [UInt8] = []
        for byte in template where byte != 0 { bytes.append(UInt8(bitPattern: byte)) }
        path = String(decoding: bytes, as: UTF8.self)
        bytesOnDisk = 0
    }

    /// Continues `path` from `offset` (cut there first).
    init(appendingTo path: String, at offset: UInt64) throws(SinkError) {
        self.path = path
        bytesOnDisk = offset
        fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { throw .resumeRejected("the partial file \(path) is gone") }
            throw .writeFailed(path: path, message: "cannot open partial file: \(errnoMessage(errno))")
        }
        var info = stat()
        guard fstat(fd, &info) == 0, UInt64(info.st_size) >= offset else {
            close(fd)
            fd = -1
            throw .resumeRejected("the partial file \(path) is shorter than the \(offset) bytes recorded")
        }
        guard ftruncate(fd, off_t(offset)) == 0, lseek(fd, 0, SEEK_END) >= 0 else {
            let message = errnoMessage(errno)
            close(fd)
            fd = -1
            throw .writeFailed(path: path, message: message)
        }
    }

    /// Starts `path` over, empty (fsync'd before a resume record describes it).
    init(emptying path: String) throws(SinkError) {
        self.path = path
        bytesOnDisk = 0
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .writeFailed(path: path, message: "cannot open partial file: \(errnoMessage(errno))") }
        fsync(fd)
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {
        try writeAll(fd, bytes, name: path)
        bytesOnDisk += UInt64(bytes.count)
    }

    func finish() throws(SinkError) {
        let closed = close(fd)
        fd = -1
        if closed != 0 { throw .writeFailed(path: path, message: errnoMessage(errno)) }
    }

    func discard() {
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
        fd = -1
    }
}

/// Moves a complete body into place: a rename (the destination is the old file or the whole
/// new one), or a copy when the hidden file is on another file system. The finished file gets
/// the mode a new file gets, `0666 & ~umask`, as curl's and a shell redirection's do.
/// - Returns: nil, or the reason it could not.
func commitOutput(_ staged: String, to destination: String) -> String? {
    chmod(staged, newFileMode())
    guard staged != destination else { return nil }
    guard rename(staged, destination) != 0 else { return nil }
    let code = errno
    defer { unlink(staged) }
    if code == EXDEV, copyFile(from: staged, to: destination) { return nil }
    return "cannot put the download at \(destination): \(errnoMessage(code))"
}

/// Copies a file through one 64 KiB buffer (a rename across file systems).
private func copyFile(from source: String, to target: String) -> Bool {
    let input = open(source, O_RDONLY | O_CLOEXEC)
    guard input >= 0 else { return false }
    defer { close(input) }
    let output = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, newFileMode())
    guard output >= 0 else { return false }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    defer { buffer.deallocate() }
    while true {
        let n = read(input, buffer.baseAddress, buffer.count)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 {
            let ok = n == 0 && close(output) == 0
            if !ok { unlink(target) }
            return ok
        }
        do throws(SinkError) {
            try writeAll(output, UnsafeRawBufferPointer(rebasing: buffer[0..<n]), name: target)
        } catch {
            close(output)
            unlink(target)
            return false
        }
    }
}

/// `0666 & ~umask`: the mode of a newly created file. The umask is read from
/// /proc/self/status (umask(2) can only be read by setting it, racing other threads); 022
/// when it cannot be read.
func newFileMode() -> mode_t {
    var mask: mode_t = 0o022
    if let status = SystemFiles().read("/proc/self/status", limit: 4096, whole: false) {
        for line in status.split(separator: "\n") where line.hasPrefix("Umask:") {
            if let value = UInt32(line.dropFirst(6).trimmingHTTPWhitespace(), radix: 8) { mask = mode_t(value) }
        }
    }
    return 0o666 & ~mask
}
