import HTTPTypes

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A response head with the URL it answers, as Foundation's `HTTPURLResponse`: what
/// `DataResponse.response`, `Request.response`, validators, serializers, redirect handlers and
/// event monitors receive.
///
/// FoundationNetworking (which links libcurl) is not used, so this is TinyFire's own value. It
/// carries swift-http-types' `HTTPResponse` (`head`) and offers both spellings: Foundation's
/// (`statusCode`, `allHeaderFields`, `value(forHTTPHeaderField:)`, `mimeType`,
/// `expectedContentLength`, `url`), Alamofire's `headers`, and swift-http-types' `status` and
/// `headerFields`. After redirects, `url` is the URL of the hop that gave the final response.
public struct HTTPURLResponse: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The status line and header fields.
    public let head: HTTPResponse
    /// Where the URL comes from: given, or the sent head's parts, parsed only when asked for
    /// (the engine makes responses on every hop; most are never asked their URL).
    private let location: Location

    private enum Location: Sendable, Hashable {
        case url(URL?)
        case sent(scheme: String, authority: String, path: String)
    }

    /// The URL this response answers (the last hop after redirects); nil when unknown.
    public var url: URL? {
        switch location {
        case .url(let url): return url
        case .sent(let scheme, let authority, let path): return URL(string: "\(scheme)://\(authority)\(path)")
        }
    }

    /// Creates a response from a head and its URL.
    /// - Parameters:
    ///   - head: the status and header fields.
    ///   - url: the URL it answers.
    public init(_ head: HTTPResponse, url: URL? = nil) {
        self.head = head
        self.location = .url(url)
    }

    /// Responses are equal when their heads and URLs are.
    public static func == (lhs: HTTPURLResponse, rhs: HTTPURLResponse) -> Bool {
        lhs.head == rhs.head && lhs.url == rhs.url
    }

    /// Hashes the head and the URL.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(head)
        hasher.combine(url)
    }

    /// Creates a response as Foundation's `HTTPURLResponse(url:statusCode:httpVersion:headerFields:)`.
    /// - Parameters:
    ///   - url: the URL it answers.
    ///   - statusCode: the status code, 100…999.
    ///   - httpVersion: ignored (TinyFire speaks HTTP/1.1); kept for the signature.
    ///   - headerFields: the header fields; a name or value that is not a valid field is dropped.
    /// - Returns: nil when `statusCode` is outside 100…999.
    public init?(url: URL, statusCode: Int, httpVersion: String?, headerFields: [String: String]?) {
        guard (100...999).contains(statusCode) else { return nil }
        var fields = HTTPFields()
        for (name, value) in (headerFields ?? [:]).sorted(by: { $0.key < $1.key }) {
            guard let fieldName = HTTPField.Name(name) else { continue }
            fields.append(HTTPField(name: fieldName, value: value))
        }
        self.init(HTTPResponse(status: .init(code: statusCode), headerFields: fields), url: url)
    }

    /// The status (swift-http-types).
    public var status: HTTPResponse.Status { head.status }
    /// The header fields (swift-http-types).
    public var headerFields: HTTPFields { head.headerFields }
    /// The status code.
    public var statusCode: Int { head.status.code }
    /// The header fields as Alamofire's `HTTPHeaders`.
    public var headers: HTTPHeaders { HTTPHeaders(head.headerFields) }

    /// The header fields as a dictionary, as Foundation's: repeated names joined with ", ",
    /// names as the server spelled them.
    public var allHeaderFields: [AnyHashable: Any] {
        var result: [AnyHashable: Any] = [:]
        for (name, value) in headers.dictionary { result[name] = value }
        return result
    }

    /// The value of a header field, any case; repeated fields joined with ", ".
    /// - Parameter field: the field name.
    /// - Returns: the value, or nil when absent.
    public func value(forHTTPHeaderField field: String) -> String? {
        guard let name = HTTPField.Name(field) else { return nil }
        let values = head.headerFields[values: name]
        return values.isEmpty ? nil : values.joined(separator: ", ")
    }

    /// The media type of `Content-Type`, lowercased, without parameters (`application/json`).
    public var mimeType: String? {
        guard let contentType = head.headerFields[.contentType] else { return nil }
        let type = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingHTTPWhitespace() } ?? ""
        return type.isEmpty ? nil : type.lowercased()
    }

    /// The `charset` parameter of `Content-Type`, lowercased, without quotes.
    public var textEncodingName: String? {
        guard let contentType = head.headerFields[.contentType] else { return nil }
        for parameter in contentType.split(separator: ";").dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingHTTPWhitespace().lowercased() == "charset" else { continue }
            var value = Substring(pair[1].trimmingHTTPWhitespace())
            if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
            return value.lowercased()
        }
        return nil
    }

    /// `Content-Length`, or -1 when the length is not announced (Foundation's
    /// `NSURLResponseUnknownLength`).
    public var expectedContentLength: Int64 {
        head.headerFields[.contentLength].flatMap { Int64($0) } ?? -1
    }

    /// The file name the server suggests (`Content-Disposition`), else the URL's last path
    /// component, else `unknown`.
    public var suggestedFilename: String? { DownloadRequest.suggestedFilename(for: self, url: url) }

    /// `<HTTPURLResponse> { URL: … } { Status Code: …, Headers { … } }`, as Foundation writes it.
    public var description: String {
        let fields = head.headerFields.map { "    \"\($0.name.rawName)\" = (\n        \"\($0.value)\"\n    );" }
        let headers = fields.isEmpty ? "{\n}" : "{\n" + fields.joined(separator: "\n") + "\n}"
        return "<HTTPURLResponse> { URL: \(url?.absoluteString ?? "(none)") } { Status Code: \(statusCode), Headers \(headers) }"
    }

    /// The same as `description`.
    public var debugDescription: String { description }
}

extension HTTPURLResponse {
    /// A response to the request that went out as `head`: its URL rebuilt from the head's
    /// scheme, authority and path.
    init(_ response: HTTPResponse, sent head: SentRequestHead?) {
        self.head = response
        self.location = head.map { .sent(scheme: $0.scheme, authority: $0.authority, path: $0.path) } ?? .url(nil)
    }
}
