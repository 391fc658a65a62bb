import HTTPTypes

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

extension Request {
    /// What a validation closure returns: success, or the error the request fails with.
    public typealias ValidationResult = Result<Void, any Error>
}

extension DataRequest {
    /// A validation closure: the request as sent (before redirects), the final response head
    /// and the body.
    public typealias Validation = @Sendable (URLRequest?, HTTPURLResponse, Data?) -> ValidationResult

    /// Adds a validation. Validations run in order when the transfer completes, before
    /// response handlers; the first failure becomes the request's error (and goes to the
    /// retrier). A failure that is not a `TinyFireError` is wrapped in
    /// `.responseValidationFailed(.customValidationFailed)`.
    /// - Parameter validation: the closure.
    /// - Returns: the request.
    @discardableResult
    public func validate(_ validation: @escaping Validation) -> Self {
        appendValidator { request, response, data in ResponseValidation.error(from: validation(request, response, data)) }
        return self
    }

    /// Fails unless the status code is in `acceptableStatusCodes`.
    /// - Parameter acceptableStatusCodes: e.g. `200..<300`.
    /// - Returns: the request.
    @discardableResult
    public func validate<S: Sequence & Sendable>(statusCode acceptableStatusCodes: S) -> Self where S.Element == Int {
        appendValidator { _, response, _ in
            ResponseValidation.statusCode(response, acceptable: acceptableStatusCodes)
        }
        return self
    }

    /// Fails unless the response's Content-Type matches one of `acceptableContentTypes`
    /// (`type/subtype`, with `*` wildcards). An empty body passes.
    /// - Parameter acceptableContentTypes: media types, evaluated when the response arrives.
    /// - Returns: the request.
    @discardableResult
    public func validate(contentType acceptableContentTypes: @escaping @autoclosure @Sendable () -> [String]) -> Self {
        appendValidator { _, response, data in
            ResponseValidation.contentType(response, hasBody: !(data?.isEmpty ?? true), acceptable: acceptableContentTypes())
        }
        return self
    }

    /// Fails unless the status is 2xx and the Content-Type matches the request's `Accept`
    /// header (when it has one).
    /// - Returns: the request.
    @discardableResult
    public func validate() -> Self {
        appendValidator { request, response, data in
            ResponseValidation.statusAndAccept(request, response, hasBody: !(data?.isEmpty ?? true))
        }
        return self
    }
}

extension DownloadRequest {
    /// A validation closure: the request as sent (before redirects), the final response head
    /// and the file holding the body (still in its partial file: it is moved into place only
    /// after every validation passed).
    public typealias Validation = @Sendable (URLRequest?, HTTPURLResponse, URL?) -> ValidationResult

    /// The file holding the body while validations run.
    private var bodyFileForValidation: URL? { fileURL }

    private var bodyIsEmpty: Bool {
        guard let url = bodyFileForValidation else { return true }
        var info = stat()
        return stat(url.path(percentEncoded: false), &info) != 0 || info.st_size == 0
    }

    /// Adds a validation. Validations run in order when the transfer completes; the first
    /// failure becomes the request's error, and the body is removed instead of moved into place.
    /// - Parameter validation: the check.
    /// - Returns: the request.
    @discardableResult
    public func validate(_ validation: @escaping Validation) -> Self {
        appendValidator { [weak self] request, response, _ in
            ResponseValidation.error(from: validation(request, response, self?.bodyFileForValidation))
        }
        return self
    }

    /// Accepts only these status codes.
    /// - Parameter acceptableStatusCodes: the codes.
    /// - Returns: the request.
    @discardableResult
    public func validate<S: Sequence & Sendable>(statusCode acceptableStatusCodes: S) -> Self where S.Element == Int {
        appendValidator { _, response, _ in
            ResponseValidation.statusCode(response, acceptable: acceptableStatusCodes)
        }
        return self
    }

    /// Accepts only these content types (wildcards allowed); an empty body passes.
    /// - Parameter acceptableContentTypes: the types.
    /// - Returns: the request.
    @discardableResult
    public func validate(contentType acceptableContentTypes: @escaping @autoclosure @Sendable () -> [String]) -> Self {
        appendValidator { [weak self] _, response, _ in
            ResponseValidation.contentType(response, hasBody: !(self?.bodyIsEmpty ?? true), acceptable: acceptableContentTypes())
        }
        return self
    }

    /// Status 200..<300 and a content type the request's `Accept` allows.
    /// - Returns: the request.
    @discardableResult
    public func validate() -> Self {
        appendValidator { [weak self] request, response, _ in
            ResponseValidation.statusAndAccept(request, response, hasBody: !(self?.bodyIsEmpty ?? true))
        }
        return self
    }
}

/// The built-in checks behind `validate`.
enum ResponseValidation {
    /// A validation closure's result as the request's error (nil for success); a failure that
    /// is not a `TinyFireError` is wrapped in `.customValidationFailed`.
    static func error(from result: Request.ValidationResult) -> TinyFireError? {
        switch result {
        case .success: return nil
        case .failure(let error as TinyFireError): return error
        case .failure(let error): return .responseValidationFailed(reason: .customValidationFailed(error: error))
        }
    }

    /// `validate()`: a 2xx status, and a content type the request's `Accept` allows.
    static func statusAndAccept(_ request: URLRequest?, _ response: HTTPURLResponse, hasBody: Bool) -> TinyFireError? {
        if let error = statusCode(response, acceptable: 200..<300) { return error }
        let accept = request?.headers["Accept"].map(mediaTypes(in:)) ?? ["*/*"]
        return contentType(response, hasBody: hasBody, acceptable: accept)
    }
    static func statusCode<S: Sequence>(_ response: HTTPURLResponse, acceptable: S) -> TinyFireError? where S.Element == Int {
        acceptable.contains(response.status.code)
            ? nil : .responseValidationFailed(reason: .unacceptableStatusCode(code: response.status.code))
    }

    static func contentType(_ response: HTTPURLResponse, hasBody: Bool, acceptable: [String]) -> TinyFireError? {
        guard hasBody else { return nil }
        guard let contentType = response.headerFields[values: .contentType].first, let responseType = MediaType(contentType) else {
            if acceptable.contains(where: { MediaType($0)?.isWildcard == true }) { return nil }
            return .responseValidationFailed(reason: .missingContentType(acceptableContentTypes: acceptable.sorted()))
        }
        for candidate in acceptable {
            if let type = MediaType(candidate), type.matches(responseType) { return nil }
        }
        return .responseValidationFailed(
            reason: .unacceptableContentType(acceptableContentTypes: acceptable.sorted(), responseContentType: responseType.description))
    }

    /// The media ranges of an `Accept` value, without parameters.
    static func mediaTypes(in accept: String) -> [String] {
        accept.split(separator: ",").compactMap { range in
            let type = range.split(separator: ";").first.map { $0.trimmingHTTPWhitespace() } ?? ""
            return type.isEmpty ? nil : type
        }
    }
}

/// `type/subtype`, lowercased, parameters dropped.
struct MediaType: CustomStringConvertible {
    let type: String
    let subtype: String

    init?(_ text: String) {
        let essence = text.split(separator: ";").first.map { $0.trimmingHTTPWhitespace().lowercased() } ?? ""
        let parts = essence.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { return nil }
        type = String(parts[0])
        subtype = String(parts[1])
    }

    var isWildcard: Bool { type == "*" && subtype == "*" }

    /// Whether `self` (an acceptable range) admits `other` (a response type): a `*` on either
    /// side admits any type or subtype there (`*/*`, `application/*`, and `*/json` as
    /// Alamofire accepts it).
    func matches(_ other: MediaType) -> Bool {
        (type == "*" || type == other.type) && (subtype == "*" || subtype == other.subtype)
    }

    var description: String { "\(type)/\(subtype)" }
}
