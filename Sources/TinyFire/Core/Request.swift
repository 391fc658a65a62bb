import Dispatch
import HTTPTypes
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The base of every request type, as in Alamofire: lifecycle (`resume`, `cancel`), state,
/// the final request/response heads, metrics and error.
///
/// Thread-safe: mutable state lives in one struct behind a `Mutex`; handlers are never called
/// while it is held.
public class Request: @unchecked Sendable {
    /// A request's lifecycle state.
    public enum State: Sendable, Equatable {
        /// Created, not started.
        case initialized
        /// Started (by `resume()` or by adding a response handler).
        case resumed
        /// `cancel()` was called.
        case cancelled
        /// Completed, successfully or not.
        case finished
    }

    struct MutableState {
        var state: State = .initialized
        var request: HTTPRequest?
        var response: HTTPResponse?
        var metrics: TransferMetrics?
        var output: Result<SinkOutput, TinyFireError>?
        var finishHandlers: [@Sendable () -> Void] = []
        var httpResponseHandlers: [(DispatchQueue, @Sendable (HTTPResponse) -> Void)] = []
    }

    /// A unique identifier (a version-4 UUID).
    public let id = RequestIdentifiers.next()
    /// The session that made the request.
    public let session: Session
    let spec: Result<RequestSpec, TinyFireError>
    let protected = Mutex(MutableState())

    init(session: Session, spec: Result<RequestSpec, TinyFireError>) {
        self.session = session
        self.spec = spec
    }

    /// The current state.
    public var state: State { protected.withLock { $0.state } }
    /// Whether `cancel()` was called.
    public var isCancelled: Bool { state == .cancelled }
    /// Whether the request completed.
    public var isFinished: Bool { protected.withLock { $0.output != nil } }
    /// The last request head sent (after redirects), once sent.
    public var request: HTTPRequest? { protected.withLock { $0.request } }
    /// The final response head, once received.
    public var response: HTTPResponse? { protected.withLock { $0.response } }
    /// Timings and counts, once finished.
    public var metrics: TransferMetrics? { protected.withLock { $0.metrics } }
    /// The error, if the request failed.
    public var error: TinyFireError? {
        protected.withLock { state in
            if case .failure(let error) = state.output { return error }
            return nil
        }
    }

    /// Starts the request if it has not started. Requests start on their own when a response
    /// handler is added and the session's `startRequestsImmediately` is true.
    /// - Returns: the request.
    @discardableResult
    public func resume() -> Self {
        let start = protected.withLock { state -> Bool in
            guard state.state == .initialized else { return false }
            state.state = .resumed
            return true
        }
        guard start else { return self }
        switch spec {
        case .success(let spec): session.engine.start(spec, owner: self)
        case .failure(let error): complete(.failure(error), request: nil, response: nil, metrics: TransferMetrics())
        }
        return self
    }

    /// Cancels the request; it finishes with `TinyFireError.explicitlyCancelled`. A request
    /// that never started finishes at once.
    /// - Returns: the request.
    @discardableResult
    public func cancel() -> Self {
        let previous = protected.withLock { state -> State in
            let previous = state.state
            if previous == .initialized || previous == .resumed { state.state = .cancelled }
            return previous
        }
        switch previous {
        case .initialized:
            complete(.failure(.explicitlyCancelled), request: nil, response: nil, metrics: TransferMetrics())
        case .resumed:
            session.engine.cancel(self)
        case .cancelled, .finished:
            break
        }
        return self
    }

    /// Calls `handler` on `queue` when the final response head arrives, before the body.
    /// - Parameters:
    ///   - queue: where to call it; default `.main` is not used on Linux daemons, so the
    ///     session's root queue is the default.
    ///   - handler: receives the response head.
    /// - Returns: the request.
    @discardableResult
    public func onHTTPResponse(on queue: DispatchQueue? = nil, perform handler: @escaping @Sendable (HTTPResponse) -> Void) -> Self {
        protected.withLock { $0.httpResponseHandlers.append((queue ?? session.rootQueue, handler)) }
        return self
    }

    /// Registers work to run when the request finishes, and starts it if the session says so.
    func appendFinishHandler(_ handler: @escaping @Sendable () -> Void) {
        let runNow = protected.withLock { state -> Bool in
            if state.output != nil { return true }
            state.finishHandlers.append(handler)
            return false
        }
        if runNow {
            handler()
        } else if session.startRequestsImmediately {
            resume()
        }
    }

    /// Records the outcome and runs the finish handlers (once).
    func complete(
        _ result: Result<SinkOutput, TinyFireError>, request: HTTPRequest?, response: HTTPResponse?,
        metrics: TransferMetrics
    ) {
        let handlers = protected.withLock { state -> [@Sendable () -> Void] in
            guard state.output == nil else { return [] }
            state.output = result
            state.request = request ?? state.request
            state.response = response ?? state.response
            state.metrics = metrics
            if state.state != .cancelled { state.state = .finished }
            let handlers = state.finishHandlers
            state.finishHandlers = []
            return handlers
        }
        for handler in handlers { handler() }
    }

    /// The outcome, once finished.
    var output: Result<SinkOutput, TinyFireError>? { protected.withLock { $0.output } }

    /// A consistent snapshot of the request's outcome for building a response value.
    struct Outcome<Value> {
        var request: HTTPRequest?
        var response: HTTPResponse?
        var metrics: TransferMetrics?
        /// What the sink produced, when it is of the kind `extract` looks for.
        var value: Value?
        var result: Result<Value?, TinyFireError>
    }

    /// Snapshots request, response, metrics and result; `extract` picks the value out of the
    /// sink's output (nil when the body went elsewhere).
    func outcome<Value>(_ extract: (SinkOutput) -> Value?) -> Outcome<Value> {
        let (request, response, metrics, output) = protected.withLock { ($0.request, $0.response, $0.metrics, $0.output) }
        switch output {
        case .success(let sinkOutput):
            let value = extract(sinkOutput)
            return Outcome(request: request, response: response, metrics: metrics, value: value, result: .success(value))
        case .failure(let error):
            return Outcome(request: request, response: response, metrics: metrics, value: nil, result: .failure(error))
        case nil:
            return Outcome(request: request, response: response, metrics: metrics, value: nil, result: .failure(.explicitlyCancelled))
        }
    }

    // MARK: - TransferOwner

    func makeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> ResponseBodySink {
        DiscardSink()
    }
}

extension Request: TransferOwner {
    func transferMakeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> ResponseBodySink {
        try makeSink(for: response, expectedLength: expectedLength)
    }

    func transferDidReceiveResponse(_ response: HTTPResponse, request: HTTPRequest) {
        let handlers = protected.withLock { state in
            state.response = response
            state.request = request
            return state.httpResponseHandlers
        }
        for (queue, handler) in handlers { queue.async { handler(response) } }
    }

    func transferDidFinish(
        _ result: Result<SinkOutput, TinyFireError>, request: HTTPRequest?, response: HTTPResponse?,
        metrics: TransferMetrics
    ) {
        complete(result, request: request, response: response, metrics: metrics)
    }
}

/// Request identifiers without a system call each: a per-process random seed (one getrandom)
/// and a counter, mixed with SplitMix64 into version-4 UUIDs.
enum RequestIdentifiers {
    private static let seed: (UInt64, UInt64) = {
        var generator = SystemRandomNumberGenerator()
        return (generator.next(), generator.next())
    }()
    private static let counter = Atomic<UInt64>(0)

    static func next() -> UUID {
        let n = counter.wrappingAdd(1, ordering: .relaxed).newValue
        // Bytes 0-7 come from `high`, 8-15 from `low`, little-endian; byte 6 carries the
        // version (4), byte 8 the RFC 4122 variant.
        let high = mix(seed.0 &+ n) & ~(0xF0 << 48) | (0x40 << 48)
        let low = mix(seed.1 ^ n) & ~0xC0 | 0x80
        let words = (high.littleEndian, low.littleEndian)
        return UUID(uuid: withUnsafeBytes(of: words) { $0.loadUnaligned(as: uuid_t.self) })
    }

    private static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
