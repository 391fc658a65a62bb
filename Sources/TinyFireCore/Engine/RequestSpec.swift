/// What a request asks the engine to send, in the core's terms (TinyFire builds it from a
/// `URLRequest`; the agent builds it directly).
package struct RequestSpec: Sendable {
    package var url: AbsoluteURL
    package var method: HTTPMethod
    package var headers: HTTPHeaders
    /// The body in memory, if any.
    package var body: (any BodyBytes)?
    /// A body from files or a stream instead of `body`.
    package var bodySource: RequestBodySource?
    /// Overrides the client's total timeout for this request.
    package var totalTimeout: Duration?
    /// Overrides the client's proxy settings for this request.
    package var proxy: ProxySettings?

    /// Bytes of request body; nil for a stream (unknown until it ends).
    package var bodyLength: UInt64? {
        if let bodySource { return bodySource.length }
        return UInt64(body?.count ?? 0)
    }
    package var hasBody: Bool { body != nil || bodySource != nil }

    /// The URL the caller addressed. Credentials — `Authorization`, `Cookie` and
    /// `Proxy-Authorization`, the request's own and the client's default ones — go to its
    /// origin only, never to another origin a redirect leads to (curl's rule without
    /// --location-trusted).
    package let addressedURL: AbsoluteURL

    package init(
        url: AbsoluteURL, method: HTTPMethod, headers: HTTPHeaders, body: (any BodyBytes)?, totalTimeout: Duration? = nil
    ) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.totalTimeout = totalTimeout
        self.addressedURL = url
    }

    /// `scheme://host:port` of the addressed URL.
    package var credentialOrigin: String { Self.origin(of: addressedURL) }

    /// Whether credentials go to `url`: it is the addressed URL (no origin to compute), or on
    /// the same origin.
    package var sendsCredentials: Bool { url == addressedURL || Self.origin(of: url) == credentialOrigin }

    /// The credential headers that stay with their origin.
    package static let credentialHeaders = ["Authorization", "Cookie", "Proxy-Authorization"]

    /// `scheme://host:port`, lowercased, with the scheme's default port filled in.
    package static func origin(of url: AbsoluteURL) -> String {
        let scheme = url.scheme.lowercased()
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        return "\(scheme)://\(url.host?.lowercased() ?? ""):\(port)"
    }

    /// Where the current URL goes, through `proxies` unless the request overrides them.
    /// - Throws: `RequestTargetError` for a scheme other than http/https, no host, or a port
    ///   out of range.
    package func target(proxies: ProxySettings) throws(RequestTargetError) -> RequestTarget {
        try RequestTarget(
            scheme: url.scheme, host: url.host, port: url.port, path: url.path, query: url.query, url: url.absoluteString,
            proxies: proxy ?? proxies)
    }
}

/// A redirect's next request as a redirect handler rewrote it: its URL (nil keeps the
/// policy's), method (nil keeps it), headers and body replace the policy's.
package struct RedirectRewrite: Sendable {
    package var url: AbsoluteURL?
    package var method: HTTPMethod?
    package var headers: HTTPHeaders
    package var body: (any BodyBytes)?

    package init(url: AbsoluteURL?, method: HTTPMethod?, headers: HTTPHeaders, body: (any BodyBytes)?) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
    }
}

extension RedirectRewrite {
    /// The policy's next request unchanged (a handler that went away, or one that follows).
    package init(keeping target: RequestSpec) {
        self.init(url: target.url, method: target.method, headers: target.headers, body: target.body)
    }
}
