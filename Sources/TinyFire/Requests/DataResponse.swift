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

/// The outcome of a `DataRequest`: request, response, body, metrics, serialization time and
/// result, as in Alamofire.
public struct DataResponse<Success: Sendable, Failure: Error>: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The request as sent (adapted, before redirects).
    public let request: URLRequest?
    /// The final response head.
    public let response: HTTPURLResponse?
    /// The body, when it was received.
    public let data: Data?
    /// Timings and counts of the last attempt.
    public let metrics: TransferMetrics?
    /// Seconds the serializer took.
    public let serializationDuration: TimeInterval
    /// The result.
    public let result: Result<Success, Failure>

    /// Creates a response.
    /// - Parameters:
    ///   - request: the request.
    ///   - response: the response head.
    ///   - data: the body.
    ///   - metrics: the metrics.
    ///   - serializationDuration: seconds spent serializing.
    ///   - result: the result.
    public init(
        request: URLRequest?, response: HTTPURLResponse?, data: Data?, metrics: TransferMetrics?, serializationDuration: TimeInterval,
        result: Result<Success, Failure>
    ) {
        self.request = request
        self.response = response
        self.data = data
        self.metrics = metrics
        self.serializationDuration = serializationDuration
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
        replacing(result.map(transform))
    }

    /// Transforms the success value with a throwing closure; a throw becomes the failure.
    /// - Parameter transform: applied to the success value.
    /// - Returns: a response whose failure is `any Error`.
    public func tryMap<NewSuccess: Sendable>(_ transform: (Success) throws -> NewSuccess) -> DataResponse<NewSuccess, any Error> {
        replacing(result.tryMapping(transform))
    }

    /// Transforms the failure.
    /// - Parameter transform: applied to the failure.
    /// - Returns: a response with the transformed failure.
    public func mapError<NewFailure: Error>(_ transform: (Failure) -> NewFailure) -> DataResponse<Success, NewFailure> {
        replacing(result.mapError(transform))
    }

    /// Transforms the failure with a throwing closure; a throw becomes the failure.
    /// - Parameter transform: applied to the failure.
    /// - Returns: a response whose failure is `any Error`.
    public func tryMapError<NewFailure: Error>(_ transform: (Failure) throws -> NewFailure) -> DataResponse<Success, any Error> {
        replacing(result.tryMappingError(transform))
    }

    private func replacing<S: Sendable, F: Error>(_ result: Result<S, F>) -> DataResponse<S, F> {
        DataResponse<S, F>(
            request: request, response: response, data: data, metrics: metrics, serializationDuration: serializationDuration, result: result
        )
    }

    /// `success(value)` or `failure(error)`.
    public var description: String {
        switch result {
        case .success(let value): return "success(\(value))"
        case .failure(let error): return "failure(\(error))"
        }
    }

    /// Request, response (status, headers, body), durations and result, one item per line.
    public var debugDescription: String {
        var lines: [String] = []
        if let request {
            lines.append("[Request]: \(request.method?.rawValue ?? "GET") \(request.url?.absoluteString ?? "(no URL)")")
            lines.append("    [Headers]: \(Self.describe(request.headers))")
            lines.append("    [Body]: \(Self.describe(body: request.httpBody))")
        } else {
            lines.append("[Request]: None")
        }
        if let response {
            lines.append("[Response]:")
            lines.append("    [Status Code]: \(response.status.code)")
            lines.append("    [Headers]: \(Self.describe(HTTPHeaders(response.headerFields)))")
            lines.append("    [Body]: \(Self.describe(body: data))")
        } else {
            lines.append("[Response]: None")
        }
        if let metrics {
            lines.append("[Network Duration]: \(metrics.total.seconds)s")
        } else {
            lines.append("[Network Duration]: None")
        }
        lines.append("[Serialization Duration]: \(serializationDuration)s")
        lines.append("[Result]: \(description)")
        return lines.joined(separator: "\n")
    }

    private static func describe(_ headers: HTTPHeaders) -> String {
        guard headers.fields.count > 0 else { return "None" }
        return "\n" + headers.fields.map { "        \($0.name.rawName): \($0.value)" }.joined(separator: "\n")
    }

    private static func describe(body: Data?) -> String {
        guard let body, !body.isEmpty else { return "None" }
        guard body.count <= 4096, let text = String(validating: body, as: UTF8.self) else { return "\(body.count) bytes" }
        return "\n        " + text.split(separator: "\n", omittingEmptySubsequences: false).joined(separator: "\n        ")
    }
}

extension Result {
    /// The success transformed by a throwing closure; a throw becomes the failure.
    func tryMapping<NewSuccess>(_ transform: (Success) throws -> NewSuccess) -> Result<NewSuccess, any Error> {
        switch self {
        case .success(let value):
            do { return .success(try transform(value)) } catch { return .failure(error) }
        case .failure(let error):
            return .failure(error)
        }
    }

    /// The failure transformed by a throwing closure; a throw becomes the failure.
    func tryMappingError<NewFailure: Error>(_ transform: (Failure) throws -> NewFailure) -> Result<Success, any Error> {
        switch self {
        case .success(let value):
            return .success(value)
        case .failure(let error):
            do { return .failure(try transform(error)) } catch { return .failure(error) }
        }
    }
}

/// The single response a serializer produced, for any number of awaiting tasks (data and
/// download responses alike).
final class ResponseBox<Response: Sendable>: Sendable {
    private struct State {
        var response: Response?
        /// The awaiting tasks (usually one: no array for it). Each is resumed exactly once:
        /// `deliver` takes them out under the lock, and a task that comes after it is resumed
        /// at once.
        var first: UnsafeContinuation<Response, Never>?
        var more: [UnsafeContinuation<Response, Never>] = []
    }
    private let state = Mutex(State())

    func deliver(_ response: Response) {
        let (first, more) = state.withLock { state in
            state.response = response
            defer {
                state.first = nil
                state.more = []
            }
            return (state.first, state.more)
        }
        first?.resume(returning: response)
        for waiter in more { waiter.resume(returning: response) }
    }

    var response: Response {
        get async {
            await withUnsafeContinuation { continuation in
                let ready = state.withLock { state -> Response? in
                    if let response = state.response { return response }
                    if state.first == nil { state.first = continuation } else { state.more.append(continuation) }
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        }
    }
}

/// An async view of a request's serialized outcome, as Alamofire's `DataTask`.
public struct DataTask<Value: Sendable>: Sendable {
    /// The request.
    public let request: DataRequest
    private let box: ResponseBox<DataResponse<Value, TinyFireError>>
    private let shouldAutomaticallyCancel: Bool

    init(request: DataRequest, box: ResponseBox<DataResponse<Value, TinyFireError>>, automaticallyCancelling: Bool) {
        self.request = request
        self.box = box
        self.shouldAutomaticallyCancel = automaticallyCancelling
        // Made inside a Swift task that is already cancelled: the request is cancelled now,
        // awaited or not (Alamofire 5.12).
        if automaticallyCancelling && Task.isCancelled { request.cancel() }
    }

    /// The whole response. When the task was made with `automaticallyCancelling: true`,
    /// cancelling the awaiting Swift task cancels the request.
    public var response: DataResponse<Value, TinyFireError> {
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
    /// - Throws: the `TinyFireError` the request failed with.
    public var value: Value {
        get async throws(TinyFireError) { try await result.get() }
    }

    /// Cancels the request.
    public func cancel() { request.cancel() }
    /// Resumes the request.
    public func resume() { request.resume() }
    /// Suspends the request.
    public func suspend() { request.suspend() }
}
