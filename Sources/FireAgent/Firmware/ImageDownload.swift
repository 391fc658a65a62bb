import HTTPTypes
import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// What the partial image holds and how to continue it, kept in `staging/image.resume` across
/// restarts. The document is the library's resume data (`DownloadResumeData`, version 1), so a
/// download an older agent left continues:
///
/// ```json
/// {"bytesOnDisk":0,"entityTag":"\"5f3a-1c00000\"","lastModified":"Sat, 21 Nov 2026 10:00:00 GMT",
///  "partialFile":"/var/lib/fire-agent/firmware/staging/image.part","totalLength":104857600,
///  "url":"https://updates.example/gw-2.1.0.img","version":1}
/// ```
///
/// It is written when a body starts from zero (`bytesOnDisk` 0: the partial file's own length
/// says how much arrived), and only for a response with a validator, so a continuation never
/// splices bytes of two versions of the image.
package struct ImageResumeRecord: Sendable, Equatable {
    /// The URL asked for (before redirects).
    package var url: String
    /// The partial file.
    package var partialFile: String
    /// The bytes it holds (0 in the record on disk: the file's length is what counts).
    package var bytesOnDisk: UInt64
    /// The response's strong `ETag`, if it had one.
    package var entityTag: String?
    /// The response's `Last-Modified`, if it had one.
    package var lastModified: String?
    /// The whole image's length, when the server said.
    package var totalLength: UInt64?

    package init(
        url: String, partialFile: String, bytesOnDisk: UInt64, entityTag: String?, lastModified: String?, totalLength: UInt64?
    ) {
        self.url = url
        self.partialFile = partialFile
        self.bytesOnDisk = bytesOnDisk
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.totalLength = totalLength
    }

    /// The record at `path`, or nil when there is none or it is not one (version 1).
    package static func read(from path: String) -> ImageResumeRecord? {
        guard let bytes = SystemFiles().readBytes(path, limit: 64 << 10, whole: true),
            case .object(let fields)? = try? StrictJSON.parse(bytes, rules: .responses),
            case .integer(1)? = fields["version"], case .string(let url)? = fields["url"],
            case .string(let partialFile)? = fields["partialFile"], let bytesOnDisk = unsigned(fields["bytesOnDisk"])
        else { return nil }
        func text(_ key: String) -> String? {
            if case .string(let value)? = fields[key] { return value }
            return nil
        }
        return ImageResumeRecord(
            url: url, partialFile: partialFile, bytesOnDisk: bytesOnDisk, entityTag: text("entityTag"),
            lastModified: text("lastModified"), totalLength: unsigned(fields["totalLength"]))
    }

    private static func unsigned(_ value: StrictJSON?) -> UInt64? {
        switch value {
        case .integer(let number)?: return number >= 0 ? UInt64(number) : nil
        case .unsigned(let number)?: return number
        default: return nil
        }
    }

    /// The document, members sorted by name, slashes not escaped (as the library writes it).
    package var json: String {
        var members: [(String, String)] = [
            ("bytesOnDisk", "\(bytesOnDisk)"), ("partialFile", partialFile.jsonQuoted), ("url", url.jsonQuoted), ("version", "1"),
        ]
        if let entityTag { members.append(("entityTag", entityTag.jsonQuoted)) }
        if let lastModified { members.append(("lastModified", lastModified.jsonQuoted)) }
        if let totalLength { members.append(("totalLength", "\(totalLength)")) }
        members.sort { $0.0 < $1.0 }
        var out = "{"
        for (index, member) in members.enumerated() { out += (index == 0 ? "" : ",") + member.0.jsonQuoted + ":" + member.1 }
        return out + "}"
    }

    /// Writes the record so that a crash leaves the old file or the whole new one (a temporary
    /// file, fsync, rename, fsync of the directory). On failure `path` is removed: no record
    /// means start over, never continue against a stale validator.
    package func writeDurably(to path: String) {
        if replaceFile(path, with: Array(json.utf8), durability: .durable) != nil { unlink(path) }
    }
}

/// Downloads the firmware image into its partial file (`staging/image.part`) on the core's
/// engine, continuing what an earlier attempt or process left: `Range` from the file's end with
/// `If-Range` (the recorded strong ETag, else Last-Modified), judged by `RangeResume`. A 206
/// that continues the file exactly is appended; a server that ignores Range sends it whole and
/// the file starts over; an image that changed on the server (If-Range answered 200 with other
/// validators) fails with `resourceChanged`, so the flow polls the manifest before anything
/// else. Nothing is written past `maximumSize` (the size the manifest signed). Every byte goes
/// to the hasher as it is written, so verification needs no second read.
///
/// A failed or cancelled attempt keeps its bytes (fsync'd) for the next one. Up to three
/// immediate new attempts follow a response that cannot continue the file (a wrong range, a
/// shrunk image, a complete file that asks for its last byte again).
///
/// Memory: the engine's read buffer; nothing grows with the image.
package final class ImageDownload: Sendable {
    /// How the download ended.
    package enum Outcome: Sendable {
        /// The whole image is in the partial file.
        case finished
        /// The server answered with a status that brings no image (the body was not kept).
        case answered(status: Int)
        /// No image: the transfer failed (the reason in words: the failure, or the pin refusal).
        case failed(TransferFailure, reason: String)
    }

    private let client: FirmwareClient
    private let request: ImageAttempt.Request
    private let current = Locked<(attempt: ImageAttempt?, cancelled: Bool)>((nil, false))

    /// A download of `url` into `partialFile`.
    /// - Parameters:
    ///   - client: sends it.
    ///   - url: the image (from the verified manifest).
    ///   - partialFile: where the bytes go.
    ///   - recordPath: the resume record.
    ///   - maximumSize: the size the manifest signed; more is refused.
    ///   - resume: what the partial file holds (from the record), nil to start from zero.
    ///   - hasher: sees every byte written.
    ///   - progress: called on the engine's thread with the bytes in the file.
    package init(
        client: FirmwareClient, url: AbsoluteURL, partialFile: String, recordPath: String, maximumSize: UInt64,
        resume: ImageResumeRecord?, hasher: ImageHasher, progress: @escaping @Sendable (UInt64) -> Void
    ) {
        self.client = client
        request = ImageAttempt.Request(
            url: url, partialFile: partialFile, recordPath: recordPath, maximumSize: maximumSize, hasher: hasher, progress: progress,
            trust: { client.trust(forHost: $0) }, partial: resume)
    }

    /// Runs the download to its end, blocking the calling thread.
    /// - Parameters:
    ///   - interval: how often `tick` runs while it does.
    ///   - tick: called on this thread every `interval` (it may call `cancel`).
    /// - Returns: how it ended.
    package func run(every interval: Duration, _ tick: () -> Void) -> Outcome {
        var request = request
        var restarts = 0
        while true {
            let attempt = ImageAttempt(request)
            let started = current.withLock { current -> Bool in
                guard !current.cancelled else { return false }
                current.attempt = attempt
                return true
            }
            guard started else { return .failed(.explicitlyCancelled, reason: "cancelled") }
            client.engine.start(attempt.spec, owner: attempt)
            var ended: (outcome: Outcome, partial: ImageResumeRecord?, restart: Bool)?
            while ended == nil {
                ended = attempt.ended.wait(until: { $0 }, deadline: .now() + interval)
                if ended == nil { tick() }
            }
            current.withLock { $0.attempt = nil }
            guard let ended else { return .failed(.explicitlyCancelled, reason: "cancelled") }
            request.partial = ended.partial
            if ended.restart, restarts < 3, !current.withLock({ $0.cancelled }) {
                restarts += 1
                continue
            }
            return ended.outcome
        }
    }

    /// Cancels the download (from any thread): the attempt in flight ends, its bytes stay.
    package func cancel() {
        let attempt = current.withLock { current -> ImageAttempt? in
            current.cancelled = true
            return current.attempt
        }
        if let attempt { client.engine.cancel(attempt) }
    }
}

/// One request of an `ImageDownload`: a transfer owner of its own, so a new attempt never
/// meets the engine's record of the last.
private final class ImageAttempt: PlainTransferOwner, @unchecked Sendable {
    // @unchecked: `partial`, `restart` and `sink` are touched on the engine's loop thread while
    // the transfer runs; the caller reads them through `ended` after it ended.

    /// What every attempt of a download shares, and what the last one learned (`partial`).
    struct Request: Sendable {
        let url: AbsoluteURL
        let partialFile: String
        let recordPath: String
        let maximumSize: UInt64
        let hasher: ImageHasher
        let progress: @Sendable (UInt64) -> Void
        /// The judge for the host each connection went to (a redirect's too).
        let trust: @Sendable (String) -> (@Sendable (TrustFacts) -> String?)?
        var partial: ImageResumeRecord?
    }

    let request: Request
    let spec: RequestSpec
    /// How the attempt ended, what the partial file holds then, and whether to try again at once.
    let ended = ConditionLocked<(outcome: ImageDownload.Outcome, partial: ImageResumeRecord?, restart: Bool)?>(nil)
    private var partial: ImageResumeRecord?
    /// The offset asked for (`Range`), when the attempt continues the partial file.
    private let rangeOffset: UInt64?
    private var restart = false
    private var sink: ImageFileSink?
    private let refusal = Locked<String?>(nil)

    init(_ request: Request) {
        self.request = request
        var spec = RequestSpec(url: request.url, method: .get, headers: ["Accept-Encoding": "identity"], body: nil)
        var partial = request.partial
        var offset: UInt64?
        if let known = partial, known.bytesOnDisk > 0 {
            var info = stat()
            if let validator = known.entityTag ?? known.lastModified, stat(request.partialFile, &info) == 0,
                UInt64(info.st_size) == known.bytesOnDisk
            {
                // Complete already: ask for the last byte again, to get an ordinary 206.
                var from = known.bytesOnDisk
                if let total = known.totalLength, from >= total, total > 0 { from = total - 1 }
                spec.headers.update(name: "Range", value: "bytes=\(from)-")
                spec.headers.update(name: "If-Range", value: validator)
                offset = from
            } else {
                // Nothing proves the bytes are of the version the server has now: start over.
                partial = nil
            }
        }
        self.partial = partial
        rangeOffset = offset
        self.spec = spec
    }

    func transferMakeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> any ResponseBodySink {
        let code = response.status.code
        let fields = response.headerFields
        var append: UInt64?
        if let offset = rangeOffset, let known = partial {
            let verdict = RangeResume.judge(
                RangeResume.Response(
                    status: code, contentRange: fields[.contentRange], contentLength: fields[.contentLength],
                    contentEncoding: fields[.contentEncoding]),
                offset: offset, partialBytes: known.bytesOnDisk, knownTotal: known.totalLength)
            switch verdict {
            case .append:
                append = offset
            case .replace:
                // If-Range found the image changed (or the server ignored Range): the whole body
                // comes again. Another version stops the download; the same one starts over.
                if let change = RangeResume.change(fromEntityTag: known.entityTag, lastModified: known.lastModified, to: fields) {
                    throw .resourceChanged(change)
                }
            case .restart(let fromZero, let reason):
                restart = true
                if fromZero {
                    unlink(request.partialFile)
                    unlink(request.recordPath)
                    partial = nil
                } else {
                    partial?.totalLength = known.bytesOnDisk
                }
                throw .resumeRejected(reason)
            case .reject(let reason):
                throw .resumeRejected(reason)
            case .leaveAlone:
                return DiscardSink()
            }
        }
        guard code == 200 || code == 206 else { return DiscardSink() }
        let base = append ?? 0
        if let announced = RangeResume.announcedSize(status: code, fields: fields, base: base), announced > request.maximumSize {
            throw .fileSizeExceeded(limit: request.maximumSize)
        }
        let sink: ImageFileSink
        if let append {
            sink = try ImageFileSink(.append(path: request.partialFile, offset: append), request: request)
        } else {
            // The old validator goes before the file is emptied: no moment pairs it with bytes
            // of another version.
            unlink(request.recordPath)
            sink = try ImageFileSink(.empty(path: request.partialFile), request: request)
            partial = nil
            if RangeResume.isResumable(status: code, fields: fields) {
                let validators = RangeResume.validators(status: code, fields: fields)
                let record = ImageResumeRecord(
                    url: request.url.absoluteString, partialFile: request.partialFile, bytesOnDisk: 0, entityTag: validators.entityTag,
                    lastModified: validators.lastModified, totalLength: validators.totalLength)
                record.writeDurably(to: request.recordPath)
                partial = record
            }
        }
        request.hasher.bodyStarts(at: base, partialFile: request.partialFile)
        self.sink = sink
        return sink
    }

    func transferJudgeTrust(host: String) -> TrustJudgement {
        .judged(by: request.trust(host), keepingRefusalIn: refusal)
    }

    func transferDidFinish(
        _ result: Result<Void, TransferFailure>, request sent: SentRequestHead?, response: HTTPResponse?, report: TransferReport
    ) {
        if let sink { partial?.bytesOnDisk = sink.bytesOnDisk }
        let outcome: ImageDownload.Outcome
        switch result {
        case .success:
            let code = response?.status.code ?? 0
            outcome = sink != nil && (code == 200 || code == 206) ? .finished : .answered(status: code)
        case .failure(let failure):
            outcome = .failed(failure, reason: refusal.withLock { $0 } ?? failure.description)
        }
        let partial = partial
        let restart = restart
        ended.withLock { $0 = (outcome, partial, restart) }
    }
}

/// Writes the image's bytes into the partial file (`PartialFileSink`), at most the signed size,
/// each one shown to the hasher. A failed transfer keeps the bytes, fsync'd, for the next
/// attempt.
private final class ImageFileSink: ResponseBodySink {
    private let file: PartialFileSink
    private let request: ImageAttempt.Request
    /// Bytes in the file.
    var bytesOnDisk: UInt64 { file.bytesOnDisk }

    init(_ placement: PartialFileSink.Placement, request: ImageAttempt.Request) throws(SinkError) {
        file = try PartialFileSink(placement)
        self.request = request
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) {
        let (grown, overflow) = file.bytesOnDisk.addingReportingOverflow(UInt64(bytes.count))
        if overflow || grown > request.maximumSize { throw .fileSizeExceeded(limit: request.maximumSize) }
        try file.write(bytes)
        request.hasher.bodyWritten(bytes)
        request.progress(grown)
    }

    func finish() throws(SinkError) { try file.finish() }
    func discard() { file.discard() }
}

/// The image's SHA-256, fed by the download as bytes reach the file (the engine's thread) and
/// rebuilt from the partial file after a restart (the updater's thread, before the download).
package final class ImageHasher: Sendable {
    private let hasher = Locked(SHA256Hasher())

    package init() {}

    /// Bytes hashed.
    package var count: UInt64 { hasher.withLock { $0.count } }

    package func reset() { hasher.withLock { $0.reset() } }

    package func finish() -> [UInt8] { hasher.withLock { $0.finish() } }

    /// Hashes the first `length` bytes of `path` afresh.
    /// - Returns: false when they cannot be read.
    package func rebuild(from path: String, length: UInt64) -> Bool {
        hasher.withLock { hasher in
            hasher.reset()
            return length == 0 || hasher.update(fromFile: path, length: length) == length
        }
    }

    /// A body starts at `offset` of `partialFile`: normally the updater rebuilt the digest up to
    /// there before asking; a body that starts elsewhere (a 200 instead of a 206) is hashed from
    /// the file.
    func bodyStarts(at offset: UInt64, partialFile: String) {
        if count != offset { _ = rebuild(from: partialFile, length: offset) }
    }

    func bodyWritten(_ bytes: UnsafeRawBufferPointer) {
        hasher.withLock { $0.update(bytes) }
    }
}
