import Dispatch
import HTTPTypes

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A request whose body is collected in memory, bounded by the session's
/// `maxInMemoryBodyBytes` (counted after decompression).
public class DataRequest: Request, @unchecked Sendable {
    /// The body received so far is not exposed; this is the complete body once finished.
    public var data: Data? {
        if case .success(.data(let data)) = output { return data }
        return nil
    }

    override func makeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> ResponseBodySink {
        MemorySink(limit: session.configuration.maxInMemoryBodyBytes, expectedLength: expectedLength)
    }

    /// Calls `completionHandler` on `queue` with the response, the body (nil on failure) and
    /// the result. Starts the request if the session starts requests immediately.
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - completionHandler: receives the `DataResponse`.
    /// - Returns: the request.
    @discardableResult
    public func response(
        queue: DispatchQueue? = nil,
        completionHandler: @escaping @Sendable (DataResponse<Data?, TinyFireError>) -> Void
    ) -> Self {
        let queue = queue ?? session.rootQueue
        appendFinishHandler { [self] in
            let response = makeResponse()
            queue.async { completionHandler(response) }
        }
        return self
    }

    func makeResponse() -> DataResponse<Data?, TinyFireError> {
        let outcome = outcome { output -> Data? in
            if case .data(let body) = output { return body }
            return nil
        }
        return DataResponse(
            request: outcome.request, response: outcome.response, data: outcome.value, metrics: outcome.metrics,
            result: outcome.result)
    }

    /// An async handle on this request's response (Swift concurrency).
    /// - Returns: a `DataTask` whose `value` is the body (empty when there was none).
    public func serializingData() -> DataTask<Data> {
        DataTask(request: self) { response in
            response.map { $0 ?? Data() }
        }
    }
}

/// A `DataRequest` that sends a body (Alamofire's `UploadRequest`).
public final class UploadRequest: DataRequest, @unchecked Sendable {}

/// The outcome of a `DataRequest`: heads, body, metrics and result, as in Alamofire.
public struct DataResponse<Success: Sendable, Failure: Error>: Sendable, CustomDebugStringConvertible {
    /// The last request head sent.
    public let request: HTTPRequest?
    /// The final response head.
    public let response: HTTPResponse?
    /// The body, when it was received.
    public let data: Data?
    /// Timings and counts.
    public let metrics: TransferMetrics?
    /// The result.
    public let result: Result<Success, Failure>

    /// Creates a response.
    public init(
        request: HTTPRequest?, response: HTTPResponse?, data: Data?, metrics: TransferMetrics?,
        result: Result<Success, Failure>
    ) {
        self.request = request
        self.response = response
        self.data = data
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

    /// Transforms the success value.
    /// - Parameter transform: applied to the success value.
    /// - Returns: a response with the transformed result.
    public func map<NewSuccess: Sendable>(_ transform: (Success) -> NewSuccess) -> DataResponse<NewSuccess, Failure> {
        DataResponse<NewSuccess, Failure>(
            request: request, response: response, data: data, metrics: metrics, result: result.map(transform))
    }

    /// One line: method, target, status, body size and outcome.
    public var debugDescription: String {
        let method = request?.method.rawValue ?? "?"
        let target = (request?.authority ?? "") + (request?.path ?? "")
        let status = response.map { "\($0.status.code)" } ?? "no response"
        let size = data.map { "\($0.count) bytes" } ?? "no data"
        let outcome: String
        switch result {
        case .success: outcome = "success"
        case .failure(let error): outcome = "failure: \(error)"
        }
        return "[\(method) \(target)] [\(status)] [\(size)] [\(outcome)]"
    }
}

/// An async view of a request's outcome, as Alamofire's `DataTask`.
public struct DataTask<Value: Sendable>: Sendable {
    private let request: DataRequest
    private let transform: @Sendable (DataResponse<Data?, TinyFireError>) -> DataResponse<Value, TinyFireError>

    init(
        request: DataRequest,
        transform: @escaping @Sendable (DataResponse<Data?, TinyFireError>) -> DataResponse<Value, TinyFireError>
    ) {
        self.request = request
        self.transform = transform
    }

    /// The whole response; cancelling the calling task cancels the request.
    public var response: DataResponse<Value, TinyFireError> {
        get async {
            let request = self.request
            let transform = self.transform
            return await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    // Resumed straight from the thread that completes the request: a
                    // continuation resume only enqueues the task, so no queue hop is needed.
                    request.appendFinishHandler {
                        continuation.resume(returning: transform(request.makeResponse()))
                    }
                }
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
    /// - Throws: the `TinyFireError` the request failed with.
    public var value: Value {
        get async throws(TinyFireError) { try await result.get() }
    }

    /// Cancels the request.
    public func cancel() { request.cancel() }
}
