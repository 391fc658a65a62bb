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
/// Memory: at most `streamBufferLimit` bytes (1 MiB) per handler or sequence wait until they
/// are handled — a handler has returned, or a sequence's consumer has taken the event; beyond
/// that the connection stops reading (TCP holds the server back) until they catch up, and the
/// idle timeout does not run meanwhile. So a slow consumer costs time, never memory, whether
/// it is a handler or a `for await` loop.
///
/// Ways to stop a stream, as in Alamofire: `cancel()` on the request; `cancel()` on the
/// `Stream` value a handler receives (or on its `token`, kept for later); throwing from a
/// handler (the request is cancelled and the thrown error is the completion's, as
/// `.responseSerializationFailed(.customSerializationFailed)`); a serializer that fails, when
/// the request was made with `automaticallyCancelOnStreamError: true`; and leaving a
/// `streamingData()` / `streamingStrings()` / `streamingDecodables()` loop or cancelling the
/// task iterating it (unless `automaticallyCancelling: false`).
public final class DataStreamRequest: Request, @unchecked Sendable {
    /// Bytes received but not yet handled, per handler, above which reading pauses: 1 MiB.
    public static let streamBufferLimit = 1 << 20

    /// A handler: receives each event; a throw cancels the request with that error.
    public typealias Handler<Success: Sendable, Failure: Error> = @Sendable (Stream<Success, Failure>) throws -> Void

    /// What a handler receives: an event and the means to cancel.
    public struct Stream<Success: Sendable, Failure: Error>: Sendable {
        /// The event.
        public let event: Event<Success, Failure>
        /// Cancels the request (also later, outside the handler).
        public let token: CancellationToken

        /// Cancels the request.
        public func cancel() { token.cancel() }

        /// The result of a `.stream` event.
        public var result: Result<Success, Failure>? {
            guard case .stream(let result) = event else { return nil }
            return result
        }

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
        /// A value (a chunk, a string, a decoded document) or its serialization failure.
        case stream(Result<Success, Failure>)
        /// The request ended; always the last event.
        case complete(Completion)
    }

    /// How the request ended.
    public struct Completion: Sendable {
        /// The request as sent.
        public let request: URLRequest?
        /// The final response head.
        public let response: HTTPURLResponse?
        /// Timings and counts.
        public let metrics: TransferMetrics?
        /// The error, if the request failed or was cancelled (a handler's thrown error first).
        public let error: TinyFireError?
    }

    /// Cancels its request; safe to keep and call from anywhere.
    public struct CancellationToken: Sendable {
        weak var request: DataStreamRequest?

        /// Cancels the request.
        public func cancel() { request?.cancel() }
    }

    /// Whether a failing serializer (a document that does not decode) cancels the request.
    /// A throwing handler always does.
    public let automaticallyCancelOnStreamError: Bool

    /// One registered handler or sequence.
    private struct Consumer {
        /// Turns a chunk into events and hands them over (stream queue).
        let parse: @Sendable (Data) -> Void
        /// Hands over what the parser still holds at the end (stream queue).
        let flush: @Sendable () -> Void
        /// Delivers the completion.
        let complete: @Sendable (Completion) -> Void
    }

    private struct StreamState {
        var consumers: [Consumer] = []
        var streamValidators: [@Sendable (URLRequest?, HTTPURLResponse) -> TinyFireError?] = []
        var validationError: TinyFireError?
        var paused = false
        /// Events handed over and not yet handled.
        var outstanding = 0
        /// The request finished and every parser was flushed: the completion goes out once
        /// `outstanding` reaches 0.
        var draining = false
        /// The completion, once delivered (for consumers added later).
        var completion: Completion?
        /// The first error a handler threw.
        var handlerError: TinyFireError?
        /// Chunks that arrived while the response head waited for its disposition.
        var held: [Data]?
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
        streamQueue = DispatchQueue(label: "org.tinyfire.stream", target: session.serializationQueue)
        super.init(session: session, convertible: convertible, interceptor: interceptor)
    }

    var token: CancellationToken { CancellationToken(request: self) }

    /// Bytes received and not yet handled, counted once per handler or sequence (bounded by
    /// `streamBufferLimit` per consumer plus what one read brings).
    var bufferedBytes: Int { pending.load(ordering: .relaxed) }

    // MARK: - Validation

    /// Adds a validation run on the response head, before any data is handed over; a failure
    /// ends the stream with that error.
    /// - Parameter validation: the check (request, response head).
    /// - Returns: the request.
    @discardableResult
    public func validate(_ validation: @escaping @Sendable (URLRequest?, HTTPURLResponse) -> ValidationResult) -> Self {
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
        register(deliveringTo: handlerDelivery(queue: queue, handler: stream)) { data, emit in
            emit(.success(data))
        } flush: { _ in
        }
        return self
    }

    /// Hands each chunk to `serializer` (on the serialization queue), and its value or error to
    /// `stream` on `queue` (Alamofire's form: one value per chunk as it arrived).
    /// - Parameters:
    ///   - serializer: turns a chunk into a value.
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - stream: the handler.
    /// - Returns: the request.
    @discardableResult
    public func responseStream<Serializer: DataStreamSerializer>(
        using serializer: Serializer, on queue: DispatchQueue? = nil, stream: @escaping Handler<Serializer.SerializedObject, TinyFireError>
    ) -> Self {
        register(deliveringTo: handlerDelivery(queue: queue, handler: stream)) { data, emit in
            emit(Self.serialize(data, with: serializer))
        } flush: { _ in
        }
        return self
    }

    /// Hands the body over as text (UTF-8; a character split between chunks is kept whole).
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - stream: the handler.
    /// - Returns: the request.
    @discardableResult
    public func responseStreamString(on queue: DispatchQueue? = nil, stream: @escaping Handler<String, Never>) -> Self {
        let (transform, flush) = stringParser()
        register(deliveringTo: handlerDelivery(queue: queue, handler: stream), transform: transform, flush: flush)
        return self
    }

    /// Decodes each value the server streams. With a `JSONDecoder` (the default) the body is
    /// cut into JSON documents wherever they end — one per chunk, several in one chunk, one
    /// across chunks, separated by newlines (JSON Lines, httpbin's /stream/N) or by nothing;
    /// a document larger than the session's `maxInMemoryBodyBytes` fails. Another decoder
    /// gets each chunk, as in Alamofire.
    /// - Parameters:
    ///   - type: the type of each value.
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - decoder: default `JSONDecoder()`.
    ///   - preprocessor: applied to each document before decoding; default passthrough.
    ///   - stream: the handler.
    /// - Returns: the request.
    @discardableResult
    public func responseStreamDecodable<T: Decodable & Sendable>(
        of type: T.Type = T.self, on queue: DispatchQueue? = nil, using decoder: any DataDecoder = JSONDecoder(),
        preprocessor: any DataPreprocessor = PassthroughPreprocessor(), stream: @escaping Handler<T, TinyFireError>
    ) -> Self {
        let (transform, flush) = decodableParser(
            DecodableStreamSerializer<T>(decoder: decoder, dataPreprocessor: preprocessor))
        register(deliveringTo: handlerDelivery(queue: queue, handler: stream), transform: transform, flush: flush)
        return self
    }

    // MARK: - Swift concurrency

    /// The body's chunks as an async sequence of stream events (ending with `.complete`).
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: cancel the request when the iterating task is cancelled
    ///     or the loop is left; default true.
    ///   - bufferingPolicy: `.unbounded` (the default) keeps every event and pauses reading once
    ///     `streamBufferLimit` bytes wait for the consumer; `.bufferingOldest(n)` /
    ///     `.bufferingNewest(n)` drop events beyond `n` as `AsyncStream` does (reading still
    ///     pauses at the byte bound).
    /// - Returns: the sequence.
    public func streamingData(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        bufferingPolicy: StreamOf<Stream<Data, Never>>.BufferingPolicy = .unbounded
    ) -> StreamOf<Stream<Data, Never>> {
        makeSequence(automaticallyCancelling: shouldAutomaticallyCancel, bufferingPolicy: bufferingPolicy) { delivery in
            register(deliveringTo: delivery) { data, emit in
                emit(.success(data))
            } flush: { _ in
            }
        }
    }

    /// The body as text, an async sequence of stream events.
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: cancel the request when iteration stops; default true.
    ///   - bufferingPolicy: as for `streamingData`; default unbounded, paused at the byte bound.
    /// - Returns: the sequence.
    public func streamingStrings(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        bufferingPolicy: StreamOf<Stream<String, Never>>.BufferingPolicy = .unbounded
    ) -> StreamOf<Stream<String, Never>> {
        makeSequence(automaticallyCancelling: shouldAutomaticallyCancel, bufferingPolicy: bufferingPolicy) { delivery in
            let (transform, flush) = stringParser()
            register(deliveringTo: delivery, transform: transform, flush: flush)
        }
    }

    /// The body decoded value by value (as `responseStreamDecodable`), an async sequence of
    /// stream events.
    /// - Parameters:
    ///   - type: the type of each value.
    ///   - shouldAutomaticallyCancel: cancel the request when iteration stops; default true.
    ///   - bufferingPolicy: as for `streamingData`; default unbounded, paused at the byte bound.
    /// - Returns: the sequence.
    public func streamingDecodables<T: Decodable & Sendable>(
        _ type: T.Type = T.self, automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        bufferingPolicy: StreamOf<Stream<T, TinyFireError>>.BufferingPolicy = .unbounded
    ) -> StreamOf<Stream<T, TinyFireError>> {
        streamingResponses(
            serializedUsing: DecodableStreamSerializer<T>(), automaticallyCancelling: shouldAutomaticallyCancel,
            bufferingPolicy: bufferingPolicy)
    }

    /// Each chunk's value from `serializer`, an async sequence of stream events. A
    /// `DecodableStreamSerializer` with a `JSONDecoder` gets whole JSON documents, as
    /// `responseStreamDecodable` does; any other serializer gets each chunk.
    /// - Parameters:
    ///   - serializer: turns a chunk into a value.
    ///   - shouldAutomaticallyCancel: cancel the request when iteration stops; default true.
    ///   - bufferingPolicy: as for `streamingData`; default unbounded, paused at the byte bound.
    /// - Returns: the sequence.
    public func streamingResponses<Serializer: DataStreamSerializer>(
        serializedUsing serializer: Serializer, automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        bufferingPolicy: StreamOf<Stream<Serializer.SerializedObject, TinyFireError>>.BufferingPolicy = .unbounded
    ) -> StreamOf<Stream<Serializer.SerializedObject, TinyFireError>> {
        makeSequence(automaticallyCancelling: shouldAutomaticallyCancel, bufferingPolicy: bufferingPolicy) { delivery in
            if let decodable = serializer as? any JSONFramedSerializer {
                let (transform, flush) = decodable.framedParser(
                    limit: session.configuration.maxInMemoryBodyBytes, of: Serializer.SerializedObject.self)
                register(deliveringTo: delivery, transform: transform, flush: flush)
            } else {
                register(deliveringTo: delivery) { data, emit in
                    emit(Self.serialize(data, with: serializer))
                } flush: { _ in
                }
            }
        }
    }

    /// The request as an async task: its streams as sequences, cancel, resume, suspend
    /// (Alamofire's `streamTask()`).
    /// - Returns: the task.
    public func streamTask() -> DataStreamTask { DataStreamTask(request: self) }

    // MARK: - Parsers

    private static func serialize<Serializer: DataStreamSerializer>(_ data: Data, with serializer: Serializer) -> Result<
        Serializer.SerializedObject, TinyFireError
    > {
        do {
            return .success(try serializer.serialize(data))
        } catch let error as TinyFireError {
            return .failure(error)
        } catch {
            return .failure(.responseSerializationFailed(reason: .customSerializationFailed(error: error)))
        }
    }

    private func stringParser() -> (
        transform: @Sendable (Data, (Result<String, Never>) -> Void) -> Void, flush: @Sendable ((Result<String, Never>) -> Void) -> Void
    ) {
        let decoder = Mutex(UTF8ChunkDecoder())
        return (
            { data, emit in
                let text = decoder.withLock { $0.decode(data) }
                if !text.isEmpty { emit(.success(text)) }
            },
            { emit in
                let rest = decoder.withLock { $0.finish() }
                if !rest.isEmpty { emit(.success(rest)) }
            }
        )
    }

    private func decodableParser<T: Decodable & Sendable>(_ serializer: DecodableStreamSerializer<T>) -> (
        transform: @Sendable (Data, (Result<T, TinyFireError>) -> Void) -> Void,
        flush: @Sendable ((Result<T, TinyFireError>) -> Void) -> Void
    ) {
        serializer.framedParser(limit: session.configuration.maxInMemoryBodyBytes, of: T.self)
    }

    // MARK: - Delivery

    /// Where a consumer's events go, and how it says it has handled one.
    struct Delivery<Success: Sendable, Failure: Error>: Sendable {
        /// Hands over an event; `handled` must be called once it has been dealt with.
        let deliver: @Sendable (Stream<Success, Failure>, _ handled: @escaping @Sendable () -> Void) -> Void
        /// Hands over the completion (the last event).
        let complete: @Sendable (Stream<Success, Failure>) -> Void
        /// The completion must wait until this consumer's events are handled (a handler on a
        /// queue, which may run them concurrently and may throw). A sequence keeps its events
        /// in order itself, and waiting for its reader would tie the handlers' completion to it.
        var completionWaits = true
    }

    /// A handler called on `queue`; an event is handled when the handler returns.
    private func handlerDelivery<Success: Sendable, Failure: Error>(queue: DispatchQueue?, handler: @escaping Handler<Success, Failure>)
        -> Delivery<Success, Failure>
    {
        let queue = queue ?? session.rootQueue
        return Delivery(
            deliver: { [weak self] stream, handled in
                queue.async { [weak self] in
                    do {
                        try handler(stream)
                    } catch {
                        self?.handlerFailed(error)
                    }
                    handled()
                }
            },
            complete: { stream in queue.async { try? handler(stream) } })
    }

    /// Cancels the request. Called from a stream handler after the body ended (the transfer
    /// is over, the completion not out yet), the request still completes as
    /// `.explicitlyCancelled` (or with the error it already had), as Alamofire's does.
    /// - Returns: the request.
    @discardableResult
    public override func cancel() -> Self {
        let completionPending = streamState.withLock { $0.completion == nil }
        let late =
            completionPending
            && protected.withLock { state -> Bool in
                guard state.pipelineFinished, state.state != .cancelled else { return false }
                state.state = .cancelled
                if state.error == nil { state.error = .explicitlyCancelled }
                return true
            }
        guard late else { return super.cancel() }
        eventMonitor?.requestDidCancel(self)
        return self
    }

    /// A serializer failed and `automaticallyCancelOnStreamError` is set: the request is
    /// cancelled; one whose transfer already ended finishes as cancelled all the same (its
    /// completion has not gone out: the results are parsed before it), as Alamofire's does.
    private func cancelForStreamError() {
        if isFinished {
            replaceError(.explicitlyCancelled)
            protected.withLock { $0.state = .cancelled }
        } else {
            cancel()
        }
    }

    /// A handler threw: the request is cancelled and the error is its outcome.
    private func handlerFailed(_ error: any Error) {
        let failure =
            (error as? TinyFireError) ?? .responseSerializationFailed(reason: .customSerializationFailed(error: error))
        let first = streamState.withLock { state -> Bool in
            guard state.handlerError == nil else { return false }
            state.handlerError = failure
            return true
        }
        guard first else { return }
        if isFinished { replaceError(failure) }
        cancel()
    }

    /// Registers a consumer: `transform` turns each chunk into results, `flush` emits what is
    /// left at the end; each result goes to `delivery`, then the completion.
    private func register<Success: Sendable, Failure: Error>(
        deliveringTo delivery: Delivery<Success, Failure>,
        transform: @escaping @Sendable (Data, (Result<Success, Failure>) -> Void) -> Void,
        flush: @escaping @Sendable ((Result<Success, Failure>) -> Void) -> Void
    ) {
        let token = self.token
        let cancelOnError = automaticallyCancelOnStreamError
        // Hands over one chunk's results; its bytes count until the last of them is handled.
        let emitAll: @Sendable ([Result<Success, Failure>], Int) -> Void = { [weak self] results, bytes in
            guard let self else { return }
            guard !results.isEmpty else {
                release(bytes)
                return
            }
            let counted = delivery.completionWaits
            if counted { streamState.withLock { $0.outstanding += results.count } }
            for (index, result) in results.enumerated() {
                if case .failure = result, cancelOnError { cancelForStreamError() }
                let weight = index == results.count - 1 ? bytes : 0
                // Holds the request until the event is handled: its completion must still go out.
                delivery.deliver(Stream(event: .stream(result), token: token)) { self.handled(weight, counted: counted) }
            }
        }
        let consumer = Consumer(
            parse: { data in
                var results: [Result<Success, Failure>] = []
                transform(data) { results.append($0) }
                emitAll(results, data.count)
            },
            flush: {
                var results: [Result<Success, Failure>] = []
                flush { results.append($0) }
                emitAll(results, 0)
            },
            complete: { completion in delivery.complete(Stream(event: .complete(completion), token: token)) })
        let finished = streamState.withLock { state -> Completion? in
            if state.completion == nil { state.consumers.append(consumer) }
            return state.completion
        }
        if let finished {
            // Added after the end: it gets the completion only.
            delivery.complete(Stream(event: .complete(finished), token: token))
            return
        }
        appendResponseSerializer(inline: true) { [self] in
            responseSerializerDidComplete {}
        }
    }

    /// An event was handled: its bytes no longer count, and the completion may go out.
    private func handled(_ bytes: Int, counted: Bool) {
        release(bytes)
        guard counted else { return }
        let completeNow = streamState.withLock { state -> Bool in
            state.outstanding -= 1
            return state.outstanding == 0 && state.draining
        }
        if completeNow { streamQueue.async { [self] in deliverCompletion() } }
    }

    private func release(_ bytes: Int) {
        guard bytes > 0 else { return }
        let left = pending.wrappingSubtract(bytes, ordering: .relaxed).newValue
        if left <= pauseThreshold / 2 { setPaused(false) }
    }

    /// Reading pauses above `streamBufferLimit` bytes per consumer.
    private var pauseThreshold: Int {
        Self.streamBufferLimit * max(1, streamState.withLock { $0.consumers.count })
    }

    /// On the stream queue: sends the completion to every consumer, once.
    private func deliverCompletion() {
        let snapshot = snapshot
        let (consumers, completion) = streamState.withLock { state -> ([Consumer], Completion?) in
            guard state.draining, state.completion == nil, state.outstanding == 0 else { return ([], nil) }
            let completion = Completion(
                request: snapshot.request, response: snapshot.response, metrics: snapshot.metrics,
                error: state.handlerError ?? snapshot.error)
            state.completion = completion
            // Nothing more goes to them: released, so no sequence left unread keeps the request.
            defer { state.consumers = [] }
            return (state.consumers, completion)
        }
        guard let completion else { return }
        for consumer in consumers { consumer.complete(completion) }
    }

    private func makeSequence<Success: Sendable, Failure: Error>(
        automaticallyCancelling: Bool, bufferingPolicy: StreamOf<Stream<Success, Failure>>.BufferingPolicy,
        register: (Delivery<Success, Failure>) -> Void
    ) -> StreamOf<Stream<Success, Failure>> {
        let buffer = EventBuffer<Stream<Success, Failure>>(policy: bufferingPolicy)
        register(
            Delivery(
                deliver: { stream, handled in buffer.append(stream, handled: handled) },
                complete: { stream in
                    buffer.append(stream, handled: {})
                    buffer.finish()
                }, completionWaits: false))
        let token = self.token
        return StreamOf(buffer: buffer) {
            if automaticallyCancelling { token.cancel() }
        }
    }

    // MARK: - Engine hooks

    override func makeSink(for response: HTTPURLResponse, expectedLength: UInt64?) throws(SinkError) -> any OutputSink {
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

    override func finalError(_ error: TinyFireError?) -> TinyFireError? {
        streamState.withLock { $0.handlerError } ?? error
    }

    override func didFinishPipeline() {
        streamQueue.async { [self] in
            let consumers = streamState.withLock { $0.consumers }
            for consumer in consumers { consumer.flush() }
            streamState.withLock { $0.draining = true }
            deliverCompletion()
        }
    }

    override func wantsFlowPaused() -> Bool {
        super.wantsFlowPaused() || streamState.withLock { $0.paused }
    }

    override func bodyAllowed() {
        let held = streamState.withLock { state -> [Data] in
            defer { state.held = nil }
            return state.held ?? []
        }
        for data in held { hand(data) }
    }

    /// A chunk arrived (loop thread): copied once, then handed to every consumer in order,
    /// or held while the response head waits for its disposition (at most what one read
    /// brought: reading paused with the head).
    fileprivate func received(_ bytes: UnsafeRawBufferPointer) {
        let data = Data(bytes)
        let holding = streamState.withLock { state -> Bool in
            guard state.held != nil || awaitingDisposition else { return false }
            state.held = (state.held ?? []) + [data]
            return true
        }
        if !holding { hand(data) }
    }

    private func hand(_ data: Data) {
        let consumers = streamState.withLock { $0.consumers }
        let weight = data.count * max(1, consumers.count)
        let total = pending.wrappingAdd(weight, ordering: .relaxed).newValue
        if total > Self.streamBufferLimit * max(1, consumers.count) { setPaused(true) }
        streamQueue.async { [self] in
            if consumers.isEmpty { release(weight) }
            for consumer in consumers { consumer.parse(data) }
        }
    }

    private func setPaused(_ paused: Bool) {
        let changed = streamState.withLock { state -> Bool in
            guard state.paused != paused else { return false }
            state.paused = paused
            return true
        }
        if changed { updateFlowPause() }
    }
}

/// Forwards body chunks to a `DataStreamRequest`.
private final class StreamSink: OutputSink {
    private weak var request: DataStreamRequest?

    init(request: DataStreamRequest) { self.request = request }

    func write(_ bytes: UnsafeRawBufferPointer) throws(SinkError) { request?.received(bytes) }
    func finish() throws(SinkError) {}
    var output: SinkOutput { .none }
    func discard() {}
}

/// A `DataStreamRequest` as an async task (Alamofire's `DataStreamTask`): each call makes a
/// new sequence of the request's stream events.
public struct DataStreamTask: Sendable {
    /// The sequences this task makes.
    public typealias Stream<Success: Sendable, Failure: Error> = StreamOf<DataStreamRequest.Stream<Success, Failure>>

    /// The request.
    public let request: DataStreamRequest

    init(request: DataStreamRequest) { self.request = request }

    /// The chunks; see `DataStreamRequest.streamingData`.
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: cancel the request when iteration stops; default true.
    ///   - bufferingPolicy: default unbounded, paused at the byte bound.
    /// - Returns: the sequence.
    public func streamingData(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true, bufferingPolicy: Stream<Data, Never>.BufferingPolicy = .unbounded
    ) -> Stream<Data, Never> {
        request.streamingData(automaticallyCancelling: shouldAutomaticallyCancel, bufferingPolicy: bufferingPolicy)
    }

    /// The text; see `DataStreamRequest.streamingStrings`.
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: cancel the request when iteration stops; default true.
    ///   - bufferingPolicy: default unbounded, paused at the byte bound.
    /// - Returns: the sequence.
    public func streamingStrings(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true, bufferingPolicy: Stream<String, Never>.BufferingPolicy = .unbounded
    ) -> Stream<String, Never> {
        request.streamingStrings(automaticallyCancelling: shouldAutomaticallyCancel, bufferingPolicy: bufferingPolicy)
    }

    /// Decoded values; see `DataStreamRequest.streamingDecodables`.
    /// - Parameters:
    ///   - type: the type of each value.
    ///   - shouldAutomaticallyCancel: cancel the request when iteration stops; default true.
    ///   - bufferingPolicy: default unbounded, paused at the byte bound.
    /// - Returns: the sequence.
    public func streamingDecodables<T: Decodable & Sendable>(
        _ type: T.Type = T.self, automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        bufferingPolicy: Stream<T, TinyFireError>.BufferingPolicy = .unbounded
    ) -> Stream<T, TinyFireError> {
        request.streamingDecodables(T.self, automaticallyCancelling: shouldAutomaticallyCancel, bufferingPolicy: bufferingPolicy)
    }

    /// Values from a serializer; see `DataStreamRequest.streamingResponses`.
    /// - Parameters:
    ///   - serializer: turns a chunk into a value.
    ///   - shouldAutomaticallyCancel: cancel the request when iteration stops; default true.
    ///   - bufferingPolicy: default unbounded, paused at the byte bound.
    /// - Returns: the sequence.
    public func streamingResponses<Serializer: DataStreamSerializer>(
        serializedUsing serializer: Serializer, automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
        bufferingPolicy: Stream<Serializer.SerializedObject, TinyFireError>.BufferingPolicy = .unbounded
    ) -> Stream<Serializer.SerializedObject, TinyFireError> {
        request.streamingResponses(
            serializedUsing: serializer, automaticallyCancelling: shouldAutomaticallyCancel, bufferingPolicy: bufferingPolicy)
    }

    /// Cancels the request.
    public func cancel() { request.cancel() }
    /// Resumes the request.
    public func resume() { request.resume() }
    /// Suspends the request.
    public func suspend() { request.suspend() }
}

/// An async sequence of stream events (Alamofire's `StreamOf`). Iterating it drives nothing by
/// itself: the request runs; an event counts as handled once `next()` returned it, which is
/// what lets reading pause while the consumer lags. Leaving the loop (the iterator goes away)
/// or cancelling the iterating task ends it, and cancels the request when it was made with
/// `automaticallyCancelling: true`.
public struct StreamOf<Element: Sendable>: AsyncSequence, Sendable {
    /// How many unread events the sequence keeps: `.unbounded` (bounded by bytes instead),
    /// `.bufferingOldest(n)` or `.bufferingNewest(n)`.
    public typealias BufferingPolicy = AsyncStream<Element>.Continuation.BufferingPolicy

    private let buffer: EventBuffer<Element>
    private let onTermination: @Sendable () -> Void

    init(buffer: EventBuffer<Element>, onTermination: @escaping @Sendable () -> Void) {
        self.buffer = buffer
        self.onTermination = onTermination
    }

    /// An iterator; one at a time.
    /// - Returns: the iterator.
    public func makeAsyncIterator() -> Iterator { Iterator(buffer: buffer, onTermination: onTermination) }

    /// Takes events in order; its end (the loop is left) ends the sequence.
    public struct Iterator: AsyncIteratorProtocol {
        private final class Lifetime: Sendable {
            let buffer: EventBuffer<Element>
            let onTermination: @Sendable () -> Void
            init(buffer: EventBuffer<Element>, onTermination: @escaping @Sendable () -> Void) {
                self.buffer = buffer
                self.onTermination = onTermination
            }
            deinit { if buffer.terminate() { onTermination() } }
        }

        private let lifetime: Lifetime

        init(buffer: EventBuffer<Element>, onTermination: @escaping @Sendable () -> Void) {
            lifetime = Lifetime(buffer: buffer, onTermination: onTermination)
        }

        /// The next event, or nil after the completion (or once the task is cancelled).
        /// - Returns: the event.
        public mutating func next() async -> Element? {
            let lifetime = self.lifetime
            return await lifetime.buffer.next { lifetime.onTermination() }
        }
    }
}

/// The events between a request and the task iterating its `StreamOf`: a queue that hands each
/// event to the waiting `next()` and reports it handled then.
final class EventBuffer<Element: Sendable>: Sendable {
    private struct State {
        var items: [(element: Element, handled: @Sendable () -> Void)] = []
        var head = 0
        var waiter: CheckedContinuation<Element?, Never>?
        var finished = false
        var terminated = false
        var count: Int { items.count - head }
    }

    private let policy: AsyncStream<Element>.Continuation.BufferingPolicy
    private let state = Mutex(State())

    init(policy: AsyncStream<Element>.Continuation.BufferingPolicy) { self.policy = policy }

    /// Adds an event (it is dropped, and counts as handled, once the consumer is gone or the
    /// buffering policy says so).
    func append(_ element: Element, handled: @escaping @Sendable () -> Void) {
        var done: [@Sendable () -> Void] = []
        var resume: (CheckedContinuation<Element?, Never>, Element)?
        state.withLock { state in
            if state.terminated || state.finished {
                done.append(handled)
            } else if let waiter = state.waiter {
                state.waiter = nil
                resume = (waiter, element)
                done.append(handled)
            } else {
                switch policy {
                case .bufferingOldest(let limit) where state.count >= limit:
                    done.append(handled)
                    return
                case .bufferingNewest(let limit) where state.count >= limit:
                    if limit == 0 {
                        done.append(handled)
                        return
                    }
                    done.append(state.items[state.head].handled)
                    state.head += 1
                default: break
                }
                state.items.append((element, handled))
            }
        }
        if let (waiter, element) = resume { waiter.resume(returning: element) }
        for handled in done { handled() }
    }

    /// No more events after those buffered.
    func finish() {
        let waiter = state.withLock { state -> CheckedContinuation<Element?, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.count == 0 ? state.waiter : nil
        }
        waiter?.resume(returning: nil)
    }

    /// The consumer is gone: what is buffered is released. Returns true the first time.
    func terminate() -> Bool {
        let (first, released, waiter) = state.withLock { state -> (Bool, [@Sendable () -> Void], CheckedContinuation<Element?, Never>?) in
            guard !state.terminated else { return (false, [], nil) }
            state.terminated = true
            let released = state.items[state.head...].map(\.handled)
            state.items = []
            state.head = 0
            defer { state.waiter = nil }
            return (!state.finished || !released.isEmpty, released, state.waiter)
        }
        waiter?.resume(returning: nil)
        for handled in released { handled() }
        return first
    }

    /// The next event; nil at the end or when the task is cancelled (then `onCancel` runs).
    func next(onCancel: @escaping @Sendable () -> Void) async -> Element? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Element?, Never>) in
                var ready: (Element, @Sendable () -> Void)?
                let endNow = state.withLock { state -> Bool in
                    if state.count > 0 {
                        let item = state.items[state.head]
                        state.head += 1
                        if state.head > 64 && state.head * 2 > state.items.count {
                            state.items.removeFirst(state.head)
                            state.head = 0
                        }
                        ready = (item.element, item.handled)
                        return false
                    }
                    if state.finished || state.terminated { return true }
                    state.waiter = continuation
                    return false
                }
                if let (element, handled) = ready {
                    continuation.resume(returning: element)
                    handled()
                } else if endNow {
                    continuation.resume(returning: nil)
                }
            }
        } onCancel: {
            if terminate() { onCancel() }
        }
    }
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

/// Cuts a byte stream into JSON documents wherever they end, whatever the chunks: objects and
/// arrays by their brackets (strings and escapes respected), strings by their quotes, numbers
/// and literals by the whitespace or bracket after them. Whitespace (newlines included) and
/// the JSON text sequence separator (0x1E) between documents are skipped. A document longer
/// than `limit` bytes is reported as one failure and skipped. Memory: at most `limit` bytes.
struct JSONDocumentSplitter {
    let limit: Int
    private var document: [UInt8] = []
    private var started = false
    private var depth = 0
    private var inString = false
    private var escaped = false
    /// A number or literal at the top level: it ends at the next delimiter.
    private var bare = false
    private var oversized = false

    init(limit: Int) { self.limit = limit }

    /// The documents `data` completes, in order (nil for one that exceeded the limit).
    mutating func split(_ data: Data) -> [[UInt8]?] {
        var out: [[UInt8]?] = []
        data.withUnsafeBytes { bytes in
            for byte in bytes { feed(byte, into: &out) }
        }
        return out
    }

    /// What is left at the end: a last bare value, or an incomplete document (which fails to
    /// decode, as it should).
    mutating func finish() -> [UInt8]?? {
        guard started else { return .none }
        defer { reset() }
        return oversized ? .some(nil) : .some(document)
    }

    private mutating func feed(_ byte: UInt8, into out: inout [[UInt8]?]) {
        if !started {
            if Self.isSeparator(byte) { return }
            started = true
            switch byte {
            case UInt8(ascii: "{"), UInt8(ascii: "["): depth = 1
            case UInt8(ascii: "\""): inString = true
            default: bare = true
            }
            append(byte)
            return
        }
        if bare {
            if Self.isSeparator(byte) || byte == UInt8(ascii: "{") || byte == UInt8(ascii: "[") || byte == UInt8(ascii: "\"") {
                emit(into: &out)
                feed(byte, into: &out)
                return
            }
            append(byte)
            return
        }
        append(byte)
        if inString {
            if escaped {
                escaped = false
            } else if byte == UInt8(ascii: "\\") {
                escaped = true
            } else if byte == UInt8(ascii: "\"") {
                inString = false
                if depth == 0 { emit(into: &out) }
            }
            return
        }
        switch byte {
        case UInt8(ascii: "\""): inString = true
        case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
        case UInt8(ascii: "}"), UInt8(ascii: "]"):
            depth -= 1
            if depth == 0 { emit(into: &out) }
        default: break
        }
    }

    private mutating func append(_ byte: UInt8) {
        guard !oversized else { return }
        if document.count >= limit {
            oversized = true
            document = []
            return
        }
        document.append(byte)
    }

    private mutating func emit(into out: inout [[UInt8]?]) {
        out.append(oversized ? nil : document)
        reset()
    }

    private mutating func reset() {
        document = []
        started = false
        depth = 0
        inString = false
        escaped = false
        bare = false
        oversized = false
    }

    private static func isSeparator(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 || byte == 0x1E
    }

    /// The failure for a document over the limit.
    struct DocumentTooLarge: Error, CustomStringConvertible {
        let limit: Int
        var description: String { "a streamed JSON document exceeds \(limit) bytes" }
    }
}

// MARK: - Stream serializers

/// Turns a chunk of a streamed body into a value (Alamofire's `DataStreamSerializer`).
public protocol DataStreamSerializer: Sendable {
    /// The value type.
    associatedtype SerializedObject: Sendable

    /// Serializes one chunk.
    /// - Parameter data: the chunk.
    /// - Returns: the value.
    /// - Throws: what serialization failed with (handed on as `.responseSerializationFailed`).
    func serialize(_ data: Data) throws -> SerializedObject
}

/// Decodes streamed values. Used by `responseStream(using:)` it decodes each chunk, as in
/// Alamofire; used by `streamingDecodables`/`streamingResponses` with a `JSONDecoder` it
/// decodes each JSON document, wherever the chunks cut them.
public struct DecodableStreamSerializer<T: Decodable & Sendable>: DataStreamSerializer {
    /// The decoder.
    public let decoder: any DataDecoder
    /// Applied to the data before decoding.
    public let dataPreprocessor: any DataPreprocessor

    /// Creates the serializer.
    /// - Parameters:
    ///   - decoder: default `JSONDecoder()`.
    ///   - dataPreprocessor: default passthrough.
    public init(decoder: any DataDecoder = JSONDecoder(), dataPreprocessor: any DataPreprocessor = PassthroughPreprocessor()) {
        self.decoder = decoder
        self.dataPreprocessor = dataPreprocessor
    }

    /// Decodes `data`.
    /// - Parameter data: the bytes.
    /// - Returns: the value.
    /// - Throws: `.responseSerializationFailed(.decodingFailed)`.
    public func serialize(_ data: Data) throws -> T {
        let processed = try dataPreprocessor.preprocess(data)
        do {
            return try decoder.decode(T.self, from: processed)
        } catch {
            throw TinyFireError.responseSerializationFailed(reason: .decodingFailed(error: error))
        }
    }
}

/// Hands each chunk on as it is.
public struct PassthroughStreamSerializer: DataStreamSerializer {
    /// Creates the serializer.
    public init() {}

    /// Returns `data`.
    /// - Parameter data: the chunk.
    /// - Returns: the chunk.
    public func serialize(_ data: Data) throws -> Data { data }
}

/// Decodes each chunk as UTF-8 (a character split between chunks becomes replacement
/// characters, as in Alamofire; `responseStreamString` keeps it whole).
public struct StringStreamSerializer: DataStreamSerializer {
    /// Creates the serializer.
    public init() {}

    /// Decodes `data`.
    /// - Parameter data: the chunk.
    /// - Returns: the text.
    public func serialize(_ data: Data) throws -> String { String(decoding: data, as: UTF8.self) }
}

extension DataStreamSerializer {
    /// A `DecodableStreamSerializer`.
    /// - Parameters:
    ///   - type: the value type.
    ///   - decoder: default `JSONDecoder()`.
    ///   - dataPreprocessor: default passthrough.
    /// - Returns: the serializer.
    public static func decodable<T: Decodable & Sendable>(
        of type: T.Type, decoder: any DataDecoder = JSONDecoder(), dataPreprocessor: any DataPreprocessor = PassthroughPreprocessor()
    ) -> Self where Self == DecodableStreamSerializer<T> {
        DecodableStreamSerializer<T>(decoder: decoder, dataPreprocessor: dataPreprocessor)
    }
}

extension DataStreamSerializer where Self == PassthroughStreamSerializer {
    /// A `PassthroughStreamSerializer`.
    public static var passthrough: PassthroughStreamSerializer { PassthroughStreamSerializer() }
}

extension DataStreamSerializer where Self == StringStreamSerializer {
    /// A `StringStreamSerializer`.
    public static var string: StringStreamSerializer { StringStreamSerializer() }
}

/// A serializer that takes whole JSON documents rather than chunks.
protocol JSONFramedSerializer {
    func framedParser<Value: Sendable>(limit: Int, of type: Value.Type) -> (
        transform: @Sendable (Data, (Result<Value, TinyFireError>) -> Void) -> Void,
        flush: @Sendable ((Result<Value, TinyFireError>) -> Void) -> Void
    )
}

extension DecodableStreamSerializer: JSONFramedSerializer {
    /// Cuts the stream into JSON documents and decodes each (only with a `JSONDecoder`;
    /// otherwise each chunk).
    func framedParser<Value: Sendable>(limit: Int, of type: Value.Type) -> (
        transform: @Sendable (Data, (Result<Value, TinyFireError>) -> Void) -> Void,
        flush: @Sendable ((Result<Value, TinyFireError>) -> Void) -> Void
    ) {
        @Sendable func decode(_ document: [UInt8]?) -> Result<Value, TinyFireError> {
            guard let document else {
                return .failure(
                    .responseSerializationFailed(
                        reason: .customSerializationFailed(error: JSONDocumentSplitter.DocumentTooLarge(limit: limit))))
            }
            do {
                // Value is T here: the only caller asks for Serializer.SerializedObject.
                guard let value = try serialize(Data(document)) as? Value else {
                    return .failure(.responseSerializationFailed(reason: .inputDataNilOrZeroLength))
                }
                return .success(value)
            } catch let error as TinyFireError {
                return .failure(error)
            } catch {
                return .failure(.responseSerializationFailed(reason: .decodingFailed(error: error)))
            }
        }
        guard decoder is JSONDecoder else {
            return ({ data, emit in emit(decode(Array(data))) }, { _ in })
        }
        let splitter = Mutex(JSONDocumentSplitter(limit: limit))
        return (
            { data, emit in
                for document in splitter.withLock({ $0.split(data) }) { emit(decode(document)) }
            },
            { emit in
                if let last = splitter.withLock({ $0.finish() }) { emit(decode(last)) }
            }
        )
    }
}
