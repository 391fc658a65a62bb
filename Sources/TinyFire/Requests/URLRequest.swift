#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A request before it is sent: URL, method, headers, body and an optional timeout.
///
/// FoundationNetworking's `URLRequest` is not used on Linux boards (it pulls in libcurl), so
/// TinyFire has its own value with the members Alamofire code touches: `url`, `method`,
/// `headers`, `httpBody`, `timeoutInterval`, `setValue(_:forHTTPHeaderField:)`. Routers that
/// build `URLRequest`s port unchanged.
public struct URLRequest: Sendable, Equatable, CustomStringConvertible {
    /// The URL; a request without one fails with `TinyFireError.invalidURL`.
    public var url: URL?
    /// The method; nil means GET.
    public var method: HTTPMethod?
    /// The header fields, in order.
    public var headers: HTTPHeaders
    /// The body, sent with `Content-Length` framing.
    public var httpBody: Data?
    /// When set, the whole request (redirects included) fails after this many seconds; it
    /// overrides the session's `totalTimeout` for this request.
    public var timeoutInterval: TimeInterval?
    /// The proxy settings for this request alone (nil: the session's `proxy`). `.direct`
    /// sends it without a proxy whatever the session says.
    public var proxy: ProxySettings?

    /// Creates a request.
    /// - Parameters:
    ///   - url: the URL.
    ///   - method: the method; default GET.
    ///   - headers: header fields; default none.
    public init(url: URL, method: HTTPMethod = .get, headers: HTTPHeaders = HTTPHeaders()) {
        self.url = url
        self.method = method
        self.headers = headers
    }

    /// A request whose URL may be missing (the engine's requests, rebuilt for a handler).
    init(optionalURL url: URL?, method: HTTPMethod, headers: HTTPHeaders) {
        self.url = url
        self.method = method
        self.headers = headers
    }

    /// Creates a request from anything URL-like, as Alamofire's `URLRequest(url:method:headers:)`.
    /// - Parameters:
    ///   - url: the URL.
    ///   - method: the method.
    ///   - headers: header fields.
    /// - Throws: what `url.asURL()` throws (`TinyFireError.invalidURL` for a string that is not a URL).
    public init(url: any URLConvertible, method: HTTPMethod, headers: HTTPHeaders? = nil) throws {
        self.init(url: try url.asURL(), method: method, headers: headers ?? HTTPHeaders())
    }

    /// The method as a string, as on Foundation's `URLRequest`.
    public var httpMethod: String? {
        get { method?.rawValue }
        set { method = newValue.map(HTTPMethod.init(rawValue:)) }
    }

    /// The headers as a dictionary (repeated names joined with ", "); setting replaces all.
    public var allHTTPHeaderFields: [String: String]? {
        get { headers.dictionary }
        set { headers = HTTPHeaders(newValue ?? [:]) }
    }

    /// Sets (or, with nil, removes) a header field.
    /// - Parameters:
    ///   - value: the value.
    ///   - field: the field name.
    public mutating func setValue(_ value: String?, forHTTPHeaderField field: String) {
        headers[field] = value
    }

    /// Appends a value to a header field.
    /// - Parameters:
    ///   - value: the value.
    ///   - field: the field name.
    public mutating func addValue(_ value: String, forHTTPHeaderField field: String) {
        headers.append(name: field, value: value)
    }

    /// The first value of a header field.
    /// - Parameter field: the field name, any case.
    /// - Returns: the value, or nil.
    public func value(forHTTPHeaderField field: String) -> String? {
        headers.value(for: field)
    }

    /// `METHOD URL`.
    public var description: String {
        "\(method?.rawValue ?? "GET") \(url?.absoluteString ?? "(no URL)")"
    }
}

/// A value that can produce a `URLRequest`, as Alamofire's `URLRequestConvertible`: the
/// usual shape of an API router.
public protocol URLRequestConvertible: Sendable {
    /// The request.
    /// - Throws: any error; it reaches the caller as `TinyFireError.createURLRequestFailed`.
    func asURLRequest() throws -> URLRequest
}

extension URLRequestConvertible {
    /// The request, or nil when building it throws.
    public var urlRequest: URLRequest? { try? asURLRequest() }
}

extension URLRequest: URLRequestConvertible {
    /// The request itself.
    public func asURLRequest() throws -> URLRequest { self }
}

/// Mutates a request as it is created, as Alamofire's `RequestModifier`.
public typealias RequestModifier = @Sendable (inout URLRequest) throws -> Void

/// The convertible behind `Session.request(_:method:parameters:encoder:headers:…)`: builds
/// the request from its parts, encodes the parameters and applies the modifier.
struct RequestEncodableConvertible<Parameters: Encodable & Sendable>: URLRequestConvertible {
    let url: any URLConvertible
    let method: HTTPMethod
    let parameters: Parameters?
    let encoder: any ParameterEncoder
    let headers: HTTPHeaders?
    let requestModifier: RequestModifier?

    func asURLRequest() throws -> URLRequest {
        var request = try URLRequest(url: url, method: method, headers: headers)
        try requestModifier?(&request)
        return try parameters.map { try encoder.encode($0, into: request) } ?? request
    }
}

/// A request built from parts with a body from memory (`Session.upload(_:to:)`).
struct ParameterlessRequestConvertible: URLRequestConvertible {
    let url: any URLConvertible
    let method: HTTPMethod
    let headers: HTTPHeaders?
    let body: Data?
    let requestModifier: RequestModifier?

    func asURLRequest() throws -> URLRequest {
        var request = try URLRequest(url: url, method: method, headers: headers)
        request.httpBody = body
        try requestModifier?(&request)
        return request
    }
}
