#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Untyped request parameters, as Alamofire's `Parameters`: strings, numbers, booleans, nil,
/// nested dictionaries and arrays of them. `[String: Any]`, as Alamofire 4 documents it
/// (Alamofire 5.12 spells it `[String: any Any & Sendable]`, which converts to this): the
/// request keeps the dictionary until it encodes it, so values of a class type must not be
/// mutated meanwhile.
public typealias Parameters = [String: Any]

/// Encodes untyped `Parameters` into a request, as Alamofire's `ParameterEncoding` (the 4.x
/// API Alamofire still ships beside `ParameterEncoder`).
public protocol ParameterEncoding: Sendable {
    /// Encodes `parameters` into the request `urlRequest` builds.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - parameters: the values; nil leaves the request unchanged.
    /// - Returns: the request with the parameters in its URL or body.
    /// - Throws: what building the request throws, or `TinyFireError.parameterEncodingFailed`.
    func encode(_ urlRequest: any URLRequestConvertible, with parameters: Parameters?) throws -> URLRequest
}

/// Encodes parameters as a URL query or an `application/x-www-form-urlencoded` body, as
/// Alamofire's `URLEncoding`: keys sorted (nested ones too), nested dictionaries as
/// `key[nested]`, arrays per `arrayEncoding`, booleans per `boolEncoding`, every byte outside
/// `URLEncodedFormEncoder.defaultAllowedBytes` percent-escaped.
public struct URLEncoding: ParameterEncoding {
    /// Where the encoded parameters go: `.methodDependent` (the query for GET, HEAD and DELETE,
    /// the body otherwise; the default), `.queryString`, `.httpBody`. The same type as
    /// `URLEncodedFormParameterEncoder`'s.
    public typealias Destination = URLEncodedFormParameterEncoder.Destination
    /// How array elements are keyed: `.brackets` (`key[]`, the default), `.noBrackets`,
    /// `.indexInBrackets`, `.custom`. The same type as `URLEncodedFormEncoder`'s.
    public typealias ArrayEncoding = URLEncodedFormEncoder.ArrayEncoding
    /// How booleans are written: `.numeric` (`1`/`0`, the default) or `.literal`. The same type
    /// as `URLEncodedFormEncoder`'s.
    public typealias BoolEncoding = URLEncodedFormEncoder.BoolEncoding

    /// Method-dependent destination, brackets, numeric booleans.
    public static var `default`: URLEncoding { URLEncoding() }
    /// Always the query.
    public static var queryString: URLEncoding { URLEncoding(destination: .queryString) }
    /// Always the body.
    public static var httpBody: URLEncoding { URLEncoding(destination: .httpBody) }

    /// Where the parameters go.
    public let destination: Destination
    /// How array elements are keyed.
    public let arrayEncoding: ArrayEncoding
    /// How booleans are written.
    public let boolEncoding: BoolEncoding

    /// Creates an encoding.
    /// - Parameters:
    ///   - destination: default `.methodDependent`.
    ///   - arrayEncoding: default `.brackets`.
    ///   - boolEncoding: default `.numeric`.
    public init(
        destination: Destination = .methodDependent, arrayEncoding: ArrayEncoding = .brackets, boolEncoding: BoolEncoding = .numeric
    ) {
        self.destination = destination
        self.arrayEncoding = arrayEncoding
        self.boolEncoding = boolEncoding
    }

    /// Appends the parameters to the URL's query (after what is there), or sets them as the
    /// body with `Content-Type: application/x-www-form-urlencoded; charset=utf-8` when the
    /// request has no Content-Type. Empty parameters leave the URL alone; in the body they
    /// give an empty body.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - parameters: the values.
    /// - Returns: the encoded request.
    /// - Throws: `TinyFireError.parameterEncodingFailed(.missingURL)` when the query is the
    ///   destination and the request has no URL.
    public func encode(_ urlRequest: any URLRequestConvertible, with parameters: Parameters?) throws -> URLRequest {
        var request = try urlRequest.asURLRequest()
        guard let parameters else { return request }
        if destination.encodesParametersInURL(for: request.method ?? .get) {
            guard let url = request.url else { throw TinyFireError.parameterEncodingFailed(reason: .missingURL) }
            if !parameters.isEmpty, var components = URLComponents(url: url, resolvingAgainstBaseURL: false) {
                components.percentEncodedQuery = (components.percentEncodedQuery.map { $0 + "&" } ?? "") + query(parameters)
                request.url = components.url
            }
        } else {
            if request.headers["Content-Type"] == nil {
                request.headers.update(.contentType("application/x-www-form-urlencoded; charset=utf-8"))
            }
            request.httpBody = Data(query(parameters).utf8)
        }
        return request
    }

    /// The escaped `(key, value)` pairs of one parameter: a dictionary gives `key[nested]`
    /// pairs (keys sorted), an array one pair per element, a boolean per `boolEncoding`,
    /// anything else its description (whole doubles without `.0`).
    /// - Parameters:
    ///   - key: the key.
    ///   - value: the value.
    /// - Returns: the pairs, escaped.
    public func queryComponents(fromKey key: String, value: Any) -> [(String, String)] {
        var components: [(String, String)] = []
        let unwrapped = JSONObject.unwrapped(value)
        switch unwrapped {
        case let dictionary as [String: Any]:
            for nestedKey in dictionary.keys.sorted() {
                components += queryComponents(fromKey: "\(key)[\(nestedKey)]", value: dictionary[nestedKey] as Any)
            }
        case let array as [Any]:
            for (index, element) in array.enumerated() {
                components += queryComponents(fromKey: arrayEncoding.encode(key, atIndex: index), value: element)
            }
        case let bool as Bool where unwrapped.map(JSONObject.isBoolean) == true:
            components.append((escape(key), escape(boolEncoding.encode(bool))))
        case let number as Double where number.isFinite:
            components.append((escape(key), escape(JSONObject.text(of: number))))
        case .some(let value):
            components.append((escape(key), escape("\(value)")))
        case .none:
            components.append((escape(key), ""))
        }
        return components
    }

    /// Percent-escapes every byte outside `URLEncodedFormEncoder.defaultAllowedBytes`
    /// (Alamofire's `afURLQueryAllowed`); a space becomes `%20`.
    /// - Parameter string: the text.
    /// - Returns: the escaped text.
    public func escape(_ string: String) -> String {
        URLEncodedFormEncoder.percentEscaped(string, allowed: URLEncodedFormEncoder.defaultAllowedBytes, plusForSpace: false)
    }

    private func query(_ parameters: Parameters) -> String {
        var components: [(String, String)] = []
        for key in parameters.keys.sorted() {
            components += queryComponents(fromKey: key, value: parameters[key] as Any)
        }
        return components.map { "\($0)=\($1)" }.joined(separator: "&")
    }
}

/// Encodes parameters as a JSON body, as Alamofire's `JSONEncoding`, with TinyFire's own
/// writer (FoundationEssentials has no `JSONSerialization`). Sets `Content-Type:
/// application/json` when the request has none.
///
/// Values may be strings, booleans, integers, finite doubles and floats, `Decimal`, nil
/// (`null`), and dictionaries with string keys and arrays of these, nested at most 512 levels.
/// Keys are written sorted: equal parameters give equal bytes.
public struct JSONEncoding: ParameterEncoding {
    /// Why parameters could not be written as JSON.
    public enum Error: Swift.Error, Sendable, CustomStringConvertible {
        /// The value is not an object, an array or (with `fragmentsAllowed`) a JSON value.
        /// Alamofire's single case; TinyFire throws the specific ones below.
        case invalidJSONObject
        /// A value of this type at this path (`$.user.avatar`) has no JSON form.
        case unsupportedValue(path: String, type: String)
        /// A NaN or infinite number at this path.
        case nonFiniteNumber(path: String)
        /// Nested deeper than `limit` levels at this path.
        case nestingTooDeep(path: String, limit: Int)
        /// The top-level value is not an object or an array (allow it with `fragmentsAllowed`).
        case invalidTopLevelValue(type: String)

        /// What is wrong and where.
        public var description: String {
            switch self {
            case .invalidJSONObject: return "invalid JSON object"
            case .unsupportedValue(let path, let type): return "\(path) is a \(type), which has no JSON form"
            case .nonFiniteNumber(let path): return "\(path) is NaN or infinite, which JSON cannot write"
            case .nestingTooDeep(let path, let limit): return "\(path) is nested deeper than \(limit) levels"
            case .invalidTopLevelValue(let type): return "the top-level value is a \(type), not a dictionary or an array"
            }
        }

        /// The same as `description`.
        public var localizedDescription: String { description }
    }

    /// How the JSON is written, as `JSONSerialization.WritingOptions`.
    public struct WritingOptions: OptionSet, Sendable {
        /// The raw bits.
        public let rawValue: UInt
        /// Creates options from bits.
        /// - Parameter rawValue: the bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Newlines and two-space indentation, `"key" : value`.
        public static let prettyPrinted = WritingOptions(rawValue: 1 << 0)
        /// Keys sorted (they always are; accepted for ported code).
        public static let sortedKeys = WritingOptions(rawValue: 1 << 1)
        /// A string, number, boolean or null is accepted at the top level.
        public static let fragmentsAllowed = WritingOptions(rawValue: 1 << 2)
        /// `/` written as itself rather than `\/`.
        public static let withoutEscapingSlashes = WritingOptions(rawValue: 1 << 3)
    }

    /// Compact JSON.
    public static var `default`: JSONEncoding { JSONEncoding() }
    /// Pretty-printed JSON.
    public static var prettyPrinted: JSONEncoding { JSONEncoding(options: .prettyPrinted) }

    /// How the JSON is written.
    public let options: WritingOptions

    /// Creates an encoding.
    /// - Parameter options: default none (compact).
    public init(options: WritingOptions = []) {
        self.options = options
    }

    /// Sets the parameters as the JSON body.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - parameters: the values; nil leaves the request unchanged.
    /// - Returns: the request with a JSON body.
    /// - Throws: `TinyFireError.parameterEncodingFailed(.jsonEncodingFailed)` with a
    ///   `JSONEncoding.Error` naming the value and its path.
    public func encode(_ urlRequest: any URLRequestConvertible, with parameters: Parameters?) throws -> URLRequest {
        try encode(urlRequest, withJSONObject: parameters)
    }

    /// Sets any JSON value (an array at the top, say) as the body.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - jsonObject: the value; nil leaves the request unchanged.
    /// - Returns: the request with a JSON body.
    /// - Throws: `TinyFireError.parameterEncodingFailed(.jsonEncodingFailed)`.
    public func encode(_ urlRequest: any URLRequestConvertible, withJSONObject jsonObject: Any? = nil) throws -> URLRequest {
        var request = try urlRequest.asURLRequest()
        guard let jsonObject else { return request }
        let data: Data
        do {
            data = try JSONObject.write(
                jsonObject,
                options: .init(
                    prettyPrinted: options.contains(.prettyPrinted), escapesSlashes: !options.contains(.withoutEscapingSlashes),
                    fragmentsAllowed: options.contains(.fragmentsAllowed)))
        } catch {
            throw TinyFireError.parameterEncodingFailed(reason: .jsonEncodingFailed(error: error))
        }
        if request.headers["Content-Type"] == nil { request.headers.update(.contentType("application/json")) }
        request.httpBody = data
        return request
    }
}

/// The convertible behind `Session.request(_:method:parameters:encoding:…)`.
struct RequestConvertible: URLRequestConvertible {
    /// The parameters, held until the request is built (see `Parameters`).
    struct HeldParameters: @unchecked Sendable {
        let value: Parameters?
    }

    let url: any URLConvertible
    let method: HTTPMethod
    let parameters: HeldParameters
    let encoding: any ParameterEncoding
    let headers: HTTPHeaders?
    let requestModifier: RequestModifier?

    init(
        url: any URLConvertible, method: HTTPMethod, parameters: Parameters?, encoding: any ParameterEncoding, headers: HTTPHeaders?,
        requestModifier: RequestModifier?
    ) {
        self.url = url
        self.method = method
        self.parameters = HeldParameters(value: parameters)
        self.encoding = encoding
        self.headers = headers
        self.requestModifier = requestModifier
    }

    func asURLRequest() throws -> URLRequest {
        var request = try URLRequest(url: url, method: method, headers: headers)
        try requestModifier?(&request)
        return try encoding.encode(request, with: parameters.value)
    }
}
