/// An HTTP request method, as in Alamofire: a string wrapper with named constants for the
/// RFC 9110 methods, PATCH, and QUERY; any other token works through `init(rawValue:)`.
public struct HTTPMethod: RawRepresentable, Equatable, Hashable, Sendable {
    /// `CONNECT`
    public static let connect = HTTPMethod(rawValue: "CONNECT")
    /// `DELETE`
    public static let delete = HTTPMethod(rawValue: "DELETE")
    /// `GET`
    public static let get = HTTPMethod(rawValue: "GET")
    /// `HEAD`
    public static let head = HTTPMethod(rawValue: "HEAD")
    /// `OPTIONS`
    public static let options = HTTPMethod(rawValue: "OPTIONS")
    /// `PATCH`
    public static let patch = HTTPMethod(rawValue: "PATCH")
    /// `POST`
    public static let post = HTTPMethod(rawValue: "POST")
    /// `PUT`
    public static let put = HTTPMethod(rawValue: "PUT")
    /// `QUERY` (safe, idempotent, with a body).
    public static let query = HTTPMethod(rawValue: "QUERY")
    /// `TRACE`
    public static let trace = HTTPMethod(rawValue: "TRACE")

    /// The method token as sent.
    public let rawValue: String

    /// Creates a method from its token (case-sensitive, as HTTP methods are).
    /// - Parameter rawValue: the method token.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// Whether repeating the request has the same effect as sending it once (RFC 9110 §9.2.2);
    /// only idempotent requests are retried automatically on a stale connection.
    public var isIdempotent: Bool {
        switch rawValue {
        case "GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE", "QUERY": return true
        default: return false
        }
    }
}
