#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A value that can become a `URL`, as in Alamofire (`String` and `URL` conform).
public protocol URLConvertible: Sendable {
    /// The URL.
    /// - Throws: any error (TinyFire's own conformers throw `TinyFireError.invalidURL`); the
    ///   request fails with it, wrapped in `.createURLRequestFailed` unless it is a
    ///   `TinyFireError`. Untyped, as Alamofire's, so conformers written for it port.
    func asURL() throws -> URL
}

extension String: URLConvertible {
    /// Parses the string as a URL.
    /// - Throws: `TinyFireError.invalidURL` when it is not one.
    public func asURL() throws(TinyFireError) -> URL {
        guard let url = URL(string: self) else { throw .invalidURL(url: self, reason: "not a valid URL") }
        return url
    }
}

extension URL: URLConvertible {
    /// The URL itself.
    public func asURL() throws(TinyFireError) -> URL { self }
}

extension URLComponents: URLConvertible {
    /// The URL the components describe.
    /// - Throws: `TinyFireError.invalidURL` when they describe none.
    public func asURL() throws(TinyFireError) -> URL {
        guard let url else { throw .invalidURL(url: description, reason: "the components do not form a URL") }
        return url
    }
}
