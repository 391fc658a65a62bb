import Dispatch
import HTTPTypes
import Synchronization

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
    public typealias Destination =
        @Sendable (_ temporaryURL: URL, _ response: HTTPResponse) -> (
            destinationURL: URL, options: Options
        )

    package enum Target: Sendable {
        case destination(Destination?)
        case descriptor(Int32)
    }

    private let target: Target
    private let acceptableStatusCodes: Range<Int>?
    private let includeResponseHead: Bool
    /// Set on the loop when the head failed validation (the body is then discarded).
    private let rejectedStatus = Mutex<Int?>(nil)

    /// A file sent as the request body (`fire-agent request --upload-file`).
    private let uploadFile: URL?

    init(
        session: Session, convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)?, target: Target,
        acceptableStatusCodes: Range<Int>? = nil, includeResponseHead: Bool = false, uploadFile: URL? = nil
    ) {
        self.uploadFile = uploadFile
        self.target = target
        self.acceptableStatusCodes = acceptableStatusCodes
        self.includeResponseHead = includeResponseHead
        super.init(session: session, convertible: convertible, interceptor: interceptor)
    }

    /// A destination in the temporary directory named after the response (or a UUID).
    /// - Returns: the destination closure.
    public static func suggestedDownloadDestination(options: Options = []) -> Destination {
        { temporaryURL, _ in (temporaryURL, options) }
    }

    /// The file the body was written to, once finished.
    public var fileURL: URL? {
        protected.withLock { $0.output?.file }
    }

    override func makeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> ResponseBodySink {
        let sink = try makeTargetSink(for: response)
        if includeResponseHead {
            var head = "HTTP/1.1 \(response.status.code) \(response.status.reasonPhrase)\r\n"
            for field in response.headerFields { head += "\(field.name.rawName): \(field.value)\r\n" }
            head += "\r\n"
            let bytes = Array(head.utf8)
            let pointer = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 1)
            defer { pointer.deallocate() }
            pointer.copyBytes(from: bytes)
            try sink.write(UnsafeRawBufferPointer(pointer))
        }
        return sink
    }

    private func makeTargetSink(for response: HTTPResponse) throws(SinkError) -> ResponseBodySink {
        if let acceptableStatusCodes, !acceptableStatusCodes.contains(response.status.code) {
            rejectedStatus.withLock { $0 = response.status.code }
            // The body still goes to a descriptor (a terminal shows the error page), never
            // into a destination file.
            if case .descriptor(let fd) = target { return DescriptorSink(fd: fd, name: "descriptor \(fd)") }
            return DiscardSink()
        }
        switch target {
        case .descriptor(let fd):
            return DescriptorSink(fd: fd, name: "descriptor \(fd)")
        case .destination(let destination):
            let temporary = FileManager.default.temporaryDirectory.appending(path: "TinyFire_\(UUID().uuidString).tmp")
            let (url, options) = destination?(temporary, response) ?? (temporary, [])
            return try AtomicFileSink(
                destination: url, createIntermediateDirectories: options.contains(.createIntermediateDirectories),
                replaceExisting: options.contains(.removePreviousFile))
        }
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

    override func prepare(_ spec: inout RequestSpec) throws(TinyFireError) {
        guard let uploadFile else { return }
        spec.body = nil
        spec.bodySource = .segments([try RequestBodyFile.segment(regularFileAt: uploadFile.path(percentEncoded: false))])
    }

    override func adjustTransferResult(_ result: Result<SinkOutput, TinyFireError>) -> Result<SinkOutput, TinyFireError> {
        if case .success = result, let code = rejectedStatus.withLock({ $0 }) {
            return .failure(.responseValidationFailed(reason: .unacceptableStatusCode(code: code)))
        }
        return result
    }

    func makeResponse() -> DownloadResponse<URL?, TinyFireError> {
        let snapshot = snapshot
        let url = snapshot.output?.file
        let result: Result<URL?, TinyFireError> = snapshot.error.map { .failure($0) } ?? .success(url)
        return DownloadResponse(
            request: snapshot.request, response: snapshot.response, fileURL: url, metrics: snapshot.metrics, result: result)
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
}

/// The outcome of a `DownloadRequest`.
public struct DownloadResponse<Success: Sendable, Failure: Error>: Sendable {
    /// The request as sent (adapted, before redirects).
    public let request: URLRequest?
    /// The final response head.
    public let response: HTTPResponse?
    /// Where the body was written (file destinations only).
    public let fileURL: URL?
    /// Timings and counts.
    public let metrics: TransferMetrics?
    /// The result.
    public let result: Result<Success, Failure>

    /// Creates a response.
    public init(
        request: URLRequest?, response: HTTPResponse?, fileURL: URL?, metrics: TransferMetrics?,
        result: Result<Success, Failure>
    ) {
        self.request = request
        self.response = response
        self.fileURL = fileURL
        self.metrics = metrics
        self.result = result
    }

    /// The success value, if any.
    public var value: Success? { try? result.get() }
    /// The failure, if any.
    public var error: Failure? {
        if case .failure(let error) = result { return error }
        return nil
    }
}
