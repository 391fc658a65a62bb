#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Encodes `Encodable` parameters into a `URLRequest`, as Alamofire's `ParameterEncoder`.
public protocol ParameterEncoder: Sendable {
    /// Encodes `parameters` into `request`.
    /// - Parameters:
    ///   - parameters: the values; nil leaves the request unchanged.
    ///   - request: the request to encode into.
    /// - Returns: the request with the parameters in its URL or body.
    /// - Throws: `TinyFireError.parameterEncoderFailed` naming the missing part or the
    ///   encoder's error.
    func encode<Parameters: Encodable & Sendable>(_ parameters: Parameters?, into request: URLRequest) throws -> URLRequest
}

/// Encodes parameters as JSON into the body and sets `Content-Type: application/json` when the
/// request has none.
public struct JSONParameterEncoder: ParameterEncoder {
    /// A plain `JSONEncoder` (key order as the value encodes it).
    public static var `default`: JSONParameterEncoder { JSONParameterEncoder() }
    /// Pretty-printed output.
    public static var prettyPrinted: JSONParameterEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .prettyPrinted
        return JSONParameterEncoder(encoder: encoder)
    }
    /// Keys sorted, so equal values always encode to equal bytes.
    public static var sortedKeys: JSONParameterEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return JSONParameterEncoder(encoder: encoder)
    }

    /// The encoder used.
    public let encoder: JSONEncoder

    /// Creates an encoder.
    /// - Parameter encoder: the `JSONEncoder`; default a plain one.
    public init(encoder: JSONEncoder = JSONEncoder()) {
        self.encoder = encoder
    }

    /// Sets the JSON of `parameters` as the body.
    /// - Parameters:
    ///   - parameters: the values.
    ///   - request: the request.
    /// - Returns: the request with a JSON body.
    /// - Throws: `TinyFireError.parameterEncoderFailed(.encoderFailed)` when encoding fails.
    public func encode<Parameters: Encodable & Sendable>(_ parameters: Parameters?, into request: URLRequest) throws -> URLRequest {
        guard let parameters else { return request }
        var request = request
        do {
            request.httpBody = try encoder.encode(parameters)
        } catch {
            throw TinyFireError.parameterEncoderFailed(reason: .encoderFailed(error: error))
        }
        if request.headers["Content-Type"] == nil {
            request.headers.update(.contentType("application/json"))
        }
        return request
    }
}

extension ParameterEncoder where Self == JSONParameterEncoder {
    /// A `JSONParameterEncoder` with a default `JSONEncoder`.
    public static var json: JSONParameterEncoder { JSONParameterEncoder() }

    /// A `JSONParameterEncoder` with `encoder`.
    /// - Parameter encoder: the `JSONEncoder`.
    /// - Returns: the parameter encoder.
    public static func json(encoder: JSONEncoder = JSONEncoder()) -> JSONParameterEncoder {
        JSONParameterEncoder(encoder: encoder)
    }
}

/// Encodes parameters as `application/x-www-form-urlencoded` into the query or the body.
public struct URLEncodedFormParameterEncoder: ParameterEncoder {
    /// Where the encoded form goes.
    public enum Destination: Sendable {
        /// The query for GET, HEAD and DELETE; the body for every other method.
        case methodDependent
        /// Always appended to the URL's query.
        case queryString
        /// Always the body.
        case httpBody

        func encodesParametersInURL(for method: HTTPMethod) -> Bool {
            switch self {
            case .methodDependent: return [.get, .head, .delete].contains(method)
            case .queryString: return true
            case .httpBody: return false
            }
        }
    }

    /// `URLEncodedFormEncoder()` to the method-dependent destination.
    public static var `default`: URLEncodedFormParameterEncoder { URLEncodedFormParameterEncoder() }

    /// The form encoder.
    public let encoder: URLEncodedFormEncoder
    /// Where the form goes.
    public let destination: Destination

    /// Creates an encoder.
    /// - Parameters:
    ///   - encoder: the form encoder; default `URLEncodedFormEncoder()`.
    ///   - destination: where the form goes; default `.methodDependent`.
    public init(encoder: URLEncodedFormEncoder = URLEncodedFormEncoder(), destination: Destination = .methodDependent) {
        self.encoder = encoder
        self.destination = destination
    }

    /// Encodes `parameters` into the query or the body. A body gets
    /// `Content-Type: application/x-www-form-urlencoded; charset=utf-8` when it has none.
    /// - Parameters:
    ///   - parameters: the values; the root must be a keyed value (a struct or dictionary).
    ///   - request: the request.
    /// - Returns: the encoded request.
    /// - Throws: `TinyFireError.parameterEncoderFailed` when the URL or method is missing or
    ///   the form encoder fails.
    public func encode<Parameters: Encodable & Sendable>(_ parameters: Parameters?, into request: URLRequest) throws -> URLRequest {
        guard let parameters else { return request }
        var request = request
        guard let url = request.url else {
            throw TinyFireError.parameterEncoderFailed(reason: .missingRequiredComponent(.url))
        }
        guard let method = request.method else {
            throw TinyFireError.parameterEncoderFailed(reason: .missingRequiredComponent(.httpMethod(rawValue: "nil")))
        }
        let form: String
        do {
            form = try encoder.encode(parameters)
        } catch {
            throw TinyFireError.parameterEncoderFailed(reason: .encoderFailed(error: error))
        }
        if destination.encodesParametersInURL(for: method) {
            guard !form.isEmpty else { return request }
            guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else {
                throw TinyFireError.parameterEncoderFailed(reason: .missingRequiredComponent(.url))
            }
            let existing = components.percentEncodedQuery.map { $0.isEmpty ? "" : $0 + "&" } ?? ""
            components.percentEncodedQuery = existing + form
            guard let newURL = components.url else {
                throw TinyFireError.parameterEncoderFailed(reason: .missingRequiredComponent(.url))
            }
            request.url = newURL
        } else {
            if request.headers["Content-Type"] == nil {
                request.headers.update(.contentType("application/x-www-form-urlencoded; charset=utf-8"))
            }
            request.httpBody = Data(form.utf8)
        }
        return request
    }
}

extension ParameterEncoder where Self == URLEncodedFormParameterEncoder {
    /// A `URLEncodedFormParameterEncoder` with the default form encoder.
    public static var urlEncodedForm: URLEncodedFormParameterEncoder { URLEncodedFormParameterEncoder() }

    /// A `URLEncodedFormParameterEncoder`.
    /// - Parameters:
    ///   - encoder: the form encoder.
    ///   - destination: where the form goes.
    /// - Returns: the parameter encoder.
    public static func urlEncodedForm(
        encoder: URLEncodedFormEncoder = URLEncodedFormEncoder(), destination: URLEncodedFormParameterEncoder.Destination = .methodDependent
    ) -> URLEncodedFormParameterEncoder {
        URLEncodedFormParameterEncoder(encoder: encoder, destination: destination)
    }
}
