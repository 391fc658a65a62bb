import Dispatch
import HTTPTypes
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A request whose body streams to a file (or to a descriptor) through the connection's fixed
/// read buffer: memory does not grow with the body.
///
/// A file destination is written as a hidden temporary file beside it and renamed into place
/// only after the whole body arrived and decoded, so a failed download never leaves a file
/// that looks complete.
public final class DownloadRequest: Request, @unchecked Sendable {
    /// Options for a download destination, as in Alamofire.
    public struct Options: OptionSet, Sendable {
        /// Create missing parent directories of the destination.
        public static let createIntermediateDirectories = Options(rawValue: 1 << 0)
        /// Replace a file already at the destination (otherwise that is an error).
        public static let removePreviousFile = Options(rawValue: 1 << 1)

        /// The option bits.
        public let rawValue: Int
        /// Creates options from raw bits.
        public init(rawValue: Int) { self.rawValue = rawValue }
    }

    /// Chooses where the body goes once the response head is known. `temporaryURL` is the
    /// location TinyFire would pick by default (in the temporary directory).
    ///
    /// Called on the session's I/O thread when the final response head arrives, before the
    /// first body byte is written: no other transfer of the session moves while it runs, so it
    /// must only compute a location (no network, no waiting on another queue or a lock held
    /// elsewhere). Directories are created, and the file moved, by TinyFire afterwards.
    public typealias Destination =
        @Sendable (_ temporaryURL: URL, _ response: HTTPURLResponse) -> (
            destinationURL: URL, options: Options
        )

    package enum Target: Sendable {
        case destination(Destination?)
        case descriptor(Int32)
    }

    private let target: Target
    /// The destination that could not take the file (the errno says why), and the temporary
    /// file it was to come from.
    private let destinationFailure = Mutex<(source: URL, destination: URL, code: Int32)?>(nil)

    /// The partial file an attempt continues, and what the server said about the resource.
    struct PartialFile: Sendable {
        var path: String
        var bytes: UInt64
        var entityTag: String?
        var lastModified: String?
        var totalLength: UInt64?
    }

    private struct ResumeState {
        /// The bytes kept from earlier attempts (or from resume data).
        var partial: PartialFile?
        /// What the current attempt asked for with `Range`, nil for the whole resource.
        var rangeOffset: UInt64?
        /// The sink found the response unusable for the partial file: start again at once.
        var restartPending = false
        var restarts = 0
        var producingResumeData = false
        var resumeData: Data?
        var resumeDataHandlers: [@Sendable (Data?) -> Void] = []
        /// A `cancel(byProducingResumeData:)` already cancels (later ones are not answered).
        var cancelClaimed = false
    }

    private let resume = Mutex(ResumeState())
    /// At most this many immediate restarts (a Content-Range that does not fit, a 416) per request.
    static let maxRestarts = 3

    init(
        session: Session, convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)?, target: Target,
        resumingFrom resumeData: DownloadResumeData? = nil
    ) {
        self.target = target
        if let resumeData {
            resume.withLock {
                $0.partial = PartialFile(
                    path: resumeData.partialFile, bytes: resumeData.bytesOnDisk, entityTag: resumeData.entityTag,
                    lastModified: resumeData.lastModified, totalLength: resumeData.totalLength)
            }
        }
        super.init(session: session, convertible: convertible, interceptor: interceptor)
    }

    /// A destination in the temporary directory named after the response (or a UUID).
    /// - Returns: the destination closure.
    public static func suggestedDownloadDestination(options: Options = []) -> Destination {
        { temporaryURL, _ in (temporaryURL, options) }
    }

    /// A destination in `directory` named after the response: the `Content-Disposition`
    /// file name if the server sent one, else the last path component of the URL, else
    /// `download`. Path separators and leading dots are removed from the name.
    /// - Parameters:
    ///   - directory: where the file goes.
    ///   - url: the request's URL, for the fallback name.
    ///   - options: destination options.
    /// - Returns: the destination closure.
    public static func suggestedDownloadDestination(in directory: URL, for url: URL? = nil, options: Options = []) -> Destination {
        { _, response in
            let name = suggestedFilename(for: response, url: url)
            return (directory.appending(path: name), options)
        }
    }

    /// The file name a response suggests (`Content-Disposition: attachment; filename=…`), else
    /// the URL's last path component, else `download`; never a path.
    /// - Parameters:
    ///   - response: the response head.
    ///   - url: the request's URL.
    /// - Returns: a safe file name.
    public static func suggestedFilename(for response: HTTPURLResponse, url: URL?) -> String {
        var candidate: String?
        if let disposition = response.headerFields[.contentDisposition] {
            for parameter in disposition.split(separator: ";").dropFirst() {
                let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.trimmingHTTPWhitespace() }
                guard pair.count == 2, pair[0].lowercased() == "filename" else { continue }
                candidate =
                    pair[1].hasPrefix("\"") && pair[1].hasSuffix("\"") && pair[1].count >= 2
                    ? String(pair[1].dropFirst().dropLast()) : pair[1]
            }
        }
        if candidate?.isEmpty ?? true, let last = url?.lastPathComponent, last != "/" { candidate = last }
        var name = PathParts(path: candidate ?? "").name
        while name.hasPrefix(".") { name.removeFirst() }
        name = String(name.filter { $0 != "\0" && $0 != "\\" })
        return name.isEmpty ? "download" : name
    }

    /// The file holding the body: while validators run, the file it was written to (moved into
    /// place only after they all passed); once finished, its destination.
    public var fileURL: URL? {
        protected.withLock { state in
            switch state.output {
            case .stagedFile(let staged, _): return staged
            case .file(let url): return url
            default: return nil
            }
        }
    }

    /// Resume data, once the download failed with bytes on disk worth keeping or was
    /// cancelled with `cancel(producingResumeData: true)`; pass it to
    /// `Session.download(resumingWith:)`. The partial file it names stays until then.
    public var resumeData: Data? { resume.withLock { $0.resumeData } }

    /// Cancels the download; with `producingResumeData`, keeps the bytes received so far and
    /// sets `resumeData` (when there are any: a response that cannot be resumed, a body with a
    /// Content-Encoding, produces none).
    /// - Parameter producingResumeData: keep the partial file and describe it.
    /// - Returns: the request.
    @discardableResult
    public func cancel(producingResumeData: Bool) -> Self {
        resume.withLock { $0.producingResumeData = producingResumeData }
        return cancel()
    }

    /// Cancels the download, keeps the bytes received so far, and calls `completionHandler`
    /// on the session's root queue with the resume data (nil when nothing can be resumed).
    ///
    /// As in Alamofire, only the call that cancels gets an answer: on a request already
    /// cancelled or finished this does nothing and `completionHandler` is never called (so a
    /// progress handler may call it more than once, and a continuation resumed in it is
    /// resumed once). `resumeData` still holds what the cancelling call produced.
    /// - Parameter completionHandler: receives the resume data.
    /// - Returns: the request.
    @discardableResult
    public func cancel(byProducingResumeData completionHandler: @escaping @Sendable (Data?) -> Void) -> Self {
        let cancels = resume.withLock { state -> Bool in
            guard !state.cancelClaimed, !isFinished, !isCancelled else { return false }
            state.cancelClaimed = true
            state.producingResumeData = true
            state.resumeDataHandlers.append(completionHandler)
            return true
        }
        return cancels ? cancel() : self
    }

    override func makeSink(for response: HTTPURLResponse, expectedLength: UInt64?) throws(SinkError) -> any OutputSink {
        let code = response.status.code
        let (partial, rangeOffset) = resume.withLock { ($0.partial, $0.rangeOffset) }
        switch target {
        case .descriptor(let fd):
            return DescriptorSink(fd: fd, name: "descriptor \(fd)")
        case .destination(let destination):
            var placement = AtomicFileSink.Partial.new
            var progressBase: UInt64 = 0
            if let offset = rangeOffset, let partial {
                let fields = response.headerFields
                let verdict = RangeResume.judge(
                    RangeResume.Response(
                        status: code, contentRange: fields[.contentRange], contentLength: fields[.contentLength],
                        contentEncoding: fields[.contentEncoding]),
                    offset: offset, partialBytes: partial.bytes, knownTotal: partial.totalLength)
                switch verdict {
                case .append:
                    placement = .append(path: partial.path, offset: offset)
                    progressBase = offset
                case .replace:
                    // The server ignored Range, or If-Range found the resource changed: the
                    // whole body comes again and replaces the partial file.
                    placement = .restart(path: partial.path)
                case .restart(let fromZero, let reason):
                    // A complete file asks again for its last byte, knowing its length now.
                    if !fromZero { resume.withLock { $0.partial?.totalLength = partial.bytes } }
                    try restart(fromZero: fromZero, reason)
                case .reject(let reason):
                    throw .resumeRejected(reason)
                case .leaveAlone:
                    break  // an error page: it must not touch the partial file
                }
            }
            protected.withLock { $0.downloadProgressBase = progressBase }
            let temporary = FileManager.default.temporaryDirectory.appending(path: "TinyFire_\(UUID().uuidString).tmp")
            if destination == nil { AtomicFileSink.sweepDefaultTemporaryDirectoryOnce }
            let (url, options) = destination?(temporary, response) ?? (temporary, [])
            let resumable = isResumable(response)
            if resumable {
                let validators = RangeResume.validators(status: code, fields: response.headerFields)
                resume.withLock { state in
                    var record = state.partial ?? PartialFile(path: "", bytes: 0)
                    record.entityTag = validators.entityTag
                    record.lastModified = validators.lastModified
                    record.totalLength = validators.totalLength
                    state.partial = record
                }
            }
            let keep: ((String, UInt64) -> Void)? =
                resumable
                ? { [weak self] path, bytes in
                    self?.resume.withLock { state in
                        state.partial?.path = path
                        state.partial?.bytes = bytes
                    }
                } : nil
            do throws(SinkError) {
                return try AtomicFileSink(
                    destination: url, createIntermediateDirectories: options.contains(.createIntermediateDirectories),
                    replaceExisting: options.contains(.removePreviousFile), partial: placement, keepPartial: keep)
            } catch {
                if case .destinationUnusable(_, let errorCode, _) = error {
                    destinationFailure.withLock { $0 = (temporary, url, errorCode) }
                }
                throw error
            }
        }
    }

    /// Marks an immediate new attempt and aborts this one.
    private func restart(fromZero: Bool, _ message: String) throws(SinkError) -> Never {
        resume.withLock { state in
            if fromZero, let partial = state.partial {
                unlink(partial.path)
                state.partial = nil
            }
            state.restartPending = true
        }
        throw .resumeRejected(message)
    }

    /// Whether a response's body can be continued later with a Range request (a GET's;
    /// `RangeResume.isResumable` says the rest).
    private func isResumable(_ response: HTTPURLResponse) -> Bool {
        protected.withLock({ $0.sentHead?.method }) == .get
            && RangeResume.isResumable(status: response.status.code, fields: response.headerFields)
    }

    override func prepare(_ spec: inout RequestSpec) throws(TinyFireError) {
        guard case .destination = target else { return }
        let resuming = resume.withLock { state -> (partial: PartialFile, offset: UInt64)? in
            state.rangeOffset = nil
            guard let partial = state.partial, partial.bytes > 0 else { return nil }
            guard partial.entityTag != nil || partial.lastModified != nil else {
                // Nothing proves the bytes are of the version the server has now: start over.
                unlink(partial.path)
                state.partial = nil
                return nil
            }
            var info = stat()
            guard stat(partial.path, &info) == 0, UInt64(info.st_size) == partial.bytes else {
                // Missing, or not the length recorded: nothing in it can be trusted.
                unlink(partial.path)
                state.partial = nil
                return nil
            }
            var offset = partial.bytes
            // Complete already: ask for the last byte again, to get an ordinary 206.
            if let total = partial.totalLength, offset >= total, total > 0 { offset = total - 1 }
            state.rangeOffset = offset
            return (partial, offset)
        }
        guard let (partial, offset) = resuming else { return }
        spec.headers.update(name: "Range", value: "bytes=\(offset)-")
        if let validator = partial.entityTag ?? partial.lastModified {
            spec.headers.update(name: "If-Range", value: validator)
        } else {
            spec.headers.remove(name: "If-Range")
        }
        // Byte offsets count the file's bytes, not a compressed encoding of them.
        spec.headers.update(name: "Accept-Encoding", value: "identity")
    }

    override func takeImmediateRestart() -> Bool {
        resume.withLock { state in
            guard state.restartPending else { return false }
            state.restartPending = false
            state.restarts += 1
            return state.restarts <= Self.maxRestarts
        }
    }

    override func didFinishPipeline() {
        let failed = error != nil
        let cancelled = isCancelled
        let (handlers, data) = resume.withLock { state -> ([@Sendable (Data?) -> Void], Data?) in
            state.restartPending = false
            if !failed {
                state.partial = nil  // renamed into place
                state.resumeData = nil
            } else if let partial = state.partial, partial.bytes > 0, !cancelled || state.producingResumeData {
                let url = (try? convertible.asURLRequest().url) ?? nil
                state.resumeData = url.map {
                    DownloadResumeData(
                        url: $0, partialFile: partial.path, bytesOnDisk: partial.bytes, entityTag: partial.entityTag,
                        lastModified: partial.lastModified, totalLength: partial.totalLength
                    ).data
                }
            } else {
                if let partial = state.partial, !partial.path.isEmpty { unlink(partial.path) }
                state.partial = nil
                state.resumeData = nil
            }
            defer { state.resumeDataHandlers = [] }
            return (state.resumeDataHandlers, state.resumeData)
        }
        for handler in handlers { session.rootQueue.async { handler(data) } }
    }

    /// Calls `completionHandler` on `queue` with the outcome. Starts the request if the
    /// session starts requests immediately.
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - completionHandler: receives the `DownloadResponse`.
    /// - Returns: the request.
    @discardableResult
    public func response(
        queue: DispatchQueue? = nil,
        completionHandler: @escaping @Sendable (DownloadResponse<URL?, TinyFireError>) -> Void
    ) -> Self {
        let queue = queue ?? session.rootQueue
        appendResponseSerializer(inline: true) { [self] in
            let response = makeResponse()
            responseSerializerDidComplete { queue.async { completionHandler(response) } }
        }
        return self
    }

    /// Calls `completionHandler` with the file URL, or a failure when the download failed or
    /// wrote to a descriptor (Alamofire's `responseURL`).
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - completionHandler: receives the response.
    /// - Returns: the request.
    @discardableResult
    public func responseURL(
        queue: DispatchQueue? = nil, completionHandler: @escaping @Sendable (DownloadResponse<URL, TinyFireError>) -> Void
    ) -> Self {
        let queue = queue ?? session.rootQueue
        appendResponseSerializer(inline: true) { [self] in
            let snapshot = snapshot
            let result: Result<URL, TinyFireError>
            if let error = snapshot.error {
                result = .failure(error)
            } else if let url = snapshot.output?.file {
                result = .success(url)
            } else {
                result = .failure(.responseSerializationFailed(reason: .inputDataNilOrZeroLength))
            }
            let response = DownloadResponse(
                request: snapshot.request, response: snapshot.response, fileURL: snapshot.output?.file, resumeData: resumeData,
                metrics: snapshot.metrics, result: result)
            responseSerializerDidComplete { queue.async { completionHandler(response) } }
        }
        return self
    }

    /// Calls `completionHandler` with what `responseSerializer` made of the downloaded file,
    /// read into memory (at most `SessionConfiguration.maxInMemoryBodyBytes`; a larger file
    /// fails serialization rather than exhaust memory). Serialization runs on the session's
    /// serialization queue.
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - responseSerializer: the serializer.
    ///   - completionHandler: receives the response.
    /// - Returns: the request.
    @discardableResult
    public func response<Serializer: DownloadResponseSerializerProtocol>(
        queue: DispatchQueue? = nil, responseSerializer: Serializer,
        completionHandler: @escaping @Sendable (DownloadResponse<Serializer.SerializedObject, TinyFireError>) -> Void
    ) -> Self {
        let queue = queue ?? session.rootQueue
        let limit = session.configuration.maxInMemoryBodyBytes
        appendResponseSerializer { [self] in
            let snapshot = snapshot
            let url = snapshot.output?.file
            let result: Result<Serializer.SerializedObject, TinyFireError>
            do {
                result = .success(
                    try Self.$serializationReadLimit.withValue(limit) {
                        try responseSerializer.serializeDownload(
                            request: snapshot.request, response: snapshot.response, fileURL: url, error: snapshot.error)
                    })
            } catch let error as TinyFireError {
                result = .failure(error)
            } catch {
                result = .failure(.responseSerializationFailed(reason: .customSerializationFailed(error: error)))
            }
            let response = DownloadResponse(
                request: snapshot.request, response: snapshot.response, fileURL: url, resumeData: resumeData, metrics: snapshot.metrics,
                result: result)
            responseSerializerDidComplete { queue.async { completionHandler(response) } }
        }
        return self
    }

    /// The downloaded file as `Data` (see `response(queue:responseSerializer:completionHandler:)`
    /// for the memory bound).
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - completionHandler: receives the response.
    /// - Returns: the request.
    @discardableResult
    public func responseData(
        queue: DispatchQueue? = nil, completionHandler: @escaping @Sendable (DownloadResponse<Data, TinyFireError>) -> Void
    ) -> Self {
        response(queue: queue, responseSerializer: DataResponseSerializer(), completionHandler: completionHandler)
    }

    /// The downloaded file as untyped JSON (`JSONResponseSerializer`), Alamofire's deprecated
    /// `responseJSON`.
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - options: default `.allowFragments`.
    ///   - completionHandler: receives the response.
    /// - Returns: the request.
    @available(*, deprecated, message: "Use responseDecodable instead, as Alamofire 5 advises.")
    @discardableResult
    public func responseJSON(
        queue: DispatchQueue? = nil, options: JSONResponseSerializer.ReadingOptions = .allowFragments,
        completionHandler: @escaping @Sendable (DownloadResponse<any Sendable, TinyFireError>) -> Void
    ) -> Self {
        response(queue: queue, responseSerializer: JSONResponseSerializer(options: options), completionHandler: completionHandler)
    }

    /// The downloaded file as text (charset from the response, else UTF-8).
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - completionHandler: receives the response.
    /// - Returns: the request.
    @discardableResult
    public func responseString(
        queue: DispatchQueue? = nil, completionHandler: @escaping @Sendable (DownloadResponse<String, TinyFireError>) -> Void
    ) -> Self {
        response(queue: queue, responseSerializer: StringResponseSerializer(), completionHandler: completionHandler)
    }

    /// The downloaded file decoded as `T` (JSON by default).
    /// - Parameters:
    ///   - type: the type.
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - decoder: default `JSONDecoder()`.
    ///   - completionHandler: receives the response.
    /// - Returns: the request.
    @discardableResult
    public func responseDecodable<T: Decodable & Sendable>(
        of type: T.Type = T.self, queue: DispatchQueue? = nil, decoder: any DataDecoder = JSONDecoder(),
        completionHandler: @escaping @Sendable (DownloadResponse<T, TinyFireError>) -> Void
    ) -> Self {
        response(queue: queue, responseSerializer: DecodableResponseSerializer<T>(decoder: decoder), completionHandler: completionHandler)
    }

    /// How many bytes of a downloaded file a `ResponseSerializer` reads into memory: the
    /// downloading session's `maxInMemoryBodyBytes` while its serializers run.
    @TaskLocal static var serializationReadLimit = SessionConfiguration.defaultMaxInMemoryBodyBytes

    /// Reads a downloaded file, refusing one larger than `limit`.
    static func readDownloadedFile(_ url: URL, limit: Int) throws(TinyFireError) -> Data {
        let path = url.path(percentEncoded: false)
        var info = stat()
        guard stat(path, &info) == 0 else { throw .responseSerializationFailed(reason: .inputFileReadFailed(at: url)) }
        guard info.st_size <= limit else {
            throw .responseSerializationFailed(
                reason: .customSerializationFailed(
                    error: DownloadFileError(
                        message: "\(path) is \(info.st_size) bytes, above maxInMemoryBodyBytes (\(limit)); read it as a file")))
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw .responseSerializationFailed(reason: .inputFileReadFailed(at: url))
        }
        return data
    }

    /// A downloaded file that cannot be read into memory.
    struct DownloadFileError: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    override func adjustTransferResult(_ result: Result<SinkOutput, TinyFireError>) -> Result<SinkOutput, TinyFireError> {
        if case .failure(.sessionTaskFailed) = result, let failure = destinationFailure.withLock({ $0 }) {
            return .failure(
                .downloadedFileMoveFailed(
                    error: fileSystemError(failure.code, path: failure.destination.path(percentEncoded: false), writing: true),
                    source: failure.source, destination: failure.destination))
        }
        return result
    }

    func makeResponse() -> DownloadResponse<URL?, TinyFireError> {
        let snapshot = snapshot
        let url = snapshot.output?.file
        let result: Result<URL?, TinyFireError> = snapshot.error.map { .failure($0) } ?? .success(url)
        return DownloadResponse(
            request: snapshot.request, response: snapshot.response, fileURL: url, resumeData: resumeData, metrics: snapshot.metrics,
            result: result)
    }

    /// The whole response, awaited (Swift concurrency). Cancelling the awaiting task cancels
    /// the request.
    public var downloadResponse: DownloadResponse<URL?, TinyFireError> {
        get async {
            let box = ResponseBox<DownloadResponse<URL?, TinyFireError>>()
            appendResponseSerializer(inline: true) { [self] in
                let response = makeResponse()
                responseSerializerDidComplete { box.deliver(response) }
            }
            return await withTaskCancellationHandler {
                await box.response
            } onCancel: {
                cancel()
            }
        }
    }

    // MARK: - Staged file

    /// Takes a staged download out of the output, once.
    private func takeStagedOutput() -> (staged: URL, destination: URL)? {
        protected.withLock { state in
            guard case .stagedFile(let staged, let destination) = state.output else { return nil }
            state.output = nil
            return (staged, destination)
        }
    }

    /// Moves a validated download into place; the error when that fails.
    override func commitOutput() -> TinyFireError? {
        guard let (staged, destination) = takeStagedOutput() else { return nil }
        do throws(SinkError) {
            try commitStagedFile(staged, to: destination)
        } catch {
            let path = destination.path(percentEncoded: false)
            if case .destinationUnusable(_, let code, _) = error {
                return .downloadedFileMoveFailed(
                    error: fileSystemError(code, path: path, writing: true), source: staged, destination: destination)
            }
            let message: String
            if case .writeFailed(_, let text) = error { message = text } else { message = "\(error)" }
            let request = protected.withLock { $0.sentHead }?.httpRequest
            return .sessionTaskFailed(
                TransferError(
                    method: request?.method.rawValue ?? "GET", url: request?.url?.absoluteString ?? "", host: request?.authority ?? "",
                    phase: .receivingBody, reason: .fileWriteFailed(path: path, message: message), bytesSent: 0, bytesReceived: 0))
        }
        protected.withLock { $0.output = .file(destination) }
        return nil
    }

    /// Removes a download that failed validation (or whose request ended another way).
    override func discardOutput() {
        guard let (staged, _) = takeStagedOutput() else { return }
        unlink(staged.path(percentEncoded: false))
    }
}

// MARK: - Swift concurrency

extension DownloadRequest {
    /// The value `serializer` makes of the downloaded file, awaited (read into memory up to
    /// `maxInMemoryBodyBytes`).
    /// - Parameters:
    ///   - serializer: the serializer.
    ///   - shouldAutomaticallyCancel: cancel the request when the awaiting task is cancelled;
    ///     default true, as in Alamofire's downloads.
    /// - Returns: the task.
    public func serializingDownload<Serializer: DownloadResponseSerializerProtocol>(
        using serializer: Serializer, automaticallyCancelling shouldAutomaticallyCancel: Bool = true
    ) -> DownloadTask<Serializer.SerializedObject> {
        let box = ResponseBox<DownloadResponse<Serializer.SerializedObject, TinyFireError>>()
        response(queue: session.serializationQueue, responseSerializer: serializer) { box.deliver($0) }
        return DownloadTask(request: self, box: box, automaticallyCancelling: shouldAutomaticallyCancel)
    }

    /// The downloaded file as `Data`, awaited.
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: default true.
    ///   - dataPreprocessor: default passthrough.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the task.
    public func serializingData(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        dataPreprocessor: any DataPreprocessor = DataResponseSerializer.defaultDataPreprocessor,
        emptyResponseCodes: Set<Int> = DataResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = DataResponseSerializer.defaultEmptyRequestMethods
    ) -> DownloadTask<Data> {
        serializingDownload(
            using: DataResponseSerializer(
                dataPreprocessor: dataPreprocessor, emptyResponseCodes: emptyResponseCodes, emptyRequestMethods: emptyRequestMethods),
            automaticallyCancelling: shouldAutomaticallyCancel)
    }

    /// The downloaded file as text, awaited.
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: default true.
    ///   - dataPreprocessor: default passthrough.
    ///   - encoding: default the response's charset.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the task.
    public func serializingString(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        dataPreprocessor: any DataPreprocessor = StringResponseSerializer.defaultDataPreprocessor,
        encoding: String.Encoding? = nil,
        emptyResponseCodes: Set<Int> = StringResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = StringResponseSerializer.defaultEmptyRequestMethods
    ) -> DownloadTask<String> {
        serializingDownload(
            using: StringResponseSerializer(
                dataPreprocessor: dataPreprocessor, encoding: encoding, emptyResponseCodes: emptyResponseCodes,
                emptyRequestMethods: emptyRequestMethods),
            automaticallyCancelling: shouldAutomaticallyCancel)
    }

    /// The downloaded file decoded as `Value`, awaited.
    /// - Parameters:
    ///   - type: the type.
    ///   - shouldAutomaticallyCancel: default true.
    ///   - dataPreprocessor: default passthrough.
    ///   - decoder: default `JSONDecoder()`.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the task.
    public func serializingDecodable<Value: Decodable & Sendable>(
        _ type: Value.Type = Value.self, automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        dataPreprocessor: any DataPreprocessor = DecodableResponseSerializer<Value>.defaultDataPreprocessor,
        decoder: any DataDecoder = JSONDecoder(),
        emptyResponseCodes: Set<Int> = DecodableResponseSerializer<Value>.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = DecodableResponseSerializer<Value>.defaultEmptyRequestMethods
    ) -> DownloadTask<Value> {
        serializingDownload(
            using: DecodableResponseSerializer<Value>(
                dataPreprocessor: dataPreprocessor, decoder: decoder, emptyResponseCodes: emptyResponseCodes,
                emptyRequestMethods: emptyRequestMethods),
            automaticallyCancelling: shouldAutomaticallyCancel)
    }

    /// The downloaded file's URL, awaited (a failure when the download failed or wrote to a
    /// descriptor).
    /// - Parameter shouldAutomaticallyCancel: default true.
    /// - Returns: the task.
    public func serializingDownloadedFileURL(automaticallyCancelling shouldAutomaticallyCancel: Bool = true) -> DownloadTask<URL> {
        let box = ResponseBox<DownloadResponse<URL, TinyFireError>>()
        responseURL(queue: session.serializationQueue) { box.deliver($0) }
        return DownloadTask(request: self, box: box, automaticallyCancelling: shouldAutomaticallyCancel)
    }
}

/// An async view of a download's serialized outcome (Alamofire's `DownloadTask`).
public struct DownloadTask<Value: Sendable>: Sendable {
    /// The request.
    public let request: DownloadRequest
    private let box: ResponseBox<DownloadResponse<Value, TinyFireError>>
    private let shouldAutomaticallyCancel: Bool

    init(request: DownloadRequest, box: ResponseBox<DownloadResponse<Value, TinyFireError>>, automaticallyCancelling: Bool) {
        self.request = request
        self.box = box
        self.shouldAutomaticallyCancel = automaticallyCancelling
        // Made inside a Swift task that is already cancelled: the request is cancelled now,
        // awaited or not (Alamofire 5.12).
        if automaticallyCancelling && Task.isCancelled { request.cancel() }
    }

    /// The whole response. When the task was made with `automaticallyCancelling: true` (the
    /// default), cancelling the awaiting Swift task cancels the download.
    public var response: DownloadResponse<Value, TinyFireError> {
        get async {
            guard shouldAutomaticallyCancel else { return await box.response }
            let request = self.request
            return await withTaskCancellationHandler {
                await box.response
            } onCancel: {
                request.cancel()
            }
        }
    }

    /// The result.
    public var result: Result<Value, TinyFireError> {
        get async { await response.result }
    }

    /// The value.
    /// - Throws: the `TinyFireError` the download failed with.
    public var value: Value {
        get async throws(TinyFireError) { try await result.get() }
    }

    /// Cancels the download.
    public func cancel() { request.cancel() }
    /// Resumes the download.
    public func resume() { request.resume() }
    /// Suspends the download.
    public func suspend() { request.suspend() }
}

/// The outcome of a `DownloadRequest`.
public struct DownloadResponse<Success: Sendable, Failure: Error>: Sendable {
    /// The request as sent (adapted, before redirects).
    public let request: URLRequest?
    /// The final response head.
    public let response: HTTPURLResponse?
    /// Where the body was written (file destinations only).
    public let fileURL: URL?
    /// Resume data when the download failed or was cancelled with bytes worth keeping.
    public let resumeData: Data?
    /// Timings and counts.
    public let metrics: TransferMetrics?
    /// The result.
    public let result: Result<Success, Failure>

    /// Creates a response.
    public init(
        request: URLRequest?, response: HTTPURLResponse?, fileURL: URL?, resumeData: Data? = nil, metrics: TransferMetrics?,
        result: Result<Success, Failure>
    ) {
        self.request = request
        self.response = response
        self.fileURL = fileURL
        self.resumeData = resumeData
        self.metrics = metrics
        self.result = result
    }

    /// The success value, if any.
    public var value: Success? { try? result.get() }

    /// The same response with its success value transformed.
    /// - Parameter transform: maps the value.
    /// - Returns: the new response.
    public func map<NewSuccess: Sendable>(_ transform: (Success) -> NewSuccess) -> DownloadResponse<NewSuccess, Failure> {
        replacing(result.map(transform))
    }

    /// The same response with its success value transformed by a throwing closure; a throw
    /// becomes the failure.
    /// - Parameter transform: maps the value.
    /// - Returns: the new response, failing with `any Error`.
    public func tryMap<NewSuccess: Sendable>(_ transform: (Success) throws -> NewSuccess) -> DownloadResponse<NewSuccess, any Error> {
        replacing(result.tryMapping(transform))
    }

    /// The same response with its failure transformed.
    /// - Parameter transform: maps the failure.
    /// - Returns: the new response.
    public func mapError<NewFailure: Error>(_ transform: (Failure) -> NewFailure) -> DownloadResponse<Success, NewFailure> {
        replacing(result.mapError(transform))
    }

    /// The same response with its failure transformed by a throwing closure; a throw becomes
    /// the failure.
    /// - Parameter transform: maps the failure.
    /// - Returns: the new response, failing with `any Error`.
    public func tryMapError<NewFailure: Error>(_ transform: (Failure) throws -> NewFailure) -> DownloadResponse<Success, any Error> {
        replacing(result.tryMappingError(transform))
    }

    private func replacing<S: Sendable, F: Error>(_ result: Result<S, F>) -> DownloadResponse<S, F> {
        DownloadResponse<S, F>(
            request: request, response: response, fileURL: fileURL, resumeData: resumeData, metrics: metrics, result: result)
    }
    /// The failure, if any.
    public var error: Failure? {
        if case .failure(let error) = result { return error }
        return nil
    }
}
