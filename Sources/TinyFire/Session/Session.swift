import Dispatch
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// swift-format-ignore: AlwaysUseLowerCamelCase
/// `Session.default`, as Alamofire's `AF`.
public let TF = Session.default

// swift-format-ignore: AlwaysUseLowerCamelCase
/// Alamofire's spelling of `TF`, so code ported from Alamofire compiles with only its import
/// changed.
public let AF = Session.default

/// Creates and runs requests, as Alamofire's `Session`: one I/O thread (epoll) and one
/// connection pool per session, shared by all its requests.
public final class Session: Sendable {
    /// The shared session, with the default configuration. It lives for the whole process.
    public static let `default` = Session()

    /// Bounds, timeouts and policies.
    public let configuration: SessionConfiguration
    /// The serial queue the request pipeline (adapters, retriers, validators) runs on, and
    /// where completion handlers run unless a request names another queue.
    public let rootQueue: DispatchQueue
    /// Where response serializers run; default a serial queue targeting `rootQueue`.
    public let serializationQueue: DispatchQueue
    /// Where `URLRequest`s are built from their convertibles; nil (the default) builds them on
    /// the thread that starts the request.
    public let requestQueue: DispatchQueue?
    /// Whether adding a response handler starts the request (default true).
    public let startRequestsImmediately: Bool
    /// Adapts and retries every request (before a request's own interceptor).
    public let interceptor: (any RequestInterceptor)?
    /// Decides which hosts' certificates are evaluated how; nil validates every host against
    /// the configured trust anchors.
    public let serverTrustManager: ServerTrustManager?
    /// Decides redirects for every request without its own handler; nil follows them
    /// (up to `configuration.maxRedirects`).
    public let redirectHandler: (any RedirectHandler)?
    /// Receives every request's events.
    public let eventMonitor: CompositeEventMonitor?
    /// When a request is built and adapted: at `resume()` (`.lazy`, the default) or as soon as
    /// it is created (`.eager`).
    public let requestSetup: RequestSetup

    /// When a created request is set up (its `URLRequest` built and adapted), as Alamofire's
    /// `Session.RequestSetup` (5.12).
    public enum RequestSetup: Sendable {
        /// At `resume()` (the default): a request is inert until then.
        case lazy
        /// Right after creation, on the request queue (else the root queue): `request`,
        /// `cURLDescription()` and the adapters' work are there before `resume()`; the transfer
        /// still waits for it.
        case eager
    }
    let engine: Engine
    private let activeRequests = Mutex<[ObjectIdentifier: Request]>([:])

    /// Creates a session and starts its I/O thread.
    /// - Parameters:
    ///   - configuration: bounds, timeouts and policies; default `.default`.
    ///   - rootQueue: serial queue for the pipeline and handlers; default a new one.
    ///   - startRequestsImmediately: start a request when a response handler is added.
    ///   - requestSetup: when requests are built and adapted; default `.lazy`.
    ///   - requestQueue: where requests are built; default the starting thread.
    ///   - serializationQueue: where serializers run; default a serial queue targeting `rootQueue`.
    ///   - interceptor: adapts and retries every request; default none.
    ///   - serverTrustManager: certificate evaluation per host; default none (system trust).
    ///   - redirectHandler: redirect policy; default follow.
    ///   - eventMonitors: receive every request's events; default none.
    public init(
        configuration: SessionConfiguration = .default,
        rootQueue: DispatchQueue = DispatchQueue(label: "org.tinyfire.session.rootQueue"),
        startRequestsImmediately: Bool = true,
        requestSetup: RequestSetup = .lazy,
        requestQueue: DispatchQueue? = nil,
        serializationQueue: DispatchQueue? = nil,
        interceptor: (any RequestInterceptor)? = nil,
        serverTrustManager: ServerTrustManager? = nil,
        redirectHandler: (any RedirectHandler)? = nil,
        eventMonitors: [any EventMonitor] = []
    ) {
        self.requestSetup = requestSetup
        self.configuration = configuration
        self.rootQueue = rootQueue
        self.serializationQueue = serializationQueue ?? DispatchQueue(label: "\(rootQueue.label).serializationQueue", target: rootQueue)
        self.startRequestsImmediately = startRequestsImmediately
        self.requestQueue = requestQueue
        self.interceptor = interceptor
        self.serverTrustManager = serverTrustManager
        self.redirectHandler = redirectHandler
        self.eventMonitor = eventMonitors.isEmpty ? nil : CompositeEventMonitor(monitors: eventMonitors)
        self.engine = Engine(settings: configuration.engineSettings)
    }

    deinit {
        engine.shutdown()
    }

    // MARK: - Requests

    /// Creates a request from parts, encoding `parameters` with `encoder`.
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - parameters: values to encode; default none.
    ///   - encoder: where and how they go; default URL-encoded form (query for GET/HEAD/DELETE).
    ///   - headers: headers added to the session's defaults (a request's own win).
    ///   - interceptor: this request's interceptor, after the session's.
    ///   - requestModifier: changes the request after it is built, before parameters are encoded.
    /// - Returns: the request; it starts when a response handler is added.
    public func request<Parameters: Encodable & Sendable>(
        _ convertible: any URLConvertible, method: HTTPMethod = .get, parameters: Parameters? = nil,
        encoder: any ParameterEncoder = URLEncodedFormParameterEncoder.default, headers: HTTPHeaders? = nil,
        interceptor: (any RequestInterceptor)? = nil, requestModifier: RequestModifier? = nil
    ) -> DataRequest {
        let convertible = RequestEncodableConvertible(
            url: convertible, method: method, parameters: parameters, encoder: encoder, headers: headers, requestModifier: requestModifier)
        return DataRequest(session: self, convertible: convertible, interceptor: interceptor)
    }

    /// Creates a request from parts with untyped `Parameters` (`[String: Any]`) and a
    /// `ParameterEncoding`, as Alamofire's 4.x-style `request(_:method:parameters:encoding:…)`.
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - parameters: values to encode; default none.
    ///   - encoding: where and how they go; default `URLEncoding.default` (the query for
    ///     GET/HEAD/DELETE, a form body otherwise).
    ///   - headers: headers added to the session's defaults (a request's own win).
    ///   - interceptor: this request's interceptor, after the session's.
    ///   - requestModifier: changes the request after it is built, before parameters are encoded.
    /// - Returns: the request; it starts when a response handler is added.
    public func request(
        _ convertible: any URLConvertible, method: HTTPMethod = .get, parameters: Parameters? = nil,
        encoding: any ParameterEncoding = URLEncoding.default, headers: HTTPHeaders? = nil,
        interceptor: (any RequestInterceptor)? = nil, requestModifier: RequestModifier? = nil
    ) -> DataRequest {
        let convertible = RequestConvertible(
            url: convertible, method: method, parameters: parameters, encoding: encoding, headers: headers, requestModifier: requestModifier
        )
        return DataRequest(session: self, convertible: convertible, interceptor: interceptor)
    }

    /// Creates a request from parts, without parameters.
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - headers: headers added to the session's defaults.
    ///   - interceptor: this request's interceptor.
    ///   - requestModifier: changes the request after it is built.
    /// - Returns: the request.
    public func request(
        _ convertible: any URLConvertible, method: HTTPMethod = .get, headers: HTTPHeaders? = nil,
        interceptor: (any RequestInterceptor)? = nil, requestModifier: RequestModifier? = nil
    ) -> DataRequest {
        request(
            convertible, method: method, parameters: Empty?.none, encoder: URLEncodedFormParameterEncoder.default, headers: headers,
            interceptor: interceptor, requestModifier: requestModifier)
    }

    /// Creates a request whose body is handed to stream handlers as it arrives.
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - headers: headers added to the session's defaults.
    ///   - automaticallyCancelOnStreamError: cancel when a handler throws or a serializer
    ///     fails; default false.
    ///   - interceptor: this request's interceptor.
    ///   - requestModifier: changes the request after it is built.
    /// - Returns: the request; it starts when a stream handler is added.
    public func streamRequest(
        _ convertible: any URLConvertible, method: HTTPMethod = .get, headers: HTTPHeaders? = nil,
        automaticallyCancelOnStreamError: Bool = false, interceptor: (any RequestInterceptor)? = nil,
        requestModifier: RequestModifier? = nil
    ) -> DataStreamRequest {
        streamRequest(
            convertible, method: method, parameters: Empty?.none, encoder: URLEncodedFormParameterEncoder.default, headers: headers,
            automaticallyCancelOnStreamError: automaticallyCancelOnStreamError, interceptor: interceptor,
            requestModifier: requestModifier)
    }

    /// Creates a streaming request from parts, encoding `parameters` with `encoder`.
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - parameters: values to encode.
    ///   - encoder: where and how they go; default URL-encoded form.
    ///   - headers: headers added to the session's defaults.
    ///   - automaticallyCancelOnStreamError: cancel when a handler throws or a serializer
    ///     fails; default false.
    ///   - interceptor: this request's interceptor.
    ///   - requestModifier: changes the request after it is built.
    /// - Returns: the request; it starts when a stream handler is added.
    public func streamRequest<Parameters: Encodable & Sendable>(
        _ convertible: any URLConvertible, method: HTTPMethod = .get, parameters: Parameters? = nil,
        encoder: any ParameterEncoder = URLEncodedFormParameterEncoder.default, headers: HTTPHeaders? = nil,
        automaticallyCancelOnStreamError: Bool = false, interceptor: (any RequestInterceptor)? = nil,
        requestModifier: RequestModifier? = nil
    ) -> DataStreamRequest {
        let convertible = RequestEncodableConvertible(
            url: convertible, method: method, parameters: parameters, encoder: encoder, headers: headers, requestModifier: requestModifier)
        return DataStreamRequest(
            session: self, convertible: convertible, interceptor: interceptor,
            automaticallyCancelOnStreamError: automaticallyCancelOnStreamError)
    }

    /// Creates a streaming request from a `URLRequestConvertible`.
    /// - Parameters:
    ///   - convertible: builds the request.
    ///   - automaticallyCancelOnStreamError: cancel when a handler throws or a serializer
    ///     fails; default false.
    ///   - interceptor: this request's interceptor.
    /// - Returns: the request.
    public func streamRequest(
        _ convertible: any URLRequestConvertible, automaticallyCancelOnStreamError: Bool = false,
        interceptor: (any RequestInterceptor)? = nil
    ) -> DataStreamRequest {
        DataStreamRequest(
            session: self, convertible: convertible, interceptor: interceptor,
            automaticallyCancelOnStreamError: automaticallyCancelOnStreamError)
    }

    /// Creates a request from a `URLRequestConvertible` (a router).
    /// - Parameters:
    ///   - convertible: builds the request.
    ///   - interceptor: this request's interceptor.
    /// - Returns: the request.
    public func request(_ convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)? = nil) -> DataRequest {
        DataRequest(session: self, convertible: convertible, interceptor: interceptor)
    }

    /// Creates a request that sends `data` as its body (`Content-Length` framing).
    /// - Parameters:
    ///   - data: the body, sent from memory.
    ///   - convertible: the URL.
    ///   - method: the method; default POST.
    ///   - headers: headers added to the session's defaults.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: where a multipart form is spilled (its `temporaryDirectory`); accepted
    ///     and unused for other bodies (Alamofire's signature).
    ///   - requestModifier: changes the request after it is built.
    /// - Returns: the request.
    public func upload(
        _ data: Data, to convertible: any URLConvertible, method: HTTPMethod = .post, headers: HTTPHeaders? = nil,
        interceptor: (any RequestInterceptor)? = nil, fileManager: FileManager = .default,
        requestModifier: RequestModifier? = nil
    ) -> UploadRequest {
        let convertible = ParameterlessRequestConvertible(
            url: convertible, method: method, headers: headers, body: data, requestModifier: requestModifier)
        return UploadRequest(session: self, convertible: convertible, interceptor: interceptor, uploadable: .data(data))
    }

    /// Creates a request that streams a file as its body, through a fixed 64 KiB buffer:
    /// memory does not grow with the file. Bodies of `expectContinueThreshold` bytes or more
    /// are sent with `Expect: 100-continue`.
    /// - Parameters:
    ///   - fileURL: the file; its size when the request starts is the `Content-Length`.
    ///   - convertible: the URL.
    ///   - method: the method; default POST.
    ///   - headers: headers added to the session's defaults.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: where a multipart form is spilled (its `temporaryDirectory`); accepted
    ///     and unused for other bodies (Alamofire's signature).
    ///   - requestModifier: changes the request after it is built.
    /// - Returns: the request.
    public func upload(
        _ fileURL: URL, to convertible: any URLConvertible, method: HTTPMethod = .post, headers: HTTPHeaders? = nil,
        interceptor: (any RequestInterceptor)? = nil, fileManager: FileManager = .default,
        requestModifier: RequestModifier? = nil
    ) -> UploadRequest {
        let convertible = ParameterlessRequestConvertible(
            url: convertible, method: method, headers: headers, body: nil, requestModifier: requestModifier)
        return UploadRequest(
            session: self, convertible: convertible, interceptor: interceptor, uploadable: .file(fileURL, shouldRemove: false))
    }

    /// Creates a request that sends a stream of unknown length as its body, with
    /// `Transfer-Encoding: chunked` (and `Expect: 100-continue` unless the threshold is nil).
    /// The stream is read on a background queue, 64 KiB at a time, one chunk ahead of the
    /// socket: memory stays at two 64 KiB buffers. A stream is read once, so the request is
    /// not replayed: a retry or a 307/308 redirect fails with `.requestBodyReadFailed`.
    /// - Parameters:
    ///   - stream: the body's source.
    ///   - convertible: the URL.
    ///   - method: the method; default POST.
    ///   - headers: headers added to the session's defaults.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: where a multipart form is spilled (its `temporaryDirectory`); accepted
    ///     and unused for other bodies (Alamofire's signature).
    ///   - requestModifier: changes the request after it is built.
    /// - Returns: the request.
    public func upload(
        _ stream: any UploadByteStream, to convertible: any URLConvertible, method: HTTPMethod = .post,
        headers: HTTPHeaders? = nil, interceptor: (any RequestInterceptor)? = nil,
        fileManager: FileManager = .default, requestModifier: RequestModifier? = nil
    ) -> UploadRequest {
        let convertible = ParameterlessRequestConvertible(
            url: convertible, method: method, headers: headers, body: nil, requestModifier: requestModifier)
        return UploadRequest(session: self, convertible: convertible, interceptor: interceptor, uploadable: .stream(stream))
    }

    /// Creates a request that sends a stream as the body of `convertible`'s request (see
    /// `upload(_:to:method:headers:interceptor:requestModifier:)` for streams).
    /// - Parameters:
    ///   - stream: the body's source.
    ///   - convertible: builds the request.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: where a multipart form is spilled (its `temporaryDirectory`); accepted
    ///     and unused for other bodies (Alamofire's signature).
    /// - Returns: the request.
    public func upload(
        _ stream: any UploadByteStream, with convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)? = nil,
        fileManager: FileManager = .default
    )
        -> UploadRequest
    {
        UploadRequest(session: self, convertible: convertible, interceptor: interceptor, uploadable: .stream(stream))
    }

    /// Creates a request that sends a `multipart/form-data` body built by `multipartFormData`.
    /// The form is encoded when the request starts: in memory below `encodingMemoryThreshold`,
    /// otherwise into a temporary file (file parts stay in their own files) that is removed when
    /// the request finishes, succeeded, failed or cancelled. `Content-Type` carries the boundary
    /// unless you set one; `Content-Length` is always known.
    /// - Parameters:
    ///   - multipartFormData: fills the form.
    ///   - convertible: the URL.
    ///   - encodingMemoryThreshold: bytes from which the body spills to disk; default 10 MB.
    ///   - method: the method; default POST.
    ///   - headers: headers added to the session's defaults.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: where a multipart form is spilled (its `temporaryDirectory`); accepted
    ///     and unused for other bodies (Alamofire's signature).
    ///   - requestModifier: changes the request after it is built.
    /// - Returns: the request.
    public func upload(
        multipartFormData: (MultipartFormData) -> Void, to convertible: any URLConvertible,
        usingThreshold encodingMemoryThreshold: UInt64 = MultipartFormData.encodingMemoryThreshold, method: HTTPMethod = .post,
        headers: HTTPHeaders? = nil, interceptor: (any RequestInterceptor)? = nil,
        fileManager: FileManager = .default, requestModifier: RequestModifier? = nil
    ) -> UploadRequest {
        let form = MultipartFormData(temporaryDirectory: fileManager.temporaryDirectory)
        multipartFormData(form)
        return upload(
            multipartFormData: form, to: convertible, usingThreshold: encodingMemoryThreshold, method: method, headers: headers,
            interceptor: interceptor, requestModifier: requestModifier)
    }

    /// Creates a request that sends `multipartFormData` (see the closure variant).
    /// - Parameters:
    ///   - multipartFormData: the form.
    ///   - convertible: the URL.
    ///   - encodingMemoryThreshold: bytes from which the body spills to disk; default 10 MB.
    ///   - method: the method; default POST.
    ///   - headers: headers added to the session's defaults.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: where a multipart form is spilled (its `temporaryDirectory`); accepted
    ///     and unused for other bodies (Alamofire's signature).
    ///   - requestModifier: changes the request after it is built.
    /// - Returns: the request.
    public func upload(
        multipartFormData: MultipartFormData, to convertible: any URLConvertible,
        usingThreshold encodingMemoryThreshold: UInt64 = MultipartFormData.encodingMemoryThreshold, method: HTTPMethod = .post,
        headers: HTTPHeaders? = nil, interceptor: (any RequestInterceptor)? = nil,
        fileManager: FileManager = .default, requestModifier: RequestModifier? = nil
    ) -> UploadRequest {
        let convertible = ParameterlessRequestConvertible(
            url: convertible, method: method, headers: headers, body: nil, requestModifier: requestModifier)
        return UploadRequest(
            session: self, convertible: ContentTypeAddingConvertible(base: convertible, contentType: multipartFormData.contentType),
            interceptor: interceptor, uploadable: .multipart(multipartFormData), multipartThreshold: encodingMemoryThreshold)
    }

    /// Creates a request that sends `multipartFormData` as the body of `convertible`'s request.
    /// - Parameters:
    ///   - multipartFormData: the form.
    ///   - convertible: builds the request.
    ///   - encodingMemoryThreshold: bytes from which the body spills to disk; default 10 MB.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: where a multipart form is spilled (its `temporaryDirectory`); accepted
    ///     and unused for other bodies (Alamofire's signature).
    /// - Returns: the request.
    public func upload(
        multipartFormData: MultipartFormData, with convertible: any URLRequestConvertible,
        usingThreshold encodingMemoryThreshold: UInt64 = MultipartFormData.encodingMemoryThreshold,
        interceptor: (any RequestInterceptor)? = nil, fileManager: FileManager = .default
    ) -> UploadRequest {
        UploadRequest(
            session: self, convertible: ContentTypeAddingConvertible(base: convertible, contentType: multipartFormData.contentType),
            interceptor: interceptor, uploadable: .multipart(multipartFormData), multipartThreshold: encodingMemoryThreshold)
    }

    /// Creates a request that sends a form built by `multipartFormData` as the body of
    /// `convertible`'s request.
    /// - Parameters:
    ///   - multipartFormData: fills the form.
    ///   - convertible: builds the request.
    ///   - encodingMemoryThreshold: bytes from which the body spills to disk; default 10 MB.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: its `temporaryDirectory` is where the form spills.
    /// - Returns: the request.
    public func upload(
        multipartFormData: (MultipartFormData) -> Void, with convertible: any URLRequestConvertible,
        usingThreshold encodingMemoryThreshold: UInt64 = MultipartFormData.encodingMemoryThreshold,
        interceptor: (any RequestInterceptor)? = nil, fileManager: FileManager = .default
    ) -> UploadRequest {
        let form = MultipartFormData(temporaryDirectory: fileManager.temporaryDirectory)
        multipartFormData(form)
        return upload(multipartFormData: form, with: convertible, usingThreshold: encodingMemoryThreshold, interceptor: interceptor)
    }

    /// Creates a request that sends a file as the body of `convertible`'s request (read as it
    /// is sent: sendfile on plain HTTP, one 64 KiB buffer on TLS).
    /// - Parameters:
    ///   - fileURL: the file; its size when the request starts is the `Content-Length`.
    ///   - convertible: builds the request.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: where a multipart form is spilled (its `temporaryDirectory`); accepted
    ///     and unused for other bodies (Alamofire's signature).
    /// - Returns: the request.
    public func upload(
        _ fileURL: URL, with convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)? = nil,
        fileManager: FileManager = .default
    )
        -> UploadRequest
    {
        UploadRequest(session: self, convertible: convertible, interceptor: interceptor, uploadable: .file(fileURL, shouldRemove: false))
    }

    /// Creates a request that sends `data` as the body of `convertible`'s request.
    /// - Parameters:
    ///   - data: the body.
    ///   - convertible: builds the request.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: where a multipart form is spilled (its `temporaryDirectory`); accepted
    ///     and unused for other bodies (Alamofire's signature).
    /// - Returns: the request.
    public func upload(
        _ data: Data, with convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)? = nil,
        fileManager: FileManager = .default
    )
        -> UploadRequest
    {
        UploadRequest(
            session: self, convertible: BodyReplacingConvertible(base: convertible, body: data), interceptor: interceptor,
            uploadable: .data(data))
    }

    /// Creates a request whose body streams to a file.
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - headers: headers added to the session's defaults.
    ///   - body: an optional request body.
    ///   - interceptor: this request's interceptor.
    ///   - destination: picks the file once the head is known; default a file in the
    ///     temporary directory.
    /// - Returns: the request.
    public func download(
        _ convertible: any URLConvertible, method: HTTPMethod = .get, headers: HTTPHeaders? = nil, body: Data? = nil,
        interceptor: (any RequestInterceptor)? = nil, to destination: DownloadRequest.Destination? = nil
    ) -> DownloadRequest {
        DownloadRequest(
            session: self,
            convertible: ParameterlessRequestConvertible(
                url: convertible, method: method, headers: headers, body: body, requestModifier: nil),
            interceptor: interceptor, target: .destination(destination))
    }

    /// Creates a download from parts, encoding `parameters` with `encoder` (Alamofire's
    /// `download(_:method:parameters:encoder:headers:interceptor:requestModifier:to:)`).
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - parameters: encoded into the query or the body, as `encoder` decides.
    ///   - encoder: default `URLEncodedFormParameterEncoder.default` (the query for GET).
    ///   - headers: headers added to the session's defaults.
    ///   - interceptor: this request's interceptor.
    ///   - requestModifier: changes the `URLRequest` before it is adapted.
    ///   - destination: picks the file once the head is known; default a file in the
    ///     temporary directory.
    /// - Returns: the request.
    public func download<Parameters: Encodable & Sendable>(
        _ convertible: any URLConvertible, method: HTTPMethod = .get, parameters: Parameters? = nil,
        encoder: any ParameterEncoder = URLEncodedFormParameterEncoder.default, headers: HTTPHeaders? = nil,
        interceptor: (any RequestInterceptor)? = nil, requestModifier: RequestModifier? = nil,
        to destination: DownloadRequest.Destination? = nil
    ) -> DownloadRequest {
        DownloadRequest(
            session: self,
            convertible: RequestEncodableConvertible(
                url: convertible, method: method, parameters: parameters, encoder: encoder, headers: headers,
                requestModifier: requestModifier),
            interceptor: interceptor, target: .destination(destination))
    }

    /// Creates a download from parts with untyped `Parameters` and a `ParameterEncoding`
    /// (Alamofire's `download(_:method:parameters:encoding:headers:interceptor:requestModifier:to:)`).
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - parameters: values to encode; default none.
    ///   - encoding: default `URLEncoding.default`.
    ///   - headers: headers added to the session's defaults.
    ///   - interceptor: this request's interceptor.
    ///   - requestModifier: changes the `URLRequest` before parameters are encoded.
    ///   - destination: picks the file once the head is known; default a file in the
    ///     temporary directory.
    /// - Returns: the request.
    public func download(
        _ convertible: any URLConvertible, method: HTTPMethod = .get, parameters: Parameters? = nil,
        encoding: any ParameterEncoding = URLEncoding.default, headers: HTTPHeaders? = nil,
        interceptor: (any RequestInterceptor)? = nil, requestModifier: RequestModifier? = nil,
        to destination: DownloadRequest.Destination? = nil
    ) -> DownloadRequest {
        DownloadRequest(
            session: self,
            convertible: RequestConvertible(
                url: convertible, method: method, parameters: parameters, encoding: encoding, headers: headers,
                requestModifier: requestModifier),
            interceptor: interceptor, target: .destination(destination))
    }

    /// Creates a download from a `URLRequestConvertible` (a router).
    /// - Parameters:
    ///   - convertible: builds the request.
    ///   - interceptor: this request's interceptor.
    ///   - destination: picks the file once the head is known; default a file in the
    ///     temporary directory.
    /// - Returns: the request.
    public func download(
        _ convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)? = nil,
        to destination: DownloadRequest.Destination? = nil
    ) -> DownloadRequest {
        DownloadRequest(session: self, convertible: convertible, interceptor: interceptor, target: .destination(destination))
    }

    /// Continues a download from resume data (`DownloadRequest.resumeData`,
    /// `DownloadResponse.resumeData`, or a `DownloadResumeData` you built): asks for the
    /// missing bytes with `Range` and `If-Range` and appends them to the partial file. A 200
    /// (the server ignored the range, or the resource changed) replaces the partial file with
    /// the new body; a `Content-Range` that does not continue it, or a 416 for a resource that
    /// shrank, starts again from zero; a 416 saying the file is already complete fetches its
    /// last byte again. Progress counts the bytes already on disk.
    /// - Parameters:
    ///   - resumeData: the resume data.
    ///   - url: a fresh URL for the same resource (a signed URL that expired); default the
    ///     one in the resume data.
    ///   - headers: headers added to the session's defaults (authorization, say).
    ///   - interceptor: this request's interceptor.
    ///   - destination: picks the final file once the head is known; default a file in the
    ///     temporary directory.
    /// - Returns: the request; it fails with `.downloadResumeFailed` when the resume data
    ///   cannot be read.
    public func download(
        resumingWith resumeData: Data, from url: (any URLConvertible)? = nil, headers: HTTPHeaders? = nil,
        interceptor: (any RequestInterceptor)? = nil, to destination: DownloadRequest.Destination? = nil
    ) -> DownloadRequest {
        let parsed: DownloadResumeData
        do throws(TinyFireError) {
            parsed = try DownloadResumeData(data: resumeData)
        } catch {
            return DownloadRequest(
                session: self, convertible: FailingConvertible(error: error), interceptor: interceptor,
                target: .destination(destination))
        }
        return DownloadRequest(
            session: self,
            convertible: ParameterlessRequestConvertible(
                url: url ?? parsed.url, method: .get, headers: headers, body: nil, requestModifier: nil),
            interceptor: interceptor, target: .destination(destination), resumingFrom: parsed)
    }

    /// Creates a request whose body is written, as it arrives, to a descriptor the caller owns
    /// (a pipe into an installer, stdout, /dev/null). Nothing is buffered and nothing is
    /// rolled back on failure; the caller keeps the descriptor open until the request ends.
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - headers: headers added to the session's defaults.
    ///   - body: an optional request body.
    ///   - fileDescriptor: an open, writable descriptor.
    /// - Returns: the request.
    public func download(
        _ convertible: any URLConvertible, method: HTTPMethod = .get, headers: HTTPHeaders? = nil, body: Data? = nil,
        streamingTo fileDescriptor: Int32
    ) -> DownloadRequest {
        DownloadRequest(
            session: self,
            convertible: ParameterlessRequestConvertible(
                url: convertible, method: method, headers: headers, body: body, requestModifier: nil),
            interceptor: nil, target: .descriptor(fileDescriptor))
    }

    // MARK: - All requests

    /// Runs `action` on `rootQueue` with the requests that started and have not finished.
    /// - Parameter action: receives the requests.
    public func withAllRequests(perform action: @escaping @Sendable (Set<Request>) -> Void) {
        rootQueue.async { [self] in action(Set(activeRequests.withLock { $0.values })) }
    }

    /// Cancels every request that started and has not finished, then calls `completion`.
    /// - Parameters:
    ///   - queue: where to call `completion`; default `rootQueue`.
    ///   - completion: called after every cancel was issued.
    public func cancelAllRequests(completingOnQueue queue: DispatchQueue? = nil, completion: (@Sendable () -> Void)? = nil) {
        withAllRequests { requests in
            for request in requests { request.cancel() }
            (queue ?? self.rootQueue).async { completion?() }
        }
    }

    func didResume(_ request: Request) {
        activeRequests.withLock { $0[ObjectIdentifier(request)] = request }
    }

    func didFinish(_ request: Request) {
        activeRequests.withLock { $0[ObjectIdentifier(request)] = nil }
    }
}

/// A request that cannot be built: its creation fails with `error`.
struct FailingConvertible: URLRequestConvertible {
    let error: TinyFireError

    func asURLRequest() throws -> URLRequest { throw error }
}

/// A convertible's request with a `Content-Type` added when it has none (a multipart form's,
/// with its boundary), so `request.request` shows what is sent.
struct ContentTypeAddingConvertible: URLRequestConvertible {
    let base: any URLRequestConvertible
    let contentType: String

    func asURLRequest() throws -> URLRequest {
        var request = try base.asURLRequest()
        if request.headers["Content-Type"] == nil { request.headers.update(name: "Content-Type", value: contentType) }
        return request
    }
}

/// A convertible's request with its body replaced (`upload(_:with:)`).
struct BodyReplacingConvertible: URLRequestConvertible {
    let base: any URLRequestConvertible
    let body: Data

    func asURLRequest() throws -> URLRequest {
        var request = try base.asURLRequest()
        request.httpBody = body
        return request
    }
}
