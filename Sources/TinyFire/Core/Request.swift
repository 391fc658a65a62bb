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

    /// A unique identifier.
    public let id = UUID()
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
