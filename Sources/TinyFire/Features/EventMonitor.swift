import Dispatch
import HTTPTypes
import Logging
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Receives a request's lifecycle and transfer events, as Alamofire's `EventMonitor`, for
/// logging and metrics. Every method has an empty default; implement the ones you need.
///
/// Events are delivered on the monitor's `queue` (default one shared serial queue), never on
/// the I/O thread, in the order they happened for any one request.
public protocol EventMonitor: Sendable {
    /// Where this monitor's events are delivered.
    var queue: DispatchQueue { get }

    /// `resume()` started (or restarted) the request.
    func requestDidResume(_ request: Request)
    /// `suspend()` paused the request.
    func requestDidSuspend(_ request: Request)
    /// `cancel()` was called.
    func requestDidCancel(_ request: Request)
    /// The request finished (after retries); response handlers run next.
    func requestDidFinish(_ request: Request)
    /// The request will run again (a retrier said so).
    func requestIsRetrying(_ request: Request)
    /// The initial `URLRequest` was built from the convertible.
    func request(_ request: Request, didCreateInitialURLRequest urlRequest: URLRequest)
    /// Building the initial `URLRequest` failed.
    func request(_ request: Request, didFailToCreateURLRequestWithError error: TinyFireError)
    /// The adapters changed the request.
    func request(_ request: Request, didAdaptInitialRequest initialRequest: URLRequest, to adaptedRequest: URLRequest)
    /// An adapter failed.
    func request(_ request: Request, didFailToAdaptURLRequest initialRequest: URLRequest, withError error: TinyFireError)
    /// This `URLRequest` is what the attempt sends.
    func request(_ request: Request, didCreateURLRequest urlRequest: URLRequest)
    /// The transfer of an attempt started (Alamofire's `didCreateTask`).
    func request(_ request: Request, didStartTransferFor urlRequest: URLRequest)
    /// The final response head arrived (redirects are reported separately).
    func request(_ request: Request, didReceiveResponse response: HTTPURLResponse)
    /// A redirect is about to be followed.
    func request(_ request: Request, willRedirectTo urlRequest: URLRequest, for response: HTTPURLResponse)
    /// An attempt's transfer metrics.
    func request(_ request: Request, didGatherMetrics metrics: TransferMetrics)
    /// An attempt's transfer ended, with its error if it failed.
    func request(_ request: Request, didCompleteTransferWithError error: TinyFireError?)
    /// A validation ran.
    func request(
        _ request: DataRequest, didValidateRequest urlRequest: URLRequest?, response: HTTPURLResponse, data: Data?,
        withResult result: Request.ValidationResult)
    /// The unserialized response was produced (`response(queue:completionHandler:)`).
    func request(_ request: DataRequest, didParseResponse response: DataResponse<Data?, TinyFireError>)
    /// A serializer produced its response.
    func request<Value: Sendable>(_ request: DataRequest, didParseResponse response: DataResponse<Value, TinyFireError>)
}

/// The queue event monitors use unless they name their own.
let defaultEventMonitorQueue = DispatchQueue(label: "org.tinyfire.eventMonitor")

/// Every event a monitor does not implement is ignored.
extension EventMonitor {
    /// A shared serial queue.
    public var queue: DispatchQueue { defaultEventMonitorQueue }
    /// Does nothing when a request resumes: a monitor implements the events it wants.
    public func requestDidResume(_ request: Request) {}
    /// Does nothing when a request is suspended: a monitor implements the events it wants.
    public func requestDidSuspend(_ request: Request) {}
    /// Does nothing when a request is cancelled: a monitor implements the events it wants.
    public func requestDidCancel(_ request: Request) {}
    /// Does nothing when a request finishes: a monitor implements the events it wants.
    public func requestDidFinish(_ request: Request) {}
    /// Does nothing when a request is about to be retried: a monitor implements the events it wants.
    public func requestIsRetrying(_ request: Request) {}
    /// Does nothing when the initial `URLRequest` is created: a monitor implements the events it wants.
    public func request(_ request: Request, didCreateInitialURLRequest urlRequest: URLRequest) {}
    /// Does nothing when the `URLRequest` cannot be created: a monitor implements the events it wants.
    public func request(_ request: Request, didFailToCreateURLRequestWithError error: TinyFireError) {}
    /// Does nothing when an adapter changed the request: a monitor implements the events it wants.
    public func request(_ request: Request, didAdaptInitialRequest initialRequest: URLRequest, to adaptedRequest: URLRequest) {}
    /// Does nothing when an adapter failed: a monitor implements the events it wants.
    public func request(_ request: Request, didFailToAdaptURLRequest initialRequest: URLRequest, withError error: TinyFireError) {}
    /// Does nothing when an attempt's `URLRequest` is ready: a monitor implements the events it wants.
    public func request(_ request: Request, didCreateURLRequest urlRequest: URLRequest) {}
    /// Does nothing when a transfer starts: a monitor implements the events it wants.
    public func request(_ request: Request, didStartTransferFor urlRequest: URLRequest) {}
    /// Does nothing when the final response head arrives: a monitor implements the events it wants.
    public func request(_ request: Request, didReceiveResponse response: HTTPURLResponse) {}
    /// Does nothing when a redirect is about to be followed: a monitor implements the events it wants.
    public func request(_ request: Request, willRedirectTo urlRequest: URLRequest, for response: HTTPURLResponse) {}
    /// Does nothing when an attempt's metrics are complete: a monitor implements the events it wants.
    public func request(_ request: Request, didGatherMetrics metrics: TransferMetrics) {}
    /// Does nothing when a transfer ends: a monitor implements the events it wants.
    public func request(_ request: Request, didCompleteTransferWithError error: TinyFireError?) {}
    /// Does nothing when a validator ran: a monitor implements the events it wants.
    public func request(
        _ request: DataRequest, didValidateRequest urlRequest: URLRequest?, response: HTTPURLResponse, data: Data?,
        withResult result: Request.ValidationResult
    ) {}
    /// Does nothing when a response was serialized: a monitor implements the events it wants.
    public func request(_ request: DataRequest, didParseResponse response: DataResponse<Data?, TinyFireError>) {}
    /// Does nothing when a response was serialized: a monitor implements the events it wants.
    public func request<Value: Sendable>(_ request: DataRequest, didParseResponse response: DataResponse<Value, TinyFireError>) {}
}

/// Several monitors as one: each event goes to every monitor, in order, on that monitor's own
/// queue (each method below does only that).
public final class CompositeEventMonitor: EventMonitor {
    /// The monitors.
    public let monitors: [any EventMonitor]

    /// Creates the composite.
    /// - Parameter monitors: the monitors, in delivery order.
    public init(monitors: [any EventMonitor]) {
        self.monitors = monitors
    }

    func perform(_ event: @escaping @Sendable (any EventMonitor) -> Void) {
        for monitor in monitors { monitor.queue.async { event(monitor) } }
    }

    /// Tells every monitor that a request resumes.
    public func requestDidResume(_ request: Request) { perform { $0.requestDidResume(request) } }
    /// Tells every monitor that a request is suspended.
    public func requestDidSuspend(_ request: Request) { perform { $0.requestDidSuspend(request) } }
    /// Tells every monitor that a request is cancelled.
    public func requestDidCancel(_ request: Request) { perform { $0.requestDidCancel(request) } }
    /// Tells every monitor that a request finishes.
    public func requestDidFinish(_ request: Request) { perform { $0.requestDidFinish(request) } }
    /// Tells every monitor that a request is about to be retried.
    public func requestIsRetrying(_ request: Request) { perform { $0.requestIsRetrying(request) } }
    /// Tells every monitor that the initial `URLRequest` is created.
    public func request(_ request: Request, didCreateInitialURLRequest urlRequest: URLRequest) {
        perform { $0.request(request, didCreateInitialURLRequest: urlRequest) }
    }
    /// Tells every monitor that the `URLRequest` cannot be created.
    public func request(_ request: Request, didFailToCreateURLRequestWithError error: TinyFireError) {
        perform { $0.request(request, didFailToCreateURLRequestWithError: error) }
    }
    /// Tells every monitor that an adapter changed the request.
    public func request(_ request: Request, didAdaptInitialRequest initialRequest: URLRequest, to adaptedRequest: URLRequest) {
        perform { $0.request(request, didAdaptInitialRequest: initialRequest, to: adaptedRequest) }
    }
    /// Tells every monitor that an adapter failed.
    public func request(_ request: Request, didFailToAdaptURLRequest initialRequest: URLRequest, withError error: TinyFireError) {
        perform { $0.request(request, didFailToAdaptURLRequest: initialRequest, withError: error) }
    }
    /// Tells every monitor that an attempt's `URLRequest` is ready.
    public func request(_ request: Request, didCreateURLRequest urlRequest: URLRequest) {
        perform { $0.request(request, didCreateURLRequest: urlRequest) }
    }
    /// Tells every monitor that a transfer starts.
    public func request(_ request: Request, didStartTransferFor urlRequest: URLRequest) {
        perform { $0.request(request, didStartTransferFor: urlRequest) }
    }
    /// Tells every monitor that the final response head arrives.
    public func request(_ request: Request, didReceiveResponse response: HTTPURLResponse) {
        perform { $0.request(request, didReceiveResponse: response) }
    }
    /// Tells every monitor that a redirect is about to be followed.
    public func request(_ request: Request, willRedirectTo urlRequest: URLRequest, for response: HTTPURLResponse) {
        perform { $0.request(request, willRedirectTo: urlRequest, for: response) }
    }
    /// Tells every monitor that an attempt's metrics are complete.
    public func request(_ request: Request, didGatherMetrics metrics: TransferMetrics) {
        perform { $0.request(request, didGatherMetrics: metrics) }
    }
    /// Tells every monitor that a transfer ends.
    public func request(_ request: Request, didCompleteTransferWithError error: TinyFireError?) {
        perform { $0.request(request, didCompleteTransferWithError: error) }
    }
    /// Tells every monitor that a validator ran.
    public func request(
        _ request: DataRequest, didValidateRequest urlRequest: URLRequest?, response: HTTPURLResponse, data: Data?,
        withResult result: Request.ValidationResult
    ) {
        let outcome = ValidationOutcome(result)
        perform { $0.request(request, didValidateRequest: urlRequest, response: response, data: data, withResult: outcome.result) }
    }
    /// Tells every monitor that a response was serialized.
    public func request(_ request: DataRequest, didParseResponse response: DataResponse<Data?, TinyFireError>) {
        perform { $0.request(request, didParseResponse: response) }
    }
    /// Tells every monitor that a response was serialized.
    public func request<Value: Sendable>(_ request: DataRequest, didParseResponse response: DataResponse<Value, TinyFireError>) {
        perform { $0.request(request, didParseResponse: response) }
    }
}

/// `Result<Void, any Error>` carried across queues.
struct ValidationOutcome: Sendable {
    let error: (any Error)?
    init(_ result: Request.ValidationResult) {
        if case .failure(let error) = result { self.error = error } else { error = nil }
    }
    var result: Request.ValidationResult { error.map { .failure($0) } ?? .success(()) }
}

/// An `EventMonitor` whose events are closures you set, as Alamofire's `ClosureEventMonitor`:
/// `let monitor = ClosureEventMonitor(); monitor.requestDidFinish = { request in … }`, before or
/// after handing it to a session (an event reads the closure set when it is delivered).
/// Events arrive on `queue` (default: the shared monitor queue; Alamofire's is `.main`).
public final class ClosureEventMonitor: EventMonitor {
    /// The closures; nil ones are not called.
    public struct Closures: Sendable {
        /// `requestDidResume`.
        public var requestDidResume: (@Sendable (Request) -> Void)?
        /// `requestDidSuspend`.
        public var requestDidSuspend: (@Sendable (Request) -> Void)?
        /// `requestDidCancel`.
        public var requestDidCancel: (@Sendable (Request) -> Void)?
        /// `requestDidFinish`.
        public var requestDidFinish: (@Sendable (Request) -> Void)?
        /// `requestIsRetrying`.
        public var requestIsRetrying: (@Sendable (Request) -> Void)?
        /// `request(_:didCreateInitialURLRequest:)`.
        public var requestDidCreateInitialURLRequest: (@Sendable (Request, URLRequest) -> Void)?
        /// `request(_:didFailToCreateURLRequestWithError:)`.
        public var requestDidFailToCreateURLRequestWithError: (@Sendable (Request, TinyFireError) -> Void)?
        /// `request(_:didAdaptInitialRequest:to:)`.
        public var requestDidAdaptInitialRequestToAdaptedRequest: (@Sendable (Request, URLRequest, URLRequest) -> Void)?
        /// `request(_:didFailToAdaptURLRequest:withError:)`.
        public var requestDidFailToAdaptURLRequestWithError: (@Sendable (Request, URLRequest, TinyFireError) -> Void)?
        /// `request(_:didCreateURLRequest:)`.
        public var requestDidCreateURLRequest: (@Sendable (Request, URLRequest) -> Void)?
        /// `request(_:didStartTransferFor:)`.
        public var requestDidStartTransfer: (@Sendable (Request, URLRequest) -> Void)?
        /// `request(_:didReceiveResponse:)`.
        public var requestDidReceiveResponse: (@Sendable (Request, HTTPURLResponse) -> Void)?
        /// `request(_:willRedirectTo:for:)`.
        public var requestWillRedirect: (@Sendable (Request, URLRequest, HTTPURLResponse) -> Void)?
        /// `request(_:didGatherMetrics:)`.
        public var requestDidGatherMetrics: (@Sendable (Request, TransferMetrics) -> Void)?
        /// `request(_:didCompleteTransferWithError:)`.
        public var requestDidCompleteTransferWithError: (@Sendable (Request, TinyFireError?) -> Void)?
        /// `request(_:didValidateRequest:response:data:withResult:)`.
        public var requestDidValidateRequestResponseDataWithResult:
            (@Sendable (DataRequest, URLRequest?, HTTPURLResponse, Data?, Request.ValidationResult) -> Void)?
        /// `request(_:didParseResponse:)` for the unserialized response.
        public var requestDidParseResponse: (@Sendable (DataRequest, DataResponse<Data?, TinyFireError>) -> Void)?

        /// No closures.
        public init() {}
    }

    /// Where events are delivered.
    public let queue: DispatchQueue
    private let closures: Mutex<Closures>

    /// Creates a monitor.
    /// - Parameters:
    ///   - queue: where events are delivered; default the shared monitor queue.
    ///   - closures: the closures; more can be set later through `update`.
    public init(queue: DispatchQueue? = nil, closures: Closures = Closures()) {
        self.queue = queue ?? defaultEventMonitorQueue
        self.closures = Mutex(closures)
    }

    /// Changes the closures.
    /// - Parameter change: edits them.
    public func update(_ change: (inout Closures) -> Void) {
        closures.withLock { change(&$0) }
    }

    private var current: Closures { closures.withLock { $0 } }

    // Alamofire's spelling: each closure is a property of the monitor, settable at any time
    // (`monitor.requestDidResume = { request in … }`); events are delivered on `queue`.

    /// Called for `requestDidResume` events (same as `update { $0.requestDidResume = … }`).
    public var requestDidResume: (@Sendable (Request) -> Void)? {
        get { closures.withLock { $0.requestDidResume } }
        set { closures.withLock { $0.requestDidResume = newValue } }
    }

    /// Called for `requestDidSuspend` events (same as `update { $0.requestDidSuspend = … }`).
    public var requestDidSuspend: (@Sendable (Request) -> Void)? {
        get { closures.withLock { $0.requestDidSuspend } }
        set { closures.withLock { $0.requestDidSuspend = newValue } }
    }

    /// Called for `requestDidCancel` events (same as `update { $0.requestDidCancel = … }`).
    public var requestDidCancel: (@Sendable (Request) -> Void)? {
        get { closures.withLock { $0.requestDidCancel } }
        set { closures.withLock { $0.requestDidCancel = newValue } }
    }

    /// Called for `requestDidFinish` events (same as `update { $0.requestDidFinish = … }`).
    public var requestDidFinish: (@Sendable (Request) -> Void)? {
        get { closures.withLock { $0.requestDidFinish } }
        set { closures.withLock { $0.requestDidFinish = newValue } }
    }

    /// Called for `requestIsRetrying` events (same as `update { $0.requestIsRetrying = … }`).
    public var requestIsRetrying: (@Sendable (Request) -> Void)? {
        get { closures.withLock { $0.requestIsRetrying } }
        set { closures.withLock { $0.requestIsRetrying = newValue } }
    }

    /// Called for `requestDidCreateInitialURLRequest` events (same as `update { $0.requestDidCreateInitialURLRequest = … }`).
    public var requestDidCreateInitialURLRequest: (@Sendable (Request, URLRequest) -> Void)? {
        get { closures.withLock { $0.requestDidCreateInitialURLRequest } }
        set { closures.withLock { $0.requestDidCreateInitialURLRequest = newValue } }
    }

    /// Called for `requestDidFailToCreateURLRequestWithError` events (same as `update { $0.requestDidFailToCreateURLRequestWithError = … }`).
    public var requestDidFailToCreateURLRequestWithError: (@Sendable (Request, TinyFireError) -> Void)? {
        get { closures.withLock { $0.requestDidFailToCreateURLRequestWithError } }
        set { closures.withLock { $0.requestDidFailToCreateURLRequestWithError = newValue } }
    }

    /// Called for `requestDidAdaptInitialRequestToAdaptedRequest` events (same as `update { $0.requestDidAdaptInitialRequestToAdaptedRequest = … }`).
    public var requestDidAdaptInitialRequestToAdaptedRequest: (@Sendable (Request, URLRequest, URLRequest) -> Void)? {
        get { closures.withLock { $0.requestDidAdaptInitialRequestToAdaptedRequest } }
        set { closures.withLock { $0.requestDidAdaptInitialRequestToAdaptedRequest = newValue } }
    }

    /// Called for `requestDidFailToAdaptURLRequestWithError` events (same as `update { $0.requestDidFailToAdaptURLRequestWithError = … }`).
    public var requestDidFailToAdaptURLRequestWithError: (@Sendable (Request, URLRequest, TinyFireError) -> Void)? {
        get { closures.withLock { $0.requestDidFailToAdaptURLRequestWithError } }
        set { closures.withLock { $0.requestDidFailToAdaptURLRequestWithError = newValue } }
    }

    /// Called for `requestDidCreateURLRequest` events (same as `update { $0.requestDidCreateURLRequest = … }`).
    public var requestDidCreateURLRequest: (@Sendable (Request, URLRequest) -> Void)? {
        get { closures.withLock { $0.requestDidCreateURLRequest } }
        set { closures.withLock { $0.requestDidCreateURLRequest = newValue } }
    }

    /// Called for `requestDidStartTransfer` events (same as `update { $0.requestDidStartTransfer = … }`).
    public var requestDidStartTransfer: (@Sendable (Request, URLRequest) -> Void)? {
        get { closures.withLock { $0.requestDidStartTransfer } }
        set { closures.withLock { $0.requestDidStartTransfer = newValue } }
    }

    /// Called for `requestDidReceiveResponse` events (same as `update { $0.requestDidReceiveResponse = … }`).
    public var requestDidReceiveResponse: (@Sendable (Request, HTTPURLResponse) -> Void)? {
        get { closures.withLock { $0.requestDidReceiveResponse } }
        set { closures.withLock { $0.requestDidReceiveResponse = newValue } }
    }

    /// Called for `requestWillRedirect` events (same as `update { $0.requestWillRedirect = … }`).
    public var requestWillRedirect: (@Sendable (Request, URLRequest, HTTPURLResponse) -> Void)? {
        get { closures.withLock { $0.requestWillRedirect } }
        set { closures.withLock { $0.requestWillRedirect = newValue } }
    }

    /// Called for `requestDidGatherMetrics` events (same as `update { $0.requestDidGatherMetrics = … }`).
    public var requestDidGatherMetrics: (@Sendable (Request, TransferMetrics) -> Void)? {
        get { closures.withLock { $0.requestDidGatherMetrics } }
        set { closures.withLock { $0.requestDidGatherMetrics = newValue } }
    }

    /// Called for `requestDidCompleteTransferWithError` events (same as `update { $0.requestDidCompleteTransferWithError = … }`).
    public var requestDidCompleteTransferWithError: (@Sendable (Request, TinyFireError?) -> Void)? {
        get { closures.withLock { $0.requestDidCompleteTransferWithError } }
        set { closures.withLock { $0.requestDidCompleteTransferWithError = newValue } }
    }

    /// Called for `requestDidValidateRequestResponseDataWithResult` events (same as `update { $0.requestDidValidateRequestResponseDataWithResult = … }`).
    public var requestDidValidateRequestResponseDataWithResult:
        (@Sendable (DataRequest, URLRequest?, HTTPURLResponse, Data?, Request.ValidationResult) -> Void)?
    {
        get { closures.withLock { $0.requestDidValidateRequestResponseDataWithResult } }
        set { closures.withLock { $0.requestDidValidateRequestResponseDataWithResult = newValue } }
    }

    /// Called for `requestDidParseResponse` events (same as `update { $0.requestDidParseResponse = … }`).
    public var requestDidParseResponse: (@Sendable (DataRequest, DataResponse<Data?, TinyFireError>) -> Void)? {
        get { closures.withLock { $0.requestDidParseResponse } }
        set { closures.withLock { $0.requestDidParseResponse = newValue } }
    }

    /// Calls the closure.
    public func requestDidResume(_ request: Request) { current.requestDidResume?(request) }
    /// Calls the closure.
    public func requestDidSuspend(_ request: Request) { current.requestDidSuspend?(request) }
    /// Calls the closure.
    public func requestDidCancel(_ request: Request) { current.requestDidCancel?(request) }
    /// Calls the closure.
    public func requestDidFinish(_ request: Request) { current.requestDidFinish?(request) }
    /// Calls the closure.
    public func requestIsRetrying(_ request: Request) { current.requestIsRetrying?(request) }
    /// Calls the closure.
    public func request(_ request: Request, didCreateInitialURLRequest urlRequest: URLRequest) {
        current.requestDidCreateInitialURLRequest?(request, urlRequest)
    }
    /// Calls the closure.
    public func request(_ request: Request, didFailToCreateURLRequestWithError error: TinyFireError) {
        current.requestDidFailToCreateURLRequestWithError?(request, error)
    }
    /// Calls the closure.
    public func request(_ request: Request, didAdaptInitialRequest initialRequest: URLRequest, to adaptedRequest: URLRequest) {
        current.requestDidAdaptInitialRequestToAdaptedRequest?(request, initialRequest, adaptedRequest)
    }
    /// Calls the closure.
    public func request(_ request: Request, didFailToAdaptURLRequest initialRequest: URLRequest, withError error: TinyFireError) {
        current.requestDidFailToAdaptURLRequestWithError?(request, initialRequest, error)
    }
    /// Calls the closure.
    public func request(_ request: Request, didCreateURLRequest urlRequest: URLRequest) {
        current.requestDidCreateURLRequest?(request, urlRequest)
    }
    /// Calls the closure.
    public func request(_ request: Request, didStartTransferFor urlRequest: URLRequest) {
        current.requestDidStartTransfer?(request, urlRequest)
    }
    /// Calls the closure.
    public func request(_ request: Request, didReceiveResponse response: HTTPURLResponse) {
        current.requestDidReceiveResponse?(request, response)
    }
    /// Calls the closure.
    public func request(_ request: Request, willRedirectTo urlRequest: URLRequest, for response: HTTPURLResponse) {
        current.requestWillRedirect?(request, urlRequest, response)
    }
    /// Calls the closure.
    public func request(_ request: Request, didGatherMetrics metrics: TransferMetrics) {
        current.requestDidGatherMetrics?(request, metrics)
    }
    /// Calls the closure.
    public func request(_ request: Request, didCompleteTransferWithError error: TinyFireError?) {
        current.requestDidCompleteTransferWithError?(request, error)
    }
    /// Calls the closure.
    public func request(
        _ request: DataRequest, didValidateRequest urlRequest: URLRequest?, response: HTTPURLResponse, data: Data?,
        withResult result: Request.ValidationResult
    ) {
        current.requestDidValidateRequestResponseDataWithResult?(request, urlRequest, response, data, result)
    }
    /// Calls the closure.
    public func request(_ request: DataRequest, didParseResponse response: DataResponse<Data?, TinyFireError>) {
        current.requestDidParseResponse?(request, response)
    }
}

/// Logs each request through swift-log: start and retries at `.debug`, the outcome of every
/// attempt at `.info` (method, URL, status, bytes, time, reused connection) and failures at
/// `.warning` with the error's description.
public struct LoggingEventMonitor: EventMonitor {
    /// The logger.
    public let logger: Logger
    /// Where events are handled.
    public let queue: DispatchQueue

    /// Creates the monitor.
    /// - Parameters:
    ///   - logger: the logger; default label `org.tinyfire`.
    ///   - queue: default the shared monitor queue.
    public init(logger: Logger = Logger(label: "org.tinyfire"), queue: DispatchQueue? = nil) {
        self.logger = logger
        self.queue = queue ?? defaultEventMonitorQueue
    }

    private func metadata(_ request: Request) -> Logger.Metadata {
        var metadata: Logger.Metadata = ["request-id": "\(request.id)"]
        if let urlRequest = request.request { metadata["request"] = "\(urlRequest)" }
        if request.retryCount > 0 { metadata["retry"] = "\(request.retryCount)" }
        return metadata
    }

    /// Logs at `.debug`.
    public func requestDidResume(_ request: Request) {
        logger.debug("request resumed", metadata: metadata(request))
    }

    /// Logs at `.debug`.
    public func requestIsRetrying(_ request: Request) {
        logger.debug("request retrying", metadata: metadata(request))
    }

    /// Logs at `.info`.
    public func request(_ request: Request, didGatherMetrics metrics: TransferMetrics) {
        var metadata = metadata(request)
        metadata["status"] = "\(request.response.map { "\($0.status.code)" } ?? "none")"
        metadata["sent-bytes"] = "\(metrics.requestBytesSent)"
        metadata["received-bytes"] = "\(metrics.responseBytesReceived)"
        metadata["total-ms"] = "\(Int(metrics.total.seconds * 1000))"
        metadata["reused-connection"] = "\(metrics.reusedConnection)"
        logger.info("transfer complete", metadata: metadata)
    }

    /// Logs failures at `.warning`.
    public func request(_ request: Request, didCompleteTransferWithError error: TinyFireError?) {
        guard let error else { return }
        var metadata = metadata(request)
        metadata["error"] = "\(error)"
        logger.warning("transfer failed", metadata: metadata)
    }

    /// Logs at `.debug`, and the final error at `.warning`.
    public func requestDidFinish(_ request: Request) {
        if let error = request.error, !error.isSessionTaskError {
            var metadata = metadata(request)
            metadata["error"] = "\(error)"
            logger.warning("request failed", metadata: metadata)
        } else {
            logger.debug("request finished", metadata: metadata(request))
        }
    }
}
