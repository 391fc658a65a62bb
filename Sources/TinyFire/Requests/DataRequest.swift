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

    override func makeSink(for response: HTTPURLResponse, expectedLength: UInt64?) throws(SinkError) -> any OutputSink {
        let limit = session.configuration.maxInMemoryBodyBytes
        // A Content-Length (of an unencoded body) above the limit is refused before its first
        // byte, as curl's --max-filesize: a slow server cannot hold the request until the body
        // has crept past the limit.
        if let expectedLength, expectedLength > UInt64(limit) { throw .limitExceeded(limit: limit) }
        return MemorySink(limit: limit, expectedLength: expectedLength)
    }

    override func appendValidator(_ validator: @escaping @Sendable (URLRequest?, HTTPURLResponse, Data?) -> TinyFireError?) {
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

    /// Calls `completionHandler` with the body as untyped JSON (`JSONResponseSerializer`):
    /// Alamofire's deprecated `responseJSON`, kept for code written against its 4.x documents.
    /// - Parameters:
    ///   - queue: where to call the handler; default the session's root queue.
    ///   - dataPreprocessor: default passthrough.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    ///   - options: default `.allowFragments`.
    ///   - completionHandler: receives the response; its value is a `[String: any Sendable]`,
    ///     an `[any Sendable]`, a `String`, an `Int`, a `Double`, a `Bool` or nil.
    /// - Returns: the request.
    @available(*, deprecated, message: "Use responseDecodable instead, as Alamofire 5 advises.")
    @discardableResult
    public func responseJSON(
        queue: DispatchQueue? = nil,
        dataPreprocessor: any DataPreprocessor = JSONResponseSerializer.defaultDataPreprocessor,
        emptyResponseCodes: Set<Int> = JSONResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = JSONResponseSerializer.defaultEmptyRequestMethods,
        options: JSONResponseSerializer.ReadingOptions = .allowFragments,
        completionHandler: @escaping @Sendable (DataResponse<any Sendable, TinyFireError>) -> Void
    ) -> Self {
        response(
            queue: queue,
            responseSerializer: JSONResponseSerializer(
                dataPreprocessor: dataPreprocessor, emptyResponseCodes: emptyResponseCodes, emptyRequestMethods: emptyRequestMethods,
                options: options),
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
    ///   cancelled; default true, as in Alamofire 5.12.
    /// - Returns: the task.
    public func serializingResponse(automaticallyCancelling shouldAutomaticallyCancel: Bool = true) -> DataTask<Data?> {
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
    ///     default true.
    /// - Returns: the task.
    public func serializingResponse<Serializer: DataResponseSerializerProtocol>(
        using serializer: Serializer, automaticallyCancelling shouldAutomaticallyCancel: Bool = true
    ) -> DataTask<Serializer.SerializedObject> {
        let box = ResponseBox<DataResponse<Serializer.SerializedObject, TinyFireError>>()
        appendSerialized(serializer) { box.deliver($0) }
        return DataTask(request: self, box: box, automaticallyCancelling: shouldAutomaticallyCancel)
    }

    /// The body as `Data`, awaited.
    /// - Parameters:
    ///   - shouldAutomaticallyCancel: default true.
    ///   - dataPreprocessor: default passthrough.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the task.
    public func serializingData(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
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
    ///   - shouldAutomaticallyCancel: default true.
    ///   - dataPreprocessor: default passthrough.
    ///   - encoding: default the response's charset.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the task.
    public func serializingString(
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
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
    ///   - shouldAutomaticallyCancel: default true.
    ///   - dataPreprocessor: default passthrough.
    ///   - decoder: default `JSONDecoder()`.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the task.
    public func serializingDecodable<T: Decodable & Sendable>(
        _ type: T.Type = T.self,
        automaticallyCancelling shouldAutomaticallyCancel: Bool = true,
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
