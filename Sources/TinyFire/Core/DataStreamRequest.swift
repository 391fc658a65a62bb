import Dispatch
import HTTPTypes
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A request whose body is handed over as it arrives (Alamofire's `DataStreamRequest`):
/// server-sent lines, a long poll, a live log.
///
/// Memory: at most `streamBufferLimit` bytes (1 MiB) wait for slow handlers; beyond that the
/// connection stops reading (TCP holds the server back) until the handlers catch up, and the
/// idle timeout does not run meanwhile.
///
/// Four ways to stop a stream, as in Alamofire: `cancel()` on the request; `cancel()` on the
/// `Stream` value a handler receives (or on its `token`, kept for later); throwing from a
/// handler when the request was made with `automaticallyCancelOnStreamError: true` (a
/// serializer that fails — a line that does not decode — counts as an error too); and
/// cancelling the task iterating a `streamingData()` / `streamingStrings()` /
/// `streamingDecodables()` sequence.
public final class DataStreamRequest: Request, @unchecked Sendable {
    /// Bytes delivered but not yet handled, above which reading pauses: 1 MiB.
    public static let streamBufferLimit = 1 << 20

    /// A handler: receives each event; may throw (see `automaticallyCancelOnStreamError`).
    public typealias Handler<Success: Sendable, Failure: Error> = @Sendable (Stream<Success, Failure>) throws -> Void

    /// What a handler receives: an event and the means to cancel.
    public struct Stream<Success: Sendable, Failure: Error>: Sendable {
        /// The event.
        public let event: Event<Success, Failure>
        /// Cancels the request (also later, outside the handler).
        public let token: CancellationToken

        /// Cancels the request.
        public func cancel() { token.cancel() }

        /// The value of a `.stream(.success)` event.
        public var value: Success? {
            guard case .stream(.success(let value)) = event else { return nil }
            return value
        }

        /// The failure of a `.stream(.failure)` event.
        public var error: Failure? {
            guard case .stream(.failure(let error)) = event else { return nil }
            return error
        }

        /// The completion, for the `.complete` event.
        public var completion: Completion? {
            guard case .complete(let completion) = event else { return nil }
            return completion
        }
    }

    /// A stream event.
    public enum Event<Success: Sendable, Failure: Error>: Sendable {
        /// A value (a chunk, a string, a decoded line) or its serialization failure.
        case stream(Result<Success, Failure>)
        /// The request ended; always the last event.
        case complete(Completion)
    }

    /// How the request ended.
    public struct Completion: Sendable {
        /// The request as sent.
        public let request: URLRequest?
        /// The final response head.
        public let response: HTTPResponse?
        /// Timings and counts.
        public let metrics: TransferMetrics?
        /// The error, if the request failed or was cancelled.
        public let error: TinyFireError?
    }

    /// Cancels its request; safe to keep and call from anywhere.
    public struct CancellationToken: Sendable {
        weak var request: DataStreamRequest?

        /// Cancels the request.
        public func cancel() { request?.cancel() }
    }

    /// Whether a throwing handler or failing serializer cancels the request.
    public let automaticallyCancelOnStreamError: Bool

    private struct StreamState {
        var handlers: [@Sendable (Data) -> Void] = []
        var completions: [@Sendable (Completion) -> Void] = []
        var streamValidators: [@Sendable (URLRequest?, HTTPResponse) -> TinyFireError?] = []
        var validationError: TinyFireError?
        var paused = false
    }

    private let streamState = Mutex(StreamState())
    /// Keeps events in order: every chunk and the completion pass through it.
    private let streamQueue: DispatchQueue
    private let pending = Atomic<Int>(0)

    init(
        session: Session, convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)?,
        automaticallyCancelOnStreamError: Bool
    ) {
        self.automaticallyCancelOnStreamError = automaticallyCancelOnStreamError
        streamQueue = DispatchQueue(label: "tinyfire.stream", target: session.serializationQueue)
        super.init(session: session, convertible: convertible, interceptor: interceptor)
    }

    var token: CancellationToken { CancellationToken(request: self) }

    /// Bytes received and not yet handed to every handler (bounded by `streamBufferLimit` plus
    /// what one read brings).
    var bufferedBytes: Int { pending.load(ordering: .relaxed) }

    // MARK: - Validation

    /// Adds a validation run on the response head, before any data is handed over; a failure
    /// ends the stream with that error.
    /// - Parameter validation: the check (request, response head).
    /// - Returns: the request.
    @discardableResult
    public func validate(_ validation: @escaping @Sendable (URLRequest?, HTTPResponse) -> ValidationResult) -> Self {
        streamState.withLock {
            $0.streamValidators.append { request, response in ResponseValidation.error(from: validation(request, response)) }
        }
        return self
    }

    /// Accepts only these status codes.
    /// - Parameter acceptableStatusCodes: the codes.
    /// - Returns: the request.
    @discardableResult
    public func validate<S: Sequence & Sendable>(statusCode acceptableStatusCodes: S) -> Self where S.Element == Int {
        validate { _, response in
            ResponseValidation.statusCode(response, acceptable: acceptableStatusCodes).map { .failure($0) } ?? .success(())
        }
    }

    /// Status 200..<300.
    /// - Returns: the request.
    @discardableResult
    public func validate() -> Self { validate(statusCode: 200..<300) }

    // MARK: - Handlers

    /// Hands each chunk of the body to `stream` on `queue`, then the completion.
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - stream: the handler.
    /// - Returns: the request.
    @discardableResult
    public func responseStream(on queue: DispatchQueue? = nil, stream: @escaping Handler<Data, Never>) -> Self {
        addStream(queue: queue, handler: stream) { data, emit in
            emit(.success(data))
        } flush: { _ in
        }
    }

    /// Hands the body over as text (UTF-8; a character split between chunks is kept whole).
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - stream: the handler.
    /// - Returns: the request.
    @discardableResult
    public func responseStreamString(on queue: DispatchQueue? = nil, stream: @escaping Handler<String, Never>) -> Self {
        let decoder = Mutex(UTF8ChunkDecoder())
        return addStream(queue: queue, handler: stream) { data, emit in
            let text = decoder.withLock { $0.decode(data) }
            if !text.isEmpty { emit(.success(text)) }
        } flush: { emit in
            let rest = decoder.withLock { $0.finish() }
            if !rest.isEmpty { emit(.success(rest)) }
        }
    }

    /// Decodes the body as newline-delimited values (JSON Lines, as httpbin's /stream/N
    /// sends): each complete line is one value. A line longer than the session's
    /// `maxInMemoryBodyBytes` fails. Alamofire decodes each network chunk instead, which breaks
    /// when a value spans two chunks.
    /// - Parameters:
    ///   - type: the type of each line.
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - decoder: default `JSONDecoder()`.
    ///   - stream: the handler.
    /// - Returns: the request.
    @discardableResult
    public func responseStreamDecodable<T: Decodable & Sendable>(
        of type: T.Type = T.self, on queue: DispatchQueue? = nil, using decoder: any DataDecoder = JSONDecoder(),
        stream: @escaping Handler<T, TinyFireError>
    ) -> Self {
        let lines = Mutex(LineSplitter(limit: session.configuration.maxInMemoryBodyBytes))
        @Sendable func decode(_ line: Data) -> Result<T, TinyFireError> {
            do {
                return .success(try decoder.decode(T.self, from: line))
            } catch {
                return .failure(.responseSerializationFailed(reason: .decodingFailed(error: error)))
            }
        }
        return addStream(queue: queue, handler: stream) { data, emit in
            switch lines.withLock({ $0.split(data) }) {
            case .success(let complete): for line in complete { emit(decode(line)) }
            case .failure(let error): emit(.failure(error))
            }
        } flush: { emit in
            if let last = lines.withLock({ $0.finish() }) { emit(decode(last)) }
        }
    }

    /// Registers a handler: `transform` turns each chunk into events (on the stream queue),
    /// `flush` emits what is left at the end; then the completion.
    private func addStream<Success: Sendable, Failure: Error>(
        queue: DispatchQueue?, handler: @escaping Handler<Success, Failure>,
        transform: @escaping @Sendable (Data, (Result<Success, Failure>) -> Void) -> Void,
        flush: @escaping @Sendable ((Result<Success, Failure>) -> Void) -> Void
    ) -> Self {
        let queue = queue ?? session.rootQueue
        let token = self.token
        let cancelOnError = automaticallyCancelOnStreamError
        let deliver: @Sendable (Result<Success, Failure>) -> Void = { result in
            queue.async {
                do {
                    try handler(Stream(event: .stream(result), token: token))
                } catch {
                    if cancelOnError { token.cancel() }
                }
            }
            if case .failure = result, cancelOnError { token.cancel() }
        }
        streamState.withLock { state in
            state.handlers.append { data in transform(data, deliver) }
            state.completions.append { completion in
                flush(deliver)
                queue.async { try? handler(Stream(event: .complete(completion), token: token)) }
            }
        }
        appendResponseSerializer(inline: true) { [self] in
            responseSerializerDidComplete {}
        }
        return self
    }

    // MARK: - Swift concurrency

    /// The body's chunks as an async sequence of stream events (ending with `.complete`).
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: cancel the request when the iterating task is cancelled
    ///     or stops iterating; default true.
    ///   - bufferingPolicy: the sequence's buffer; default unbounded (reading pauses anyway
    ///     past `streamBufferLimit` bytes not yet handled).
    /// - Returns: the sequence.
    public func streamingData(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        bufferingPolicy: StreamOf<Stream<Data, Never>>.BufferingPolicy = .unbounded
    ) -> StreamOf<Stream<Data, Never>> {
        makeSequence(automaticallyCancelling: shouldAutomaticallyCancel, bufferingPolicy: bufferingPolicy) { continuation in
            responseStream(on: streamQueue) { continuation.yield($0) }
        }
    }

    /// The body as text, an async sequence of stream events.
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: cancel the request when iteration stops; default true.
    ///   - bufferingPolicy: the sequence's buffer; default unbounded.
    /// - Returns: the sequence.
    public func streamingStrings(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        bufferingPolicy: StreamOf<Stream<String, Never>>.BufferingPolicy = .unbounded
    ) -> StreamOf<Stream<String, Never>> {
        makeSequence(automaticallyCancelling: shouldAutomaticallyCancel, bufferingPolicy: bufferingPolicy) { continuation in
            responseStreamString(on: streamQueue) { continuation.yield($0) }
        }
    }

    /// The body decoded line by line, an async sequence of stream events.
    /// - Parameters:
    ///   - type: the type of each line.
    ///   - shouldAutomaticallyCancel: cancel the request when iteration stops; default true.
    ///   - bufferingPolicy: the sequence's buffer; default unbounded.
    /// - Returns: the sequence.
    public func streamingDecodables<T: Decodable & Sendable>(
        _ type: T.Type = T.self, automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        bufferingPolicy: StreamOf<Stream<T, TinyFireError>>.BufferingPolicy = .unbounded
    ) -> StreamOf<Stream<T, TinyFireError>> {
        makeSequence(automaticallyCancelling: shouldAutomaticallyCancel, bufferingPolicy: bufferingPolicy) { continuation in
            responseStreamDecodable(of: T.self, on: streamQueue) { continuation.yield($0) }
        }
    }

    private func makeSequence<Element: Sendable>(
        automaticallyCancelling: Bool, bufferingPolicy: StreamOf<Element>.BufferingPolicy,
        register: (AsyncStream<Element>.Continuation) -> Void
    ) -> StreamOf<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: bufferingPolicy)
        register(continuation)
        let streamQueue = self.streamQueue
        streamState.withLock { state in
            // Queued behind the `.complete` event the handler above sends.
            state.completions.append { _ in streamQueue.async { continuation.finish() } }
        }
        let token = self.token
        continuation.onTermination = { termination in
            if automaticallyCancelling || termination == .cancelled { token.cancel() }
        }
        return StreamOf(stream)
    }

    // MARK: - Engine hooks

    override func makeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> ResponseBodySink {
        let validators = streamState.withLock { $0.streamValidators }
        let request = self.request
        for validator in validators {
            if let error = validator(request, response) {
                streamState.withLock { $0.validationError = error }
                throw .resumeRejected("the response failed validation")
            }
        }
        return StreamSink(request: self)
    }

    override func adjustTransferResult(_ result: Result<SinkOutput, TinyFireError>) -> Result<SinkOutput, TinyFireError> {
        if let error = streamState.withLock({ state -> TinyFireError? in
            defer { state.validationError = nil }
            return state.validationError
        }) {
            return .failure(error)
        }
        return result
    }

    override func didFinishPipeline() {
        let snapshot = snapshot
        let completion = Completion(
            request: snapshot.request, response: snapshot.response, metrics: snapshot.metrics, error: snapshot.error)
        let completions = streamState.withLock { $0.completions }
        streamQueue.async {
            for complete in completions { complete(completion) }
        }
    }

    /// A chunk arrived (loop thread): copied once, then handed to every handler in order.
    fileprivate func received(_ bytes: UnsafeRawBufferPointer) {
        let data = Data(bytes)
        let count = data.count
        let total = pending.wrappingAdd(count, ordering: .relaxed).newValue
        if total > Self.streamBufferLimit { setPaused(true) }
        let handlers = streamState.withLock { $0.handlers }
        streamQueue.async { [self] in
            for handler in handlers { handler(data) }
            let left = pending.wrappingSubtract(count, ordering: .relaxed).newValue
            if left <= Self.streamBufferLimit / 2 { setPaused(false) }
        }
    }

    private func setPaused(_ paused: Bool) {
        let changed = streamState.withLock { state -> Bool in
            guard state.paused != paused else { return false }
            state.paused = paused
            return true
        }
        if changed { session.engine.setFlowPaused(self, paused) }
    }
}

/// Forwards body chunks to a `DataStreamRequest`.
private final class StreamSink: ResponseBodySink {
    private weak var request: DataStreamRequest?

    init(request: DataStreamRequest) { self.request = request }

    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) { request?.received(bytes) }
    func finish() throws(SinkError) -> SinkOutput { .none }
    func discard() {}
}

/// An async sequence of stream events (Alamofire's `StreamOf`); iterating it drives nothing
/// by itself: the request runs, and cancelling the iterating task cancels it.
public struct StreamOf<Element: Sendable>: AsyncSequence, Sendable {
    /// How many unread events the sequence keeps.
    public typealias BufferingPolicy = AsyncStream<Element>.Continuation.BufferingPolicy
    private let stream: AsyncStream<Element>

    init(_ stream: AsyncStream<Element>) { self.stream = stream }

    /// An iterator.
    /// - Returns: the iterator.
    public func makeAsyncIterator() -> AsyncStream<Element>.Iterator { stream.makeAsyncIterator() }
}

/// Decodes UTF-8 that arrives in chunks, carrying an incomplete trailing character over.
struct UTF8ChunkDecoder {
    private var carry: [UInt8] = []

    mutating func decode(_ data: Data) -> String {
        var bytes = carry
        bytes.append(contentsOf: data)
        var cut = bytes.count
        // Look back at most 4 bytes for the lead byte of the last character.
        var index = bytes.count - 1
        while index >= 0 && bytes.count - index <= 4 {
            let byte = bytes[index]
            if byte & 0xC0 == 0x80 {
                index -= 1
                continue
            }
            if byte & 0x80 != 0 {
                let needed = byte & 0xE0 == 0xC0 ? 2 : byte & 0xF0 == 0xE0 ? 3 : byte & 0xF8 == 0xF0 ? 4 : 1
                if bytes.count - index < needed { cut = index }
            }
            break
        }
        carry = Array(bytes[cut...])
        return String(decoding: bytes[..<cut], as: UTF8.self)
    }

    mutating func finish() -> String {
        defer { carry = [] }
        return String(decoding: carry, as: UTF8.self)
    }
}

/// Splits chunks into lines (LF, with an optional CR before it), bounded by `limit` bytes per line.
struct LineSplitter {
    let limit: Int
    private var partial = Data()

    init(limit: Int) { self.limit = limit }

    mutating func split(_ data: Data) -> Result<[Data], TinyFireError> {
        var lines: [Data] = []
        var start = data.startIndex
        for index in data.indices where data[index] == 0x0A {
            var line = partial + data[start..<index]
            partial = Data()
            if line.last == 0x0D { line.removeLast() }
            if !line.isEmpty { lines.append(line) }
            start = index + 1
        }
        partial.append(data[start...])
        if partial.count > limit {
            partial = Data()
            return .failure(
                .responseSerializationFailed(
                    reason: .customSerializationFailed(error: LineTooLong(limit: limit))))
        }
        return .success(lines)
    }

    mutating func finish() -> Data? {
        defer { partial = Data() }
        return partial.isEmpty ? nil : partial
    }

    struct LineTooLong: Error, CustomStringConvertible {
        let limit: Int
        var description: String { "a streamed line exceeds \(limit) bytes" }
    }
}
