#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// The engine's request (TinyFireCore's RequestSpec, on AbsoluteURL) in TinyFire's terms: built
// from a URLRequest, and rebuilt as one for redirect handlers and monitors.

extension AbsoluteURL {
    /// `url` in the core's form.
    /// - Throws: `.invalidURL` when it has no scheme or its authority is malformed.
    static func parsing(_ url: URL) throws(TinyFireError) -> AbsoluteURL {
        let text = url.absoluteString
        guard let parsed = AbsoluteURL(text) else {
            throw .invalidURL(url: text, reason: url.scheme == nil ? "no scheme" : "malformed host or port")
        }
        return parsed
    }
}

// A core URL goes wherever TinyFire takes a URL (the agent's configured URLs are core URLs).
extension AbsoluteURL: URLConvertible {
    /// Foundation's `URL` of the same text.
    /// - Throws: `.invalidURL` when Foundation refuses the text.
    package func asURL() throws -> URL {
        guard let url = URL(string: absoluteString) else { throw TinyFireError.invalidURL(url: absoluteString, reason: "not a URL") }
        return url
    }
}

extension RequestSpec {
    /// The engine's form of `request`.
    /// - Throws: `.invalidURL` when it has no URL or the URL is not absolute.
    init(_ request: URLRequest) throws(TinyFireError) {
        guard let url = request.url else { throw .invalidURL(url: "", reason: "the request has no URL") }
        self.init(
            url: try AbsoluteURL.parsing(url), method: request.method ?? .get, headers: request.headers,
            body: request.httpBody.map(DataBody.init), totalTimeout: request.timeoutInterval.flatMap(Duration.timeInterval))
        proxy = request.proxy
    }

    /// The request as a `URLRequest` (for redirect handlers and monitors).
    var urlRequest: URLRequest {
        var request = URLRequest(optionalURL: URL(string: url.absoluteString), method: method, headers: headers)
        request.httpBody = body.map(Data.init(bodyBytes:))
        request.proxy = proxy
        return request
    }
}

extension RedirectRewrite {
    /// A redirect handler's answer in the engine's form.
    /// - Throws: `.invalidURL` when its URL is not absolute.
    init(_ request: URLRequest) throws(TinyFireError) {
        self.init(
            url: try request.url.map { (url) throws(TinyFireError) in try AbsoluteURL.parsing(url) }, method: request.method,
            headers: request.headers, body: request.httpBody.map(DataBody.init))
    }
}

extension Data {
    /// An in-memory request body as `Data` (no copy when it already is one).
    init(bodyBytes: any BodyBytes) {
        if let data = (bodyBytes as? DataBody)?.data {
            self = data
            return
        }
        var copy = Data()
        bodyBytes.withBodyBytes { copy = Data($0) }
        self = copy
    }
}
