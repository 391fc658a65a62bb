import Dispatch

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Creates and runs requests, as Alamofire's `Session`: one I/O thread (epoll) and one
/// connection pool per session, shared by all its requests.
public final class Session: Sendable {
    /// The shared session, with the default configuration. It lives for the whole process.
    public static let `default` = Session()

    /// Bounds, timeouts and policies.
    public let configuration: SessionConfiguration
    /// The serial queue completion handlers run on unless a request names another.
    public let rootQueue: DispatchQueue
    /// Whether adding a response handler starts the request (default true).
    public let startRequestsImmediately: Bool
    let engine: Engine

    /// Creates a session and starts its I/O thread.
    /// - Parameters:
    ///   - configuration: bounds, timeouts and policies; default `.default`.
    ///   - rootQueue: serial queue for completion handlers; default a new one.
    ///   - startRequestsImmediately: start a request when a response handler is added.
    public init(
        configuration: SessionConfiguration = .default,
        rootQueue: DispatchQueue = DispatchQueue(label: "org.tinyfire.session.rootQueue"),
        startRequestsImmediately: Bool = true
    ) {
        self.configuration = configuration
        self.rootQueue = rootQueue
        self.startRequestsImmediately = startRequestsImmediately
        self.engine = Engine(configuration: configuration)
    }

    deinit {
        engine.shutdown()
    }

    /// Creates a request whose body is collected in memory.
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - headers: headers added to the session's defaults (a request's own win).
    /// - Returns: the request; it starts when a response handler is added.
    public func request(
        _ convertible: URLConvertible, method: HTTPMethod = .get, headers: HTTPHeaders? = nil
    ) -> DataRequest {
        DataRequest(session: self, spec: makeSpec(convertible, method: method, headers: headers, body: nil))
    }

    /// Creates a request that sends `data` as its body (`Content-Length` framing).
    /// - Parameters:
    ///   - data: the body, sent from memory.
    ///   - convertible: the URL.
    ///   - method: the method; default POST.
    ///   - headers: headers added to the session's defaults.
    /// - Returns: the request.
    public func upload(
        _ data: Data, to convertible: URLConvertible, method: HTTPMethod = .post, headers: HTTPHeaders? = nil
    ) -> UploadRequest {
        UploadRequest(session: self, spec: makeSpec(convertible, method: method, headers: headers, body: data))
    }

    /// Creates a request whose body streams to a file.
    /// - Parameters:
    ///   - convertible: the URL.
    ///   - method: the method; default GET.
    ///   - headers: headers added to the session's defaults.
    ///   - body: an optional request body.
    ///   - destination: picks the file once the head is known; default a file in the
    ///     temporary directory.
    /// - Returns: the request.
    public func download(
        _ convertible: URLConvertible, method: HTTPMethod = .get, headers: HTTPHeaders? = nil, body: Data? = nil,
        to destination: DownloadRequest.Destination? = nil
    ) -> DownloadRequest {
        DownloadRequest(
            session: self, spec: makeSpec(convertible, method: method, headers: headers, body: body),
            target: .destination(destination))
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
        _ convertible: URLConvertible, method: HTTPMethod = .get, headers: HTTPHeaders? = nil, body: Data? = nil,
        streamingTo fileDescriptor: Int32
    ) -> DownloadRequest {
        DownloadRequest(
            session: self, spec: makeSpec(convertible, method: method, headers: headers, body: body),
            target: .descriptor(fileDescriptor))
    }

    /// The download `fire-agent request` runs: like the public `download` variants, plus
    /// status validation before the body reaches a file, and optionally the response head
    /// written ahead of the body (curl's `-i`).
    package func download(
        _ convertible: URLConvertible, method: HTTPMethod, headers: HTTPHeaders?, body: Data?,
        target: DownloadRequest.Target, acceptableStatusCodes: Range<Int>?, includeResponseHead: Bool
    ) -> DownloadRequest {
        DownloadRequest(
            session: self, spec: makeSpec(convertible, method: method, headers: headers, body: body),
            target: target, acceptableStatusCodes: acceptableStatusCodes, includeResponseHead: includeResponseHead)
    }

    private func makeSpec(
        _ convertible: URLConvertible, method: HTTPMethod, headers: HTTPHeaders?, body: Data?
    ) -> Result<RequestSpec, TinyFireError> {
        do throws(TinyFireError) {
            let url = try convertible.asURL()
            return .success(RequestSpec(url: url, method: method, headers: headers ?? HTTPHeaders(), body: body))
        } catch {
            return .failure(error)
        }
    }
}
