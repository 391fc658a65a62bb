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

/// The base of every request type, as in Alamofire: the pipeline (create → adapt → transfer →
/// validate → retry or finish → serialize), the lifecycle (`resume`, `suspend`, `cancel`), and
/// what the request produced.
///
/// Thread-safe: mutable state lives in one struct behind a `Mutex`; no handler, adapter,
/// retrier or monitor is called while it is held.
public class Request: @unchecked Sendable {
    /// A request's lifecycle state.
    public enum State: Sendable, Equatable {
        /// Created, not started.
        case initialized
        /// Started (by `resume()` or by adding a response handler).
        case resumed
        /// Paused by `suspend()`: no bytes are read until `resume()`.
        case suspended
        /// `cancel()` was called.
        case cancelled
        /// Completed, successfully or not.
        case finished
    }

    struct MutableState {
        var state: State = .initialized
        /// Interceptors added after creation (`interceptor(_:)`, `adapt(using:)`,
        /// `retry(using:)`), after the session's and the request's own, in the order added.
        var addedInterceptors: [any RequestInterceptor] = []
        /// Whether the setup (building and adapting the request) runs before `resume()`
        /// (`Session.RequestSetup.eager`): its result waits in `pendingSpec`.
        var eagerSetup = false
        var initialRequest: URLRequest?
        var requests: [URLRequest] = []
        var performedRequests: [URLRequest] = []
        /// The last head sent, as its parts.
        var sentHead: SentRequestHead?
        var response: HTTPURLResponse?
        var allMetrics: [TransferMetrics] = []
        var output: SinkOutput?
        /// Why this request's trust evaluator or redirect handler refused (the engine reports
        /// only that the owner refused).
        var refusal: TinyFireError?
        var error: TinyFireError?
        var retryCount = 0
        var transferRunning = false
        var pendingSpec: RequestSpec?
        var pipelineFinished = false
        var redirectHandler: (any RedirectHandler)?
        var credential: (user: String, password: String)?
        var answeredChallenge = false

        var validators: [@Sendable (URLRequest?, HTTPURLResponse, Data?) -> TinyFireError?] = []
        var responseSerializers: [(run: @Sendable () -> Void, inline: Bool)] = []
        var nextSerializer = 0
        var serializerCompletions: [@Sendable () -> Void] = []
        var serializersRunning = false

        var cURLHandlers: [(DispatchQueue?, @Sendable (String) -> Void)] = []
        var urlRequestHandlers: [(DispatchQueue, @Sendable (URLRequest) -> Void)] = []
        /// The library's own observers of response heads (`httpResponses()`).
        var httpResponseObservers: [(DispatchQueue, @Sendable (HTTPURLResponse) -> Void)] = []
        /// The app's `onHTTPResponse` handler: the last one set.
        var httpResponseHandler: HTTPResponseHandler?
        /// A response head waits for the handler's disposition: its body is held back.
        var awaitingDisposition = false
        /// Counts response heads handed to the handler: an answer is for one head only.
        var dispositionGeneration = 0
        /// The transfer ended while its head waited for the disposition.
        var completionAwaitingDisposition = false
        var downloadProgress = ProgressReporter()
        var uploadProgress = ProgressReporter()
        /// Bytes already on disk before this attempt's body (a resumed download).
        var downloadProgressBase: UInt64 = 0
    }

    /// A unique identifier (a version-4 UUID).
    public let id = RequestIdentifiers.next()
    /// The session that made the request.
    public let session: Session
    /// The request's own interceptor (the session's runs first).
    public let interceptor: (any RequestInterceptor)?
    let convertible: any URLRequestConvertible
    let protected = Mutex(MutableState())
    /// The running transfer's sink, whose output is read when the transfer succeeds
    /// (loop-confined: made and read by the engine's calls).
    nonisolated(unsafe) private var transferSink: (any OutputSink)?
    /// Set once any progress handler exists, so the I/O thread skips the lock otherwise.
    let wantsProgress = Atomic<Bool>(false)

    /// The session's interceptor, then the request's, combined once: adapts every attempt and
    /// decides retries.
    private let createdInterceptor: (any RequestInterceptor)?

    /// The interceptors in effect: the session's, the request's own, then those added since.
    private var combinedInterceptor: (any RequestInterceptor)? {
        let added = protected.withLock { $0.addedInterceptors }
        guard !added.isEmpty else { return createdInterceptor }
        return Interceptor(interceptors: (createdInterceptor.map { [$0] } ?? []) + added)
    }

    init(session: Session, convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)?) {
        self.session = session
        self.convertible = convertible
        self.interceptor = interceptor
        switch (session.interceptor, interceptor) {
        case (nil, nil): createdInterceptor = nil
        case (let one?, nil), (nil, let one?): createdInterceptor = one
        case (let sessionInterceptor?, let requestInterceptor?):
            createdInterceptor = Interceptor(interceptors: [sessionInterceptor, requestInterceptor])
        }
        if session.requestSetup == .eager {
            protected.withLock { $0.eagerSetup = true }
            // After the subclass's initializer: the setup runs on the request queue (else the
            // root queue), as Alamofire's eager setup does.
            (session.requestQueue ?? session.rootQueue).async { [self] in performSetup() }
        }
    }

    // MARK: - Interceptors added after creation

    /// Adds an interceptor that adapts and retries this request after the session's and the
    /// request's own (Alamofire 5.12). Added before the request starts, it adapts its first
    /// attempt; added later, the next attempt and the next retry decision.
    /// - Parameter interceptor: the interceptor.
    /// - Returns: the request.
    @discardableResult
    public func interceptor(_ interceptor: any RequestInterceptor) -> Self {
        protected.withLock { $0.addedInterceptors.append(interceptor) }
        return self
    }

    /// Adds an adapter for this request, after the interceptors before it.
    /// - Parameter adapter: the adapter.
    /// - Returns: the request.
    @discardableResult
    public func adapt(using adapter: any RequestAdapter) -> Self {
        interceptor(Interceptor(adapters: [adapter]))
    }

    /// Adds a retrier for this request, after the interceptors before it.
    /// - Parameter retrier: the retrier.
    /// - Returns: the request.
    @discardableResult
    public func retry(using retrier: any RequestRetrier) -> Self {
        interceptor(Interceptor(retriers: [retrier]))
    }

    // MARK: - State

    /// The current state.
    public var state: State { protected.withLock { $0.state } }
    /// Whether the request is initialized.
    public var isInitialized: Bool { state == .initialized }
    /// Whether the request is running.
    public var isResumed: Bool { state == .resumed }
    /// Whether the request is suspended.
    public var isSuspended: Bool { state == .suspended }
    /// Whether `cancel()` was called.
    public var isCancelled: Bool { state == .cancelled }
    /// Whether the request completed (after retries).
    public var isFinished: Bool { protected.withLock { $0.pipelineFinished } }
    /// Retries so far (0 on the first attempt).
    public var retryCount: Int { protected.withLock { $0.retryCount } }
    /// The request as first created, before adapters.
    public var firstRequest: URLRequest? { protected.withLock { $0.requests.first } }
    /// Every `URLRequest` made for this request, as in Alamofire: for each attempt the one
    /// created (from the convertible; with credentials when answering a Basic challenge), then
    /// the adapted one when an adapter ran.
    public var requests: [URLRequest] { protected.withLock { $0.requests } }
    /// The request of each attempt as sent (after adapters, before redirects), one per attempt.
    public var performedRequests: [URLRequest] { protected.withLock { $0.performedRequests } }
    /// The latest request sent (Alamofire's `request`): adapted, before redirects.
    public var request: URLRequest? { protected.withLock { $0.requests.last } }
    /// Same as `request`.
    public var lastRequest: URLRequest? { request }
    /// The last request head written to the wire, after redirects.
    public var httpRequest: HTTPRequest? { protected.withLock { $0.sentHead }?.httpRequest }
    /// The final response head of the latest attempt.
    public var response: HTTPURLResponse? { protected.withLock { $0.response } }
    /// Metrics of every attempt.
    public var allMetrics: [TransferMetrics] { protected.withLock { $0.allMetrics } }
    /// Metrics of the latest attempt.
    public var metrics: TransferMetrics? { protected.withLock { $0.allMetrics.last } }
    /// The error, once the request failed (or the latest attempt's error while retrying).
    public var error: TinyFireError? { protected.withLock { $0.error } }

    var eventMonitor: CompositeEventMonitor? { session.eventMonitor }

    /// The request as created, before adapters (what `OfflineQueueDeferrer` queues).
    var createdRequest: URLRequest? { protected.withLock { $0.initialRequest } }

    /// The body when it is not the `URLRequest`'s `httpBody` (uploads); nil here.
    var uploadBody: UploadBody? { nil }

    // MARK: - Lifecycle

    /// Starts the request, or continues a suspended one. Requests start on their own when a
    /// response handler is added and the session's `startRequestsImmediately` is true.
    /// - Returns: the request.
    @discardableResult
    public func resume() -> Self {
        enum Action { case none, setup, resumeTransfer, start(RequestSpec), setUpEarlier(RequestSpec?) }
        let action = protected.withLock { state -> Action in
            switch state.state {
            case .initialized where state.eagerSetup:
                // Set up already (or being set up): start what it prepared, or let it start
                // when it is done.
                state.state = .resumed
                let spec = state.pendingSpec
                state.pendingSpec = nil
                if spec != nil { state.transferRunning = true }
                return .setUpEarlier(spec)
            case .initialized:
                state.state = .resumed
                return .setup
            case .suspended:
                state.state = .resumed
                if state.transferRunning { return .resumeTransfer }
                if let spec = state.pendingSpec {
                    state.pendingSpec = nil
                    state.transferRunning = true
                    return .start(spec)
                }
                return .none
            case .resumed, .cancelled, .finished:
                return .none
            }
        }
        switch action {
        case .none:
            return self
        case .setup:
            session.didResume(self)
            eventMonitor?.requestDidResume(self)
            if let queue = session.requestQueue {
                queue.async { [self] in performSetup() }
            } else {
                performSetup()
            }
        case .resumeTransfer:
            eventMonitor?.requestDidResume(self)
            session.engine.resumeTransfer(self)
        case .start(let spec):
            eventMonitor?.requestDidResume(self)
            startTransfer(spec)
        case .setUpEarlier(let spec):
            session.didResume(self)
            eventMonitor?.requestDidResume(self)
            if let spec { startTransfer(spec) }
        }
        return self
    }

    /// Pauses the request: the transfer stops reading (the server's sends back up in TCP) and
    /// its idle and low-speed timers stop; the total timeout keeps running. A request that has
    /// not reached the network yet waits there.
    /// - Returns: the request.
    @discardableResult
    public func suspend() -> Self {
        let (changed, running) = protected.withLock { state -> (Bool, Bool) in
            guard state.state == .resumed || state.state == .initialized else { return (false, false) }
            state.state = .suspended
            return (true, state.transferRunning)
        }
        guard changed else { return self }
        if running { session.engine.suspendTransfer(self) }
        eventMonitor?.requestDidSuspend(self)
        return self
    }

    /// Cancels the request; it finishes with `TinyFireError.explicitlyCancelled` and its
    /// response handlers run.
    /// - Returns: the request.
    @discardableResult
    public func cancel() -> Self {
        let (changed, running) = protected.withLock { state -> (Bool, Bool) in
            guard !state.pipelineFinished, state.state != .cancelled, state.state != .finished else { return (false, false) }
            state.state = .cancelled
            return (true, state.transferRunning)
        }
        guard changed else { return self }
        eventMonitor?.requestDidCancel(self)
        if running {
            // The transfer ends with .explicitlyCancelled and comes back through the pipeline.
            session.engine.cancel(self)
        } else {
            finish(.explicitlyCancelled)
        }
        return self
    }

    // MARK: - Handlers

    /// Whether the body goes on after a response head (Alamofire's `ResponseDisposition`).
    public enum ResponseDisposition: Sendable {
        /// Continue normally.
        case allow
        /// Cancel the request, as `cancel()` does.
        case cancel
    }

    /// The app's response-head handler and where it runs.
    struct HTTPResponseHandler {
        let queue: DispatchQueue
        let handler: @Sendable (HTTPURLResponse, @escaping @Sendable (ResponseDisposition) -> Void) -> Void
        /// The body waits for the answer (the disposition form); the plain form lets it flow.
        let holdsBody: Bool
    }

    /// Calls `handler` on `queue` when the final response head of each attempt arrives, and
    /// holds the body back until it answers: `.allow` lets it flow, `.cancel` cancels the
    /// request (no body reaches a stream handler or a file). The handler must answer, or the
    /// request waits until it is cancelled or its total timeout passes (the idle timeout does
    /// not run while it waits). As in Alamofire, only the last `onHTTPResponse` set is called.
    /// - Parameters:
    ///   - queue: where to call it; default the session's root queue (Alamofire: `.main`).
    ///   - handler: receives the response head and the function to answer with.
    /// - Returns: the request.
    @_disfavoredOverload
    @discardableResult
    public func onHTTPResponse(
        on queue: DispatchQueue? = nil,
        perform handler: @escaping @Sendable (HTTPURLResponse, @escaping @Sendable (ResponseDisposition) -> Void) -> Void
    ) -> Self {
        protected.withLock {
            $0.httpResponseHandler = HTTPResponseHandler(queue: queue ?? session.rootQueue, handler: handler, holdsBody: true)
        }
        return self
    }

    /// Calls `handler` on `queue` when the final response head of each attempt arrives; the
    /// body flows meanwhile. As in Alamofire, only the last `onHTTPResponse` set is called.
    /// - Parameters:
    ///   - queue: where to call it; default the session's root queue (Alamofire: `.main`).
    ///   - handler: receives the response head.
    /// - Returns: the request.
    @discardableResult
    public func onHTTPResponse(on queue: DispatchQueue? = nil, perform handler: @escaping @Sendable (HTTPURLResponse) -> Void) -> Self {
        protected.withLock {
            $0.httpResponseHandler = HTTPResponseHandler(
                queue: queue ?? session.rootQueue,
                handler: { response, answer in
                    handler(response)
                    answer(.allow)
                }, holdsBody: false)
        }
        return self
    }

    /// An async `onHTTPResponse` whose returned value decides (`.allow` or `.cancel`); the body
    /// waits for it. Only the last `onHTTPResponse` set is called.
    /// - Parameter handler: receives the response head.
    /// - Returns: the request.
    @_disfavoredOverload
    @discardableResult
    public func onHTTPResponse(perform handler: @escaping @Sendable (HTTPURLResponse) async -> ResponseDisposition) -> Self {
        onHTTPResponse(on: nil) { response, answer in
            Task { answer(await handler(response)) }
        }
    }

    /// An async `onHTTPResponse`; the body waits until it returns. Only the last
    /// `onHTTPResponse` set is called.
    /// - Parameter handler: receives the response head.
    /// - Returns: the request.
    @discardableResult
    public func onHTTPResponse(perform handler: @escaping @Sendable (HTTPURLResponse) async -> Void) -> Self {
        onHTTPResponse { (response: HTTPURLResponse) async -> ResponseDisposition in
            await handler(response)
            return .allow
        }
    }

    /// The answer to a held response head arrived.
    private func dispositionDecided(_ disposition: ResponseDisposition, generation: Int) {
        let (wasWaiting, completed, needsQueue) = protected.withLock { state -> (Bool, Bool, Bool) in
            guard state.dispositionGeneration == generation, state.awaitingDisposition else { return (false, false, false) }
            // Refused: the body stays held (and is dropped) while the cancellation runs.
            if disposition == .allow { state.awaitingDisposition = false }
            defer { state.completionAwaitingDisposition = false }
            return (true, state.completionAwaitingDisposition, !state.validators.isEmpty)
        }
        guard wasWaiting else { return }
        switch disposition {
        case .allow:
            bodyAllowed()
            if completed {
                continueAfterTransfer(nil, onQueue: needsQueue)
            } else {
                updateFlowPause()
            }
        case .cancel:
            // Refused: a body that already arrived is not delivered (Alamofire delivers none).
            if completed {
                discardOutput()
                protected.withLock { $0.output = nil }
            }
            cancel()
        }
    }

    /// Whether reading must pause now: a response head waits for its disposition (a subclass
    /// adds its own reasons).
    func wantsFlowPaused() -> Bool { protected.withLock { $0.awaitingDisposition } }

    /// Tells the engine to read or pause as `wantsFlowPaused()` says when it gets to it (two
    /// changes in flight can arrive in any order).
    func updateFlowPause() {
        session.engine.setFlowPaused(self) { [weak self] in self?.wantsFlowPaused() ?? false }
    }

    /// A response head waits for the app's disposition.
    var awaitingDisposition: Bool { protected.withLock { $0.awaitingDisposition } }

    /// The held body may flow (a subclass hands over what it held).
    func bodyAllowed() {}

    /// Calls `handler` on `queue` with each `URLRequest` the request sends (one per attempt).
    /// - Parameters:
    ///   - queue: where to call it; default the session's root queue.
    ///   - handler: receives the request.
    /// - Returns: the request.
    @discardableResult
    public func onURLRequestCreation(on queue: DispatchQueue? = nil, perform handler: @escaping @Sendable (URLRequest) -> Void) -> Self {
        let existing = protected.withLock { state -> URLRequest? in
            state.urlRequestHandlers.append((queue ?? session.rootQueue, handler))
            return state.performedRequests.last
        }
        if let existing { (queue ?? session.rootQueue).async { handler(existing) } }
        return self
    }

    /// Uses `handler` for this request's redirects instead of the session's.
    /// - Parameter handler: the handler.
    /// - Returns: the request.
    @discardableResult
    public func redirect(using handler: any RedirectHandler) -> Self {
        protected.withLock { $0.redirectHandler = handler }
        return self
    }

    /// The redirect handler in effect: the request's, else the session's.
    var effectiveRedirectHandler: (any RedirectHandler)? {
        protected.withLock { $0.redirectHandler } ?? session.redirectHandler
    }

    // MARK: - Pipeline

    /// Builds the request afresh from the convertible (its request modifier runs again), checks
    /// it, then runs an attempt: the first, and every retry, as Alamofire does.
    private func performSetup() {
        let initial: URLRequest
        do {
            initial = try convertible.asURLRequest()
            try Self.validate(initial)
        } catch {
            let failure = (error as? TinyFireError) ?? .createURLRequestFailed(error: error)
            eventMonitor?.request(self, didFailToCreateURLRequestWithError: failure)
            retryOrFinish(failure)
            return
        }
        protected.withLock { $0.initialRequest = initial }
        eventMonitor?.request(self, didCreateInitialURLRequest: initial)
        performAttempt(initial)
    }

    /// A GET with a body is refused before it is sent (`bodyDataInGETRequest`), as Alamofire's
    /// `URLRequest.validate()`.
    private static func validate(_ urlRequest: URLRequest) throws(TinyFireError) {
        if (urlRequest.method ?? .get) == .get, let body = urlRequest.httpBody, !body.isEmpty {
            throw .urlRequestValidationFailed(reason: .bodyDataInGETRequest(body))
        }
    }

    /// Adapts `created`, then starts its transfer. Whatever an adapter throws, and an adapted
    /// request that fails the check, is `.requestAdaptationFailed(error:)`, as in Alamofire.
    private func performAttempt(_ created: URLRequest) {
        let initial = withAnsweredChallenge(created)
        protected.withLock { $0.requests.append(initial) }
        guard let adapter = combinedInterceptor else {
            didCreateURLRequest(initial)
            return
        }
        let state = RequestAdapterState(requestID: id, session: session)
        adapter.adapt(initial, using: state) { [self] result in
            do {
                let adapted = try result.get()
                try Self.validate(adapted)
                protected.withLock { $0.requests.append(adapted) }
                eventMonitor?.request(self, didAdaptInitialRequest: initial, to: adapted)
                didCreateURLRequest(adapted)
            } catch {
                let failure = TinyFireError.requestAdaptationFailed(error: error)
                eventMonitor?.request(self, didFailToAdaptURLRequest: initial, withError: failure)
                retryOrFinish(failure)
            }
        }
    }

    private func didCreateURLRequest(_ urlRequest: URLRequest) {
        let (cURLHandlers, urlRequestHandlers) = protected.withLock { state in
            state.performedRequests.append(urlRequest)
            return (state.cURLHandlers, state.urlRequestHandlers)
        }
        eventMonitor?.request(self, didCreateURLRequest: urlRequest)
        if !cURLHandlers.isEmpty {
            let description = cURLDescription(for: urlRequest)
            for (queue, handler) in cURLHandlers {
                if let queue { queue.async { handler(description) } } else { handler(description) }
            }
        }
        for (queue, handler) in urlRequestHandlers { queue.async { handler(urlRequest) } }

        var spec: RequestSpec
        do throws(TinyFireError) {
            spec = try RequestSpec(urlRequest)
            try prepare(&spec)
        } catch {
            retryOrFinish(error)
            return
        }
        enum Next { case start, wait, cancelled }
        let next = protected.withLock { state -> Next in
            switch state.state {
            case .cancelled, .finished: return .cancelled
            case .suspended, .initialized:
                // Suspended, or set up eagerly and not resumed yet: resume() starts it.
                state.pendingSpec = spec
                return .wait
            case .resumed:
                state.transferRunning = true
                return .start
            }
        }
        switch next {
        case .start: startTransfer(spec)
        case .wait: break
        case .cancelled: finish(.explicitlyCancelled)
        }
    }

    private func startTransfer(_ spec: RequestSpec) {
        let last = protected.withLock { state -> URLRequest? in
            // A head of an earlier attempt no longer waits: its late answer is ignored.
            state.awaitingDisposition = false
            return state.requests.last
        }
        eventMonitor?.request(self, didStartTransferFor: last ?? spec.urlRequest)
        session.engine.start(spec, owner: self)
        // Cancelled after the transfer was decided on but before the engine had it: that
        // cancellation found nothing to stop. The engine has it now (cancel runs on its loop,
        // after the start).
        if isCancelled { session.engine.cancel(self) }
    }

    /// Runs validators, then retries or finishes. Called when a transfer ends.
    func didCompleteAttempt(_ transferError: TinyFireError?) {
        if transferError != nil, !isCancelled, takeImmediateRestart() {
            retry(after: nil, counted: false)
            return
        }
        var error = transferError
        let (validators, request, response, output, answerChallenge) = protected.withLock { state in
            let answer = transferError == nil && state.takeBasicChallenge()
            return (state.validators, state.requests.last, state.response, state.output, answer)
        }
        if answerChallenge, let initial = protected.withLock({ $0.initialRequest }) {
            performAttempt(initial)
            return
        }
        if error == nil, let response {
            let data = output?.data
            for validator in validators {
                if let failure = validator(request, response, data) {
                    error = failure
                    break
                }
            }
        }
        if error == nil {
            error = commitOutput()
        } else {
            discardOutput()
        }
        retryOrFinish(error)
    }

    /// Asks the retrier about `error` (if any), then retries or finishes.
    private func retryOrFinish(_ error: TinyFireError?) {
        guard let error else {
            finish(nil)
            return
        }
        protected.withLock { $0.error = error }
        guard let retrier = combinedInterceptor, !isCancelled, !error.isExplicitlyCancelledError else {
            finish(isCancelled ? .explicitlyCancelled : error)
            return
        }
        retrier.retry(self, for: session, dueTo: error) { [self] decision in
            switch decision {
            case .retry, .retryWithDelay:
                if let ended = retryLimitError(after: error) {
                    // Whatever the retriers say, a request ends: a board does not hammer its server.
                    finish(ended)
                    return
                }
                retry(after: decision.delay)
            case .doNotRetry:
                finish(error)
            case .doNotRetryWithError(let retryError):
                finish(.requestRetryFailed(retryError: retryError, originalError: error))
            }
        }
    }

    /// The error that ends the request instead of another retry, once it was retried
    /// `SessionConfiguration.maxRetries` times; nil while it may be retried.
    private func retryLimitError(after error: TinyFireError) -> TinyFireError? {
        let limit = session.configuration.maxRetries
        guard retryCount >= limit else { return nil }
        return .requestRetryFailed(retryError: RetryLimitReached(limit: limit), originalError: error)
    }

    /// Starts another attempt, after `delay` seconds. An uncounted one (a download restarting
    /// after an unusable range response) leaves `retryCount` alone.
    func retry(after delay: TimeInterval?, counted: Bool = true) {
        let proceed = protected.withLock { state -> Bool in
            guard state.state != .cancelled else { return false }
            if counted { state.retryCount += 1 }
            state.downloadProgressBase = 0
            state.response = nil
            state.output = nil
            state.error = nil
            state.pipelineFinished = false
            if state.state == .finished { state.state = .resumed }
            return true
        }
        guard proceed else {
            finish(.explicitlyCancelled)
            return
        }
        eventMonitor?.requestIsRetrying(self)
        let attempt: @Sendable () -> Void = { [self] in
            guard !isCancelled else {
                finish(.explicitlyCancelled)
                return
            }
            // Every attempt is built anew from the convertible, as in Alamofire: a request
            // modifier runs once per attempt, and what the last attempt changed is not replayed.
            // Built where the first attempt was: on the request queue, if the session has one.
            if let queue = session.requestQueue {
                queue.async { [self] in performSetup() }
            } else {
                performSetup()
            }
        }
        if let delay, delay > 0 {
            session.rootQueue.asyncAfter(deadline: .now() + delay, execute: attempt)
        } else {
            session.rootQueue.async(execute: attempt)
        }
    }

    /// Records the outcome (once) and runs the response serializers.
    func finish(_ error: TinyFireError?) {
        let error = finalError(error)
        let finished = protected.withLock { state -> Bool in
            guard !state.pipelineFinished else { return false }
            state.pipelineFinished = true
            state.transferRunning = false
            state.pendingSpec = nil
            state.error = error
            if state.state != .cancelled { state.state = .finished }
            return true
        }
        guard finished else { return }
        if error != nil { discardOutput() }
        didFinishPipeline()
        eventMonitor?.requestDidFinish(self)
        session.didFinish(self)
        processNextResponseSerializer()
    }

    // MARK: - Response serializers

    /// Adds a serializer; it runs on the serialization queue once the request finishes (at
    /// once if it already has). Starts the request when the session says so. An `inline`
    /// serializer does only constant work (hand over the stored body) and runs on the
    /// finishing thread, saving a queue hop per request.
    func appendResponseSerializer(inline: Bool = false, _ serializer: @escaping @Sendable () -> Void) {
        let (process, start) = protected.withLock { state -> (Bool, Bool) in
            state.responseSerializers.append((serializer, inline))
            let process = state.pipelineFinished && !state.serializersRunning
            if process { state.serializersRunning = true }
            return (process, state.state == .initialized)
        }
        // A handler added after the finish serializes the stored outcome.
        if process { processNextResponseSerializer() }
        if start && session.startRequestsImmediately { resume() }
    }

    /// Runs the next serializer, or, when none is left, the completions collected so far.
    func processNextResponseSerializer() {
        enum Next { case run(@Sendable () -> Void, inline: Bool), complete([@Sendable () -> Void]) }
        let next = protected.withLock { state -> Next in
            if state.nextSerializer < state.responseSerializers.count {
                let serializer = state.responseSerializers[state.nextSerializer]
                state.nextSerializer += 1
                state.serializersRunning = true
                return .run(serializer.run, inline: serializer.inline)
            }
            let completions = state.serializerCompletions
            state.serializerCompletions = []
            state.serializersRunning = false
            if state.pipelineFinished {
                // Serializers capture the request; dropping the ones that ran breaks the
                // cycle. Handlers added later still run, from index 0.
                state.responseSerializers.removeFirst(state.nextSerializer)
                state.nextSerializer = 0
            }
            return .complete(completions)
        }
        switch next {
        case .run(let serializer, let inline):
            if inline { serializer() } else { session.serializationQueue.async(execute: serializer) }
        case .complete(let completions): for completion in completions { completion() }
        }
    }

    /// Called by a serializer when its value is ready: queues its completion and moves on.
    func responseSerializerDidComplete(_ completion: @escaping @Sendable () -> Void) {
        protected.withLock { $0.serializerCompletions.append(completion) }
        processNextResponseSerializer()
    }

    /// A serializer failed and the retrier wants another attempt: every serializer runs again
    /// after it.
    func retryFromSerializer(after delay: TimeInterval?) {
        protected.withLock { state in
            state.nextSerializer = 0
            state.serializerCompletions = []
            state.serializersRunning = false
        }
        retry(after: delay)
    }

    /// Asks the retrier about a serializer's failure. Calls `completion` with the error to
    /// report, or nil when the request is retried instead.
    func retryResult(forSerializationError error: TinyFireError, completion: @escaping @Sendable (TinyFireError?) -> Void) {
        guard let retrier = combinedInterceptor, !isCancelled, protected.withLock({ $0.error }) == nil else {
            completion(error)
            return
        }
        retrier.retry(self, for: session, dueTo: error) { [self] decision in
            switch decision {
            case .retry, .retryWithDelay:
                if let ended = retryLimitError(after: error) {
                    // The same bound as a transfer's retries: a body that never decodes ends too.
                    completion(ended)
                    return
                }
                retryFromSerializer(after: decision.delay)
            case .doNotRetry:
                completion(error)
            case .doNotRetryWithError(let retryError):
                // Wrapped even when it is a TinyFireError, as Alamofire's `retryResult(for:dueTo:)`.
                completion(.requestRetryFailed(retryError: retryError, originalError: error))
            }
        }
    }

    /// A consistent snapshot of what the request produced.
    struct Snapshot {
        var request: URLRequest?
        var response: HTTPURLResponse?
        var metrics: TransferMetrics?
        var output: SinkOutput?
        var error: TinyFireError?
    }

    var snapshot: Snapshot {
        protected.withLock {
            Snapshot(request: $0.requests.last, response: $0.response, metrics: $0.allMetrics.last, output: $0.output, error: $0.error)
        }
    }

    // MARK: - Validation

    func appendValidator(_ validator: @escaping @Sendable (URLRequest?, HTTPURLResponse, Data?) -> TinyFireError?) {
        protected.withLock { $0.validators.append(validator) }
    }

    // MARK: - cURL

    /// Calls `handler` with the cURL command of each request sent (once the request exists:
    /// immediately if it already does). Called on the thread that creates the request unless a
    /// queue is given.
    /// - Parameters:
    ///   - queue: where to call it; default inline.
    ///   - handler: receives the command.
    /// - Returns: the request.
    @discardableResult
    public func cURLDescription(on queue: DispatchQueue? = nil, calling handler: @escaping @Sendable (String) -> Void) -> Self {
        let existing = protected.withLock { state -> URLRequest? in
            state.cURLHandlers.append((queue, handler))
            return state.requests.last
        }
        if let existing {
            let description = cURLDescription(for: existing)
            if let queue { queue.async { handler(description) } } else { handler(description) }
        }
        return self
    }

    /// The cURL command of the latest request sent, or a note that none exists yet.
    /// - Returns: the command.
    public func cURLDescription() -> String {
        guard let request else { return "$ curl command could not be created: the request has not been created yet" }
        return cURLDescription(for: request)
    }

    func cURLDescription(for urlRequest: URLRequest) -> String {
        CURLDescription.command(for: urlRequest, sessionHeaders: session.configuration.headers)
    }

    // MARK: - Progress

    /// Calls `closure` on `queue` as the response body arrives (at most every 100 ms, and once
    /// at the end). Counts body bytes as received (before decompression) against
    /// Content-Length; the total is unknown (-1) without it.
    /// - Parameters:
    ///   - queue: where to call it; default the session's root queue.
    ///   - closure: receives the progress.
    /// - Returns: the request.
    @discardableResult
    public func downloadProgress(queue: DispatchQueue? = nil, closure: @escaping @Sendable (TransferProgress) -> Void) -> Self {
        protected.withLock { $0.downloadProgress.handlers.append((queue ?? session.rootQueue, closure)) }
        wantsProgress.store(true, ordering: .releasing)
        return self
    }

    /// Calls `closure` on `queue` as the request body is sent (at most every 100 ms, and once
    /// at the end).
    /// - Parameters:
    ///   - queue: where to call it; default the session's root queue.
    ///   - closure: receives the progress.
    /// - Returns: the request.
    @discardableResult
    public func uploadProgress(queue: DispatchQueue? = nil, closure: @escaping @Sendable (TransferProgress) -> Void) -> Self {
        protected.withLock { $0.uploadProgress.handlers.append((queue ?? session.rootQueue, closure)) }
        wantsProgress.store(true, ordering: .releasing)
        return self
    }

    // The streams below end through `rootQueue`, where their values are delivered too, so the
    // end never overtakes a value.

    /// Download progress as an async stream; it ends when the request finishes.
    /// - Returns: the stream.
    public func downloadProgress() -> AsyncStream<TransferProgress> {
        let (stream, continuation) = AsyncStream.makeStream(of: TransferProgress.self, bufferingPolicy: .bufferingNewest(16))
        downloadProgress(queue: session.rootQueue) { continuation.yield($0) }
        appendResponseSerializer(inline: true) { [self] in
            responseSerializerDidComplete { self.session.rootQueue.async { continuation.finish() } }
        }
        return stream
    }

    /// Upload progress as an async stream; it ends when the request finishes.
    /// - Returns: the stream.
    public func uploadProgress() -> AsyncStream<TransferProgress> {
        let (stream, continuation) = AsyncStream.makeStream(of: TransferProgress.self, bufferingPolicy: .bufferingNewest(16))
        uploadProgress(queue: session.rootQueue) { continuation.yield($0) }
        appendResponseSerializer(inline: true) { [self] in
            responseSerializerDidComplete { self.session.rootQueue.async { continuation.finish() } }
        }
        return stream
    }

    /// The cURL command of each request sent, as an async stream; it ends when the request
    /// finishes.
    /// - Returns: the stream.
    public func cURLDescriptions() -> AsyncStream<String> {
        let (stream, continuation) = AsyncStream.makeStream(of: String.self)
        cURLDescription { continuation.yield($0) }
        appendResponseSerializer(inline: true) { [self] in
            responseSerializerDidComplete { self.session.rootQueue.async { continuation.finish() } }
        }
        return stream
    }

    /// Each `URLRequest` sent, as an async stream; it ends when the request finishes.
    /// - Returns: the stream.
    public func urlRequests() -> AsyncStream<URLRequest> {
        let (stream, continuation) = AsyncStream.makeStream(of: URLRequest.self)
        onURLRequestCreation { continuation.yield($0) }
        appendResponseSerializer(inline: true) { [self] in
            responseSerializerDidComplete { self.session.rootQueue.async { continuation.finish() } }
        }
        return stream
    }

    /// Each final response head, as an async stream; it ends when the request finishes. A head
    /// that arrived before the stream was asked for is its first element (the request runs as
    /// soon as it is made, and a fast server may answer before this call).
    /// - Returns: the stream.
    public func httpResponses() -> AsyncStream<HTTPURLResponse> {
        let (stream, continuation) = AsyncStream.makeStream(of: HTTPURLResponse.self)
        // Registered and read under one lock: a head is either already here or delivered to us.
        let existing = protected.withLock { state -> HTTPURLResponse? in
            state.httpResponseObservers.append((session.rootQueue, { continuation.yield($0) }))
            return state.response
        }
        if let existing { session.rootQueue.async { continuation.yield(existing) } }
        appendResponseSerializer(inline: true) { [self] in
            responseSerializerDidComplete { self.session.rootQueue.async { continuation.finish() } }
        }
        return stream
    }

    // MARK: - Subclass hooks

    func makeSink(for response: HTTPURLResponse, expectedLength: UInt64?) throws(SinkError) -> any OutputSink {
        DiscardSink()
    }

    /// Lets a subclass attach what the `URLRequest` cannot carry (an upload file).
    func prepare(_ spec: inout RequestSpec) throws(TinyFireError) {}

    /// Whether the failed attempt should be followed by another at once, without asking the
    /// retrier (a resumed download whose response could not continue its partial file).
    func takeImmediateRestart() -> Bool { false }

    /// The request finished (success, failure or cancellation), before its serializers run:
    /// a subclass releases what it held for its attempts (a multipart temporary file).
    func didFinishPipeline() {}

    /// The error the request finishes with, given the pipeline's; a subclass may put a more
    /// precise one first (a stream handler's thrown error before the cancellation it caused).
    func finalError(_ error: TinyFireError?) -> TinyFireError? { error }

    /// Replaces the outcome of a finished request (a stream handler threw after the end).
    func replaceError(_ error: TinyFireError) {
        protected.withLock { $0.error = error }
    }

    /// The validated output goes into place (a download's staged file is renamed to its
    /// destination); the error when that fails.
    func commitOutput() -> TinyFireError? { nil }

    /// The output is not wanted (failed validation, cancelled): a download removes its
    /// staged file.
    func discardOutput() {}

    /// Lets a subclass turn a successful transfer into a failure (a download whose status was
    /// refused before its body reached the file).
    func adjustTransferResult(_ result: Result<SinkOutput, TinyFireError>) -> Result<SinkOutput, TinyFireError> { result }
}

extension Request: CustomStringConvertible {
    /// `METHOD URL (status)` of the last request sent, as Alamofire writes it; "No request
    /// created yet." before one exists.
    public var description: String {
        let (request, response) = protected.withLock { ($0.performedRequests.last ?? $0.requests.last, $0.response) }
        guard let request, let url = request.url else { return "No request created yet." }
        let line = "\(request.method?.rawValue ?? "GET") \(url.absoluteString)"
        return response.map { "\(line) (\($0.statusCode))" } ?? line
    }
}

extension Request: Hashable {
    /// Requests are equal when they are the same object.
    public static func == (lhs: Request, rhs: Request) -> Bool { lhs === rhs }
    /// Hashes the identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

extension Request: TransferOwner {
    package var transferOwnerID: ObjectIdentifier { ObjectIdentifier(self) }
    package var transferAsksRedirects: Bool { effectiveRedirectHandler != nil }
    package var transferWantsProgress: Bool { wantsProgress.load(ordering: .acquiring) }

    package func transferMakeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> any ResponseBodySink {
        let sent = protected.withLock { $0.sentHead }
        let sink = try makeSink(for: HTTPURLResponse(response, sent: sent), expectedLength: expectedLength)
        transferSink = sink
        return sink
    }

    package func transferDecideRedirect(
        to target: RequestSpec, for response: HTTPResponse, sent: SentRequestHead?, answer: RedirectAnswer
    ) -> Bool {
        guard let handler = effectiveRedirectHandler else { return false }
        let answered = HTTPURLResponse(response, sent: sent)
        handler.request(self, willBeRedirectedTo: target.urlRequest, for: answered) { [weak self] decision in
            do throws(TinyFireError) {
                answer.give(.success(try decision.map { (request) throws(TinyFireError) in try RedirectRewrite(request) }))
            } catch {
                self?.protected.withLock { $0.refusal = error }
                answer.give(.failure(.refusedByOwner))
            }
        }
        return true
    }

    package func transferJudgeTrust(host: String) -> TrustJudgement {
        let evaluator: (any ServerTrustEvaluating)?
        do {
            evaluator = try session.serverTrustManager?.serverTrustEvaluator(forHost: host)
        } catch {
            let refusal = error as? TinyFireError ?? .serverTrustEvaluationFailed(reason: .customEvaluationFailed(host: host, error: error))
            protected.withLock { $0.refusal = refusal }
            return .refuse
        }
        guard let evaluator else { return .defaultValidation }
        return .evaluate { [weak self] facts in
            let refusal: TinyFireError
            do {
                try evaluator.evaluate(ServerTrust(facts), forHost: host)
                return true
            } catch let error as TinyFireError {
                refusal = error
            } catch {
                refusal = .serverTrustEvaluationFailed(reason: .customEvaluationFailed(host: host, error: error))
            }
            self?.protected.withLock { $0.refusal = refusal }
            return false
        }
    }

    package func transferDidReceiveResponse(_ head: HTTPResponse, request: SentRequestHead) -> Bool {
        let response = HTTPURLResponse(head, sent: request)
        let (observers, handler, generation) = protected.withLock { state in
            state.response = response
            state.sentHead = request
            state.dispositionGeneration += 1
            state.awaitingDisposition = state.httpResponseHandler?.holdsBody == true
            return (state.httpResponseObservers, state.httpResponseHandler, state.dispositionGeneration)
        }
        eventMonitor?.request(self, didReceiveResponse: response)
        for (queue, observer) in observers { queue.async { observer(response) } }
        guard let handler else { return false }
        handler.queue.async { [self] in
            handler.handler(response) { [self] disposition in dispositionDecided(disposition, generation: generation) }
        }
        return handler.holdsBody
    }

    package func transferWillRedirect(to redirect: RequestSpec, for head: HTTPResponse) {
        guard let eventMonitor else { return }
        let response = HTTPURLResponse(head, sent: protected.withLock { $0.sentHead })
        eventMonitor.request(self, willRedirectTo: redirect.urlRequest, for: response)
    }

    package func transferProgress(upload: (UInt64, UInt64?)?, download: (UInt64, UInt64?)?, final: Bool) {
        let now = Instant.now()
        let (deliveries, flushUpload, flushDownload) = protected.withLock { state -> ([ProgressReporter.Delivery], Bool, Bool) in
            var out: [ProgressReporter.Delivery] = []
            var flushUpload = false
            var flushDownload = false
            if let (sent, total) = upload {
                let update = state.uploadProgress.update(completed: sent, total: total, now: now, final: final)
                out += update.deliveries
                flushUpload = update.scheduleFlush
            }
            if let (received, total) = download {
                let base = state.downloadProgressBase
                let update = state.downloadProgress.update(
                    completed: base + received, total: total.map { base + $0 }, now: now, final: final)
                out += update.deliveries
                flushDownload = update.scheduleFlush
            }
            return (out, flushUpload, flushDownload)
        }
        for (queue, handler, progress) in deliveries { queue.async { handler(progress) } }
        if flushUpload || flushDownload {
            let delay = Double(ProgressReporter.interval.components.attoseconds) / 1e18
            session.rootQueue.asyncAfter(deadline: .now() + delay) { [weak self] in
                guard let self else { return }
                let deliveries = protected.withLock { state -> [ProgressReporter.Delivery] in
                    let now = Instant.now()
                    return (flushUpload ? state.uploadProgress.flush(now: now) : [])
                        + (flushDownload ? state.downloadProgress.flush(now: now) : [])
                }
                for (queue, handler, progress) in deliveries { queue.async { handler(progress) } }
            }
        }
    }

    package func transferDidFinish(
        _ outcome: Result<Void, TransferFailure>, request: SentRequestHead?, response head: HTTPResponse?, report: TransferReport
    ) {
        let response = head.map { HTTPURLResponse($0, sent: request ?? protected.withLock { $0.sentHead }) }
        let metrics = TransferMetrics(report)
        let sink = transferSink
        transferSink = nil
        let refusal = protected.withLock { state in
            defer { state.refusal = nil }
            return state.refusal
        }
        let result: Result<SinkOutput, TinyFireError>
        switch outcome {
        case .success: result = adjustTransferResult(.success(sink?.output ?? .none))
        case .failure(let failure): result = adjustTransferResult(.failure(TinyFireError(failure, refusal: refusal)))
        }
        var error: TinyFireError? = if case .failure(let failure) = result { failure } else { nil }
        let (needsQueue, held, refused) = protected.withLock { state -> (Bool, Bool, Bool) in
            state.transferRunning = false
            if let request { state.sentHead = request }
            if let response { state.response = response }
            state.allMetrics.append(metrics)
            if case .success(let output) = result { state.output = output }
            // The whole body came before the app answered onHTTPResponse: the outcome waits
            // for the answer (.cancel must still cancel).
            // Refused while the transfer was ending: the cancellation it asked for found no
            // transfer to stop, so it is this outcome.
            let refused = state.awaitingDisposition && state.state == .cancelled
            let held = state.awaitingDisposition && error == nil && !refused
            if held { state.completionAwaitingDisposition = true }
            return (!state.validators.isEmpty, held, refused)
        }
        if refused {
            discardOutput()
            protected.withLock { $0.output = nil }
            error = .explicitlyCancelled
        }
        eventMonitor?.request(self, didGatherMetrics: metrics)
        eventMonitor?.request(self, didCompleteTransferWithError: error)
        if held { return }
        continueAfterTransfer(error, onQueue: needsQueue)
    }

    /// Validation, retry and finish after a transfer, off the I/O thread when user code runs.
    func continueAfterTransfer(_ error: TinyFireError?, onQueue needsQueue: Bool) {
        if needsQueue || combinedInterceptor != nil {
            // Validators and retriers are user code: keep them off the I/O thread.
            session.rootQueue.async { [self] in didCompleteAttempt(error) }
        } else {
            didCompleteAttempt(error)
        }
    }
}

/// How far a transfer has come, as Alamofire's `Progress` for uploads and downloads.
public struct TransferProgress: Sendable, Equatable, CustomStringConvertible {
    /// Bytes done.
    public var completedUnitCount: Int64
    /// Bytes expected, or -1 when unknown.
    public var totalUnitCount: Int64

    /// Creates a value.
    /// - Parameters:
    ///   - completedUnitCount: bytes done.
    ///   - totalUnitCount: bytes expected, -1 when unknown.
    public init(completedUnitCount: Int64, totalUnitCount: Int64) {
        self.completedUnitCount = completedUnitCount
        self.totalUnitCount = totalUnitCount
    }

    /// 0…1; 0 while the total is unknown, 1 when finished.
    public var fractionCompleted: Double {
        guard totalUnitCount > 0 else { return totalUnitCount == 0 ? 1 : 0 }
        return min(1, Double(completedUnitCount) / Double(totalUnitCount))
    }

    /// `completed/total bytes`.
    public var description: String {
        "\(completedUnitCount)/\(totalUnitCount < 0 ? "?" : "\(totalUnitCount)") bytes"
    }
}

/// Throttles progress to one report per `interval`, plus the final one. A value held back
/// by the throttle is delivered when the interval ends (`flush`), so the last bytes of a
/// transfer that then stalls are still reported.
struct ProgressReporter {
    static let interval: Duration = .milliseconds(100)
    typealias Delivery = (DispatchQueue, @Sendable (TransferProgress) -> Void, TransferProgress)
    var handlers: [(DispatchQueue, @Sendable (TransferProgress) -> Void)] = []
    var lastReport: Instant?
    var lastValue: TransferProgress?
    /// The newest value not reported yet.
    var heldBack: TransferProgress?
    /// A flush is scheduled.
    var flushScheduled = false

    /// The deliveries for a new value, and whether a flush must be scheduled after `interval`.
    mutating func update(completed: UInt64, total: UInt64?, now: Instant, final: Bool) -> (deliveries: [Delivery], scheduleFlush: Bool) {
        guard !handlers.isEmpty else { return ([], false) }
        // Both come from the peer (Content-Length, Content-Range): clamped, never trapped on.
        var progress = TransferProgress(
            completedUnitCount: Int64(clamping: completed), totalUnitCount: total.map { Int64(clamping: $0) } ?? -1)
        if final && progress.totalUnitCount < 0 { progress.totalUnitCount = progress.completedUnitCount }
        if progress == lastValue { return ([], false) }
        if !final, let lastReport, now < lastReport + Self.interval {
            heldBack = progress
            let schedule = !flushScheduled
            flushScheduled = true
            return ([], schedule)
        }
        return (report(progress, now: now), false)
    }

    /// Delivers the held-back value, if it is still news.
    mutating func flush(now: Instant) -> [Delivery] {
        flushScheduled = false
        guard let value = heldBack, value != lastValue else { return [] }
        return report(value, now: now)
    }

    private mutating func report(_ progress: TransferProgress, now: Instant) -> [Delivery] {
        heldBack = nil
        lastReport = now
        lastValue = progress
        return handlers.map { ($0.0, $0.1, progress) }
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
