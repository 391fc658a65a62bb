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

/// What a request asks the engine to send.
struct RequestSpec: Sendable {
    var url: URL
    var method: HTTPMethod
    var headers: HTTPHeaders
    var body: Data?
    /// A body from files or a stream instead of `body`.
    var bodySource: RequestBodySource?
    /// Overrides the session's total timeout for this request.
    var totalTimeout: Duration?
    /// Overrides the session's proxy settings for this request.
    var proxy: ProxySettings?

    /// Bytes of request body; nil for a stream (unknown until it ends).
    var bodyLength: UInt64? {
        if let bodySource { return bodySource.length }
        return UInt64(body?.count ?? 0)
    }
    var hasBody: Bool { body != nil || bodySource != nil }

    /// The URL the caller addressed. Credentials — `Authorization`, `Cookie` and
    /// `Proxy-Authorization`, the request's own and the session's default ones — go to its
    /// origin only, never to another origin a redirect leads to (curl's rule without
    /// --location-trusted).
    let addressedURL: URL

    init(url: URL, method: HTTPMethod, headers: HTTPHeaders, body: Data?, totalTimeout: Duration? = nil) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.totalTimeout = totalTimeout
        self.addressedURL = url
    }

    /// `scheme://host:port` of the addressed URL.
    var credentialOrigin: String { Self.origin(of: addressedURL) }

    /// Whether credentials go to `url`: it is the addressed URL (no origin to compute), or on
    /// the same origin.
    var sendsCredentials: Bool { url == addressedURL || Self.origin(of: url) == credentialOrigin }

    /// The credential headers that stay with their origin.
    static let credentialHeaders = ["Authorization", "Cookie", "Proxy-Authorization"]

    /// `scheme://host:port`, lowercased, with the scheme's default port filled in.
    static func origin(of url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? ""
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        return "\(scheme)://\(url.host(percentEncoded: true)?.lowercased() ?? ""):\(port)"
    }

    init(_ request: URLRequest) throws(TinyFireError) {
        guard let url = request.url else { throw .invalidURL(url: "", reason: "the request has no URL") }
        self.init(
            url: url, method: request.method ?? .get, headers: request.headers, body: request.httpBody,
            totalTimeout: request.timeoutInterval.flatMap(Duration.timeInterval))
        proxy = request.proxy
    }

    var urlRequest: URLRequest {
        var request = URLRequest(url: url, method: method, headers: headers)
        request.httpBody = body
        request.proxy = proxy
        return request
    }
}
