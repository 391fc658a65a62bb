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

/// A request whose body is collected in memory, bounded by the session's
/// `maxInMemoryBodyBytes` (counted after decompression).
public class DataRequest: Request, @unchecked Sendable {
    /// The complete body, once the request finished.
    public var data: Data? {
        protected.withLock { $0.output?.data }
    }

    override func makeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> ResponseBodySink {
        MemorySink(limit: session.configuration.maxInMemoryBodyBytes, expectedLength: expectedLength)
    }

    override func appendValidator(_ validator: @escaping @Sendable (URLRequest?, HTTPResponse, Data?) -> TinyFireError?) {
        super.appendValidator { [weak self] request, response, data in
            let error = validator(request, response, data)
            if let self, let monitor = eventMonitor {
                let result: ValidationResult = error.map { .failure($0) } ?? .success(())
                monitor.request(self, didValidateRequest: request, response: response, data: data, withResult: result)
            }
            return error
        }
    }

    // MARK: - Response handlers

    /// Calls `completionHandler` on `queue` with the unserialized response: heads, body (nil
    /// on failure), metrics and result. Starts the request if the session starts requests
    /// immediately.
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - completionHandler: receives the `DataResponse`.
    /// - Returns: the request.
    @discardableResult
    public func response(
        queue: DispatchQueue? = nil, completionHandler: @escaping @Sendable (DataResponse<Data?, TinyFireError>) -> Void
    ) -> Self {
        let queue = queue ?? session.rootQueue
        appendResponseSerializer(inline: true) { [self] in
            let response = makeUnserializedResponse()
            eventMonitor?.request(self, didParseResponse: response)
            responseSerializerDidComplete { queue.async { completionHandler(response) } }
        }
        return self
    }

    /// Calls `completionHandler` on `queue` with the value `responseSerializer` produced.
    /// Serialization runs on the session's serialization queue; a serialization failure is
    /// offered to the retrier.
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - responseSerializer: the serializer.
    ///   - completionHandler: receives the `DataResponse`.
    /// - Returns: the request.
    @discardableResult
    public func response<Serializer: DataResponseSerializerProtocol>(
        queue: DispatchQueue? = nil, responseSerializer: Serializer,
        completionHandler: @escaping @Sendable (DataResponse<Serializer.SerializedObject, TinyFireError>) -> Void
    ) -> Self {
        let queue = queue ?? session.rootQueue
        appendSerialized(responseSerializer) { response in queue.async { completionHandler(response) } }
        return self
    }

    /// Serializes with `serializer` and hands the response to `deliver` on the serialization
    /// queue (the async tasks use this to skip a queue hop).
    func appendSerialized<Serializer: DataResponseSerializerProtocol>(
        _ serializer: Serializer, deliver: @escaping @Sendable (DataResponse<Serializer.SerializedObject, TinyFireError>) -> Void
    ) {
        // Handing over the body as Data is constant work: no queue hop for it.
        let inline = (serializer as? DataResponseSerializer)?.dataPreprocessor is PassthroughPreprocessor
        appendResponseSerializer(inline: inline) { [self] in
            let started = Instant.now()
            let snapshot = snapshot
            let data = snapshot.output?.data
            let result: Result<Serializer.SerializedObject, TinyFireError>
            do {
                result = .success(
                    try serializer.serialize(request: snapshot.request, response: snapshot.response, data: data, error: snapshot.error))
            } catch let error as TinyFireError {
                result = .failure(error)
            } catch {
                result = .failure(.responseSerializationFailed(reason: .customSerializationFailed(error: error)))
            }
            let response = DataResponse(
                request: snapshot.request, response: snapshot.response, data: data, metrics: snapshot.metrics,
                serializationDuration: Instant.now().since(started).seconds, result: result)
            eventMonitor?.request(self, didParseResponse: response)
            guard case .failure(let error) = result, snapshot.error == nil else {
                responseSerializerDidComplete { deliver(response) }
                return
            }
            retryResult(forSerializationError: error) { [self] finalError in
                guard let finalError else { return }
                let failed = DataResponse<Serializer.SerializedObject, TinyFireError>(
                    request: response.request, response: response.response, data: data, metrics: response.metrics,
                    serializationDuration: response.serializationDuration, result: .failure(finalError))
                responseSerializerDidComplete { deliver(failed) }
            }
        }
    }

    /// The body as `Data`.
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - dataPreprocessor: default passthrough.
    ///   - emptyResponseCodes: statuses allowed to be empty; default 204, 205.
    ///   - emptyRequestMethods: methods allowed to be empty; default HEAD.
    ///   - completionHandler: receives the response.
    /// - Returns: the request.
    @discardableResult
    public func responseData(
        queue: DispatchQueue? = nil,
        dataPreprocessor: any DataPreprocessor = DataResponseSerializer.defaultDataPreprocessor,
        emptyResponseCodes: Set<Int> = DataResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = DataResponseSerializer.defaultEmptyRequestMethods,
        completionHandler: @escaping @Sendable (DataResponse<Data, TinyFireError>) -> Void
    ) -> Self {
        response(
            queue: queue,
            responseSerializer: DataResponseSerializer(
                dataPreprocessor: dataPreprocessor, emptyResponseCodes: emptyResponseCodes, emptyRequestMethods: emptyRequestMethods),
            completionHandler: completionHandler)
    }

    /// The body as a `String`.
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - dataPreprocessor: default passthrough.
    ///   - encoding: default the response's charset, else ISO-8859-1.
    ///   - emptyResponseCodes: statuses allowed to be empty; default 204, 205.
    ///   - emptyRequestMethods: methods allowed to be empty; default HEAD.
    ///   - completionHandler: receives the response.
    /// - Returns: the request.
    @discardableResult
    public func responseString(
        queue: DispatchQueue? = nil,
        dataPreprocessor: any DataPreprocessor = StringResponseSerializer.defaultDataPreprocessor,
        encoding: String.Encoding? = nil,
        emptyResponseCodes: Set<Int> = StringResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = StringResponseSerializer.defaultEmptyRequestMethods,
        completionHandler: @escaping @Sendable (DataResponse<String, TinyFireError>) -> Void
    ) -> Self {
        response(
            queue: queue,
            responseSerializer: StringResponseSerializer(
                dataPreprocessor: dataPreprocessor, encoding: encoding, emptyResponseCodes: emptyResponseCodes,
                emptyRequestMethods: emptyRequestMethods),
            completionHandler: completionHandler)
    }

    /// The body decoded as `T`.
    /// - Parameters:
    ///   - type: the type.
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - dataPreprocessor: default passthrough.
    ///   - decoder: default `JSONDecoder()`.
    ///   - emptyResponseCodes: statuses allowed to be empty; default 204, 205.
    ///   - emptyRequestMethods: methods allowed to be empty; default HEAD.
    ///   - completionHandler: receives the response.
    /// - Returns: the request.
    @discardableResult
    public func responseDecodable<T: Decodable & Sendable>(
        of type: T.Type = T.self,
        queue: DispatchQueue? = nil,
        dataPreprocessor: any DataPreprocessor = DecodableResponseSerializer<T>.defaultDataPreprocessor,
        decoder: any DataDecoder = JSONDecoder(),
        emptyResponseCodes: Set<Int> = DecodableResponseSerializer<T>.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = DecodableResponseSerializer<T>.defaultEmptyRequestMethods,
        completionHandler: @escaping @Sendable (DataResponse<T, TinyFireError>) -> Void
    ) -> Self {
        response(
            queue: queue,
            responseSerializer: DecodableResponseSerializer<T>(
                dataPreprocessor: dataPreprocessor, decoder: decoder, emptyResponseCodes: emptyResponseCodes,
                emptyRequestMethods: emptyRequestMethods),
            completionHandler: completionHandler)
    }

    func makeUnserializedResponse() -> DataResponse<Data?, TinyFireError> {
        let snapshot = snapshot
        let data = snapshot.output?.data
        let result: Result<Data?, TinyFireError> = snapshot.error.map { .failure($0) } ?? .success(data)
        return DataResponse(
            request: snapshot.request, response: snapshot.response, data: data, metrics: snapshot.metrics, serializationDuration: 0,
            result: result)
    }

    // MARK: - Swift concurrency

    /// The unserialized response, awaited.
    /// - Parameter shouldAutomaticallyCancel: cancel the request when the awaiting task is
    ///   cancelled; default false, as in Alamofire.
    /// - Returns: the task.
    public func serializingResponse(automaticallyCancelling shouldAutomaticallyCancel: Bool = false) -> DataTask<Data?> {
        let box = ResponseBox<DataResponse<Data?, TinyFireError>>()
        appendResponseSerializer(inline: true) { [self] in
            let response = makeUnserializedResponse()
            eventMonitor?.request(self, didParseResponse: response)
            responseSerializerDidComplete { box.deliver(response) }
        }
        return DataTask(request: self, box: box, automaticallyCancelling: shouldAutomaticallyCancel)
    }

    /// The value `serializer` produces, awaited.
    /// - Parameters:
    ///   - serializer: the serializer.
    ///   - shouldAutomaticallyCancel: cancel the request when the awaiting task is cancelled;
    ///     default false.
    /// - Returns: the task.
    public func serializingResponse<Serializer: DataResponseSerializerProtocol>(
        using serializer: Serializer, automaticallyCancelling shouldAutomaticallyCancel: Bool = false
    ) -> DataTask<Serializer.SerializedObject> {
        let box = ResponseBox<DataResponse<Serializer.SerializedObject, TinyFireError>>()
        appendSerialized(serializer) { box.deliver($0) }
        return DataTask(request: self, box: box, automaticallyCancelling: shouldAutomaticallyCancel)
    }

    /// The body as `Data`, awaited.
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: default false.
    ///   - dataPreprocessor: default passthrough.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the task.
    public func serializingData(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = false,
        dataPreprocessor: any DataPreprocessor = DataResponseSerializer.defaultDataPreprocessor,
        emptyResponseCodes: Set<Int> = DataResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = DataResponseSerializer.defaultEmptyRequestMethods
    ) -> DataTask<Data> {
        serializingResponse(
            using: DataResponseSerializer(
                dataPreprocessor: dataPreprocessor, emptyResponseCodes: emptyResponseCodes, emptyRequestMethods: emptyRequestMethods),
            automaticallyCancelling: shouldAutomaticallyCancel)
    }

    /// The body as a `String`, awaited.
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: default false.
    ///   - dataPreprocessor: default passthrough.
    ///   - encoding: default the response's charset.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the task.
    public func serializingString(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = false,
        dataPreprocessor: any DataPreprocessor = StringResponseSerializer.defaultDataPreprocessor,
        encoding: String.Encoding? = nil,
        emptyResponseCodes: Set<Int> = StringResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = StringResponseSerializer.defaultEmptyRequestMethods
    ) -> DataTask<String> {
        serializingResponse(
            using: StringResponseSerializer(
                dataPreprocessor: dataPreprocessor, encoding: encoding, emptyResponseCodes: emptyResponseCodes,
                emptyRequestMethods: emptyRequestMethods),
            automaticallyCancelling: shouldAutomaticallyCancel)
    }

    /// The body decoded as `T`, awaited.
    /// - Parameters:
    ///   - type: the type.
    ///   - shouldAutomaticallyCancel: default false.
    ///   - dataPreprocessor: default passthrough.
    ///   - decoder: default `JSONDecoder()`.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the task.
    public func serializingDecodable<T: Decodable & Sendable>(
        _ type: T.Type = T.self,
        automaticallyCancelling shouldAutomaticallyCancel: Bool = false,
        dataPreprocessor: any DataPreprocessor = DecodableResponseSerializer<T>.defaultDataPreprocessor,
        decoder: any DataDecoder = JSONDecoder(),
        emptyResponseCodes: Set<Int> = DecodableResponseSerializer<T>.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = DecodableResponseSerializer<T>.defaultEmptyRequestMethods
    ) -> DataTask<T> {
        serializingResponse(
            using: DecodableResponseSerializer<T>(
                dataPreprocessor: dataPreprocessor, decoder: decoder, emptyResponseCodes: emptyResponseCodes,
                emptyRequestMethods: emptyRequestMethods),
            automaticallyCancelling: shouldAutomaticallyCancel)
    }
}

/// A `DataRequest` that sends a body (Alamofire's `UploadRequest`): from memory, from a file
/// through sendfile or a fixed 64 KiB buffer, from a stream in 64 KiB chunks, or a multipart
/// form. Memory does not grow with a file, stream or spilled multipart body.
public final class UploadRequest: DataRequest, @unchecked Sendable {
    /// What the body is made of.
    public enum Uploadable: Sendable {
        /// Bytes in memory (sent from the `URLRequest`'s `httpBody`).
        case data(Data)
        /// A file, read as it is sent; its size at the start of each attempt is the
        /// `Content-Length`, and a file that changes size mid-upload fails the request.
        case file(URL)
        /// A stream of unknown length, sent with `Transfer-Encoding: chunked`. A stream is read
        /// once: a retry or a 307/308 redirect fails with `.requestBodyReadFailed`.
        case stream(any UploadByteStream)
        /// A multipart form, encoded when the request starts (see `MultipartFormData`).
        case multipart(MultipartFormData)
    }

    /// The body's source.
    public var uploadable: Uploadable { body.uploadable }
    let body: UploadBody

    init(
        session: Session, convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)?, uploadable: Uploadable,
        multipartThreshold: UInt64 = MultipartFormData.encodingMemoryThreshold
    ) {
        body = UploadBody(uploadable, multipartThreshold: multipartThreshold)
        super.init(session: session, convertible: convertible, interceptor: interceptor)
    }

    override func prepare(_ spec: inout RequestSpec) throws(TinyFireError) {
        try body.apply(to: &spec)
        if isFinished { body.release() }  // cancelled while a multipart body was encoded
    }

    override func didFinishPipeline() {
        // Success, failure or cancellation: the spilled encoding is not needed any more.
        body.release()
    }

    /// The temporary file holding the spilled part of a multipart body while the request
    /// runs; nil for bodies encoded in memory, and once the request finished.
    public var multipartTemporaryFile: URL? { body.temporaryFile }

    override var uploadBody: UploadBody? { body }
}

/// A request body that is not the `URLRequest`'s `httpBody`, prepared for each attempt:
/// a file, a stream (claimed once), or a multipart form encoded on the first attempt and
/// kept until the request finishes.
final class UploadBody: Sendable {
    let uploadable: UploadRequest.Uploadable
    private let multipartThreshold: UInt64
    private let streamSource: StreamBodySource?
    private let encodedMultipart = Mutex<MultipartFormData.EncodedBody?>(nil)

    init(_ uploadable: UploadRequest.Uploadable, multipartThreshold: UInt64 = MultipartFormData.encodingMemoryThreshold) {
        self.uploadable = uploadable
        self.multipartThreshold = multipartThreshold
        if case .stream(let stream) = uploadable {
            streamSource = StreamBodySource(stream)
        } else {
            streamSource = nil
        }
    }

    /// Sets `spec`'s body for one attempt.
    func apply(to spec: inout RequestSpec) throws(TinyFireError) {
        switch uploadable {
        case .data:
            return
        case .file(let url):
            spec.body = nil
            spec.bodySource = .segments([try RequestBodyFile.segment(regularFileAt: url.path(percentEncoded: false))])
        case .stream:
            spec.body = nil
            spec.bodySource = streamSource.map { .stream($0) }
        case .multipart(let form):
            spec.body = nil
            spec.bodySource = .segments(try encoded(form).segments)
            if spec.headers.value(for: "Content-Type") == nil {
                spec.headers.add(name: "Content-Type", value: form.contentType)
            }
        }
    }

    /// The form's encoding, made on first use and kept until `release()`.
    private func encoded(_ form: MultipartFormData) throws(TinyFireError) -> MultipartFormData.EncodedBody {
        let threshold = multipartThreshold
        return try encodedMultipart.withLock { existing throws(TinyFireError) -> MultipartFormData.EncodedBody in
            if let existing { return existing }
            let body = try form.encodeForUpload(threshold: threshold)
            existing = body
            return body
        }
    }

    /// The body as pieces to copy into an offline queue, with the Content-Type a form needs;
    /// nil for a stream (read once, it cannot be kept).
    func piecesForQueue() throws(TinyFireError) -> (segments: [BodySegment], contentType: String?)? {
        switch uploadable {
        case .data(let data): return ([.bytes(data)], nil)
        case .file(let url): return ([try RequestBodyFile.segment(regularFileAt: url.path(percentEncoded: false))], nil)
        case .stream: return nil
        case .multipart(let form): return (try encoded(form).segments, form.contentType)
        }
    }

    /// Removes a spilled multipart encoding (idempotent).
    func release() {
        let encoded = encodedMultipart.withLock { body -> MultipartFormData.EncodedBody? in
            defer { body = nil }
            return body
        }
        encoded?.removeTemporaryFile()
    }

    /// The spilled encoding's file, while it exists.
    var temporaryFile: URL? { encodedMultipart.withLock { $0?.temporaryFile } }
}

/// The outcome of a `DataRequest`: request, response, body, metrics, serialization time and
/// result, as in Alamofire.
public struct DataResponse<Success: Sendable, Failure: Error>: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The request as sent (adapted, before redirects).
    public let request: URLRequest?
    /// The final response head.
    public let response: HTTPResponse?
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
        request: URLRequest?, response: HTTPResponse?, data: Data?, metrics: TransferMetrics?, serializationDuration: TimeInterval,
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
        let mapped: Result<NewSuccess, any Error>
        switch result {
        case .success(let value):
            do { mapped = .success(try transform(value)) } catch { mapped = .failure(error) }
        case .failure(let error):
            mapped = .failure(error)
        }
        return replacing(mapped)
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
        let mapped: Result<Success, any Error>
        switch result {
        case .success(let value):
            mapped = .success(value)
        case .failure(let error):
            do { mapped = .failure(try transform(error)) } catch { mapped = .failure(error) }
        }
        return replacing(mapped)
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

/// The single response a serializer produced, for any number of awaiting tasks (data and
/// download responses alike).
final class ResponseBox<Response: Sendable>: Sendable {
    private struct State {
        var response: Response?
        var waiters: [CheckedContinuation<Response, Never>] = []
    }
    private let state = Mutex(State())

    func deliver(_ response: Response) {
        let waiters = state.withLock { state in
            state.response = response
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: response) }
    }

    var response: Response {
        get async {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> Response? in
                    if let response = state.response { return response }
                    state.waiters.append(continuation)
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
