import HTTPTypes

/// Decides what happens to a redirect, as Alamofire's `RedirectHandler`.
///
/// Called on the session's I/O thread when a 301, 302, 303, 307 or 308 with a usable
/// `Location` arrives, after TinyFire has prepared the next request (method rewritten for 303,
/// credentials dropped across origins, https→http refused unless allowed). While it runs, no
/// other transfer of the session moves: return at once, calling `completion` before returning
/// when the answer is at hand, or later from any thread when it needs work (a lookup, a
/// prompt). While it waits, TinyFire holds up to `RequestLifecycle.redirectBodyLimit` (64 KiB)
/// of the redirect's body; only this request waits.
public protocol RedirectHandler: Sendable {
    /// Answers, through `completion`, whether and where a redirect is followed.
    /// - Parameters:
    ///   - request: the request being redirected.
    ///   - redirect: the request TinyFire would send next.
    ///   - response: the redirect response.
    ///   - completion: the request to send, or nil to stop and deliver the redirect response
    ///     (its body included) as the final response.
    func request(
        _ request: Request, willBeRedirectedTo redirect: URLRequest, for response: HTTPURLResponse,
        completion: @escaping @Sendable (URLRequest?) -> Void)
}

/// The ready-made `RedirectHandler`, as Alamofire's `Redirector`.
public struct Redirector: RedirectHandler {
    /// What to do with redirects.
    public enum Behavior: Sendable {
        /// Follow them (the default session behaviour).
        case follow
        /// Deliver the redirect response itself.
        case doNotFollow
        /// Rewrite the next request, or return nil to stop.
        case modify(@Sendable (Request, URLRequest, HTTPURLResponse) -> URLRequest?)
    }

    /// Follows every redirect.
    public static let follow = Redirector(behavior: .follow)
    /// Follows none.
    public static let doNotFollow = Redirector(behavior: .doNotFollow)

    /// The behaviour.
    public let behavior: Behavior

    /// Creates a redirector.
    /// - Parameter behavior: the behaviour.
    public init(behavior: Behavior) {
        self.behavior = behavior
    }

    /// Applies the behaviour.
    /// - Parameters:
    ///   - request: the request.
    ///   - redirect: the proposed next request.
    ///   - response: the redirect response.
    ///   - completion: the decision.
    public func request(
        _ request: Request, willBeRedirectedTo redirect: URLRequest, for response: HTTPURLResponse,
        completion: @escaping @Sendable (URLRequest?) -> Void
    ) {
        switch behavior {
        case .follow: completion(redirect)
        case .doNotFollow: completion(nil)
        case .modify(let closure): completion(closure(request, redirect, response))
        }
    }
}

extension RedirectHandler where Self == Redirector {
    /// Follows every redirect.
    public static var follow: Redirector { .follow }
    /// Follows none.
    public static var doNotFollow: Redirector { .doNotFollow }

    /// Rewrites each redirect.
    /// - Parameter closure: returns the next request, or nil to stop.
    /// - Returns: the redirector.
    public static func modify(using closure: @escaping @Sendable (Request, URLRequest, HTTPURLResponse) -> URLRequest?) -> Redirector {
        Redirector(behavior: .modify(closure))
    }
}
