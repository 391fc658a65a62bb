/// Decides what a response head means for redirects, without I/O: the session's policy, the
/// request that got the answer and the redirects so far go in; "not a redirect", "follow this
/// request" or "fail with this reason" comes out. Rules (RFC 9110 §15.4, as curl and
/// URLSession apply them):
/// - 301, 302, 303, 307 and 308 with a `Location` are followed while `maxRedirects > 0`; the
///   `maxRedirects + 1`-th is `tooManyRedirects`.
/// - 303 turns every method but HEAD into a bodiless GET; 301 and 302 turn POST into GET
///   (what browsers and curl do); 307 and 308 keep method and body.
/// - A Location that is not an absolute or relative http(s) URL with a host is
///   `invalidRedirect`; https to http is `insecureRedirect` unless allowed.
/// - `Authorization`, `Cookie` and `Proxy-Authorization` never follow to another origin.
package struct RedirectPolicy: Sendable, Equatable {
    /// Redirects followed at most; 0 delivers every redirect response as the final one.
    package var maxRedirects: Int
    /// Whether an https URL may redirect to http.
    package var allowsInsecureRedirects: Bool

    package init(maxRedirects: Int, allowsInsecureRedirects: Bool) {
        self.maxRedirects = maxRedirects
        self.allowsInsecureRedirects = allowsInsecureRedirects
    }

    /// The policy's verdict on one response head.
    package enum Decision: Sendable {
        /// Not a redirect to follow: the response is the final one.
        case deliver
        /// Follow: the next hop's request, before any redirect handler rewrites it.
        case follow(RequestSpec)
        /// A redirect that must not be followed, and must not be delivered either.
        case fail(TransferError.Reason)
    }

    /// The statuses that redirect.
    package static let redirectStatuses: Set<Int> = [301, 302, 303, 307, 308]

    /// The headers a method change to GET drops with the body.
    package static let bodyHeaders = ["Content-Type", "Content-Length", "Content-Encoding", "Transfer-Encoding"]

    /// Decides for one response head.
    /// - Parameters:
    ///   - status: the response's status code.
    ///   - location: its first `Location` value, if any.
    ///   - request: the request that got this response.
    ///   - redirectsSoFar: redirects already followed by this transfer.
    package func decide(status: Int, location: String?, request: RequestSpec, redirectsSoFar: Int) -> Decision {
        guard Self.redirectStatuses.contains(status), maxRedirects > 0, let location else { return .deliver }
        guard redirectsSoFar < maxRedirects else { return .fail(.tooManyRedirects(limit: maxRedirects)) }
        // An empty Location is the same resource to RFC 3986, and no redirect at all here
        // (Foundation's URL does not parse it either).
        guard !location.isEmpty, let target = request.url.resolving(location),
            case let scheme = target.scheme.lowercased(), scheme == "http" || scheme == "https",
            target.host?.isEmpty == false
        else {
            return .fail(.invalidRedirect(location: location))
        }
        if request.url.scheme.lowercased() == "https" && scheme == "http" && !allowsInsecureRedirects {
            return .fail(.insecureRedirect(location: target.absoluteString))
        }
        var next = request
        next.url = target
        if status == 303 && request.method != .head || (status == 301 || status == 302) && request.method == .post {
            next.method = .get
            next.body = nil
            next.bodySource = nil
            for name in Self.bodyHeaders { next.headers.remove(name: name) }
        }
        // The next request as a redirect handler sees it: without the credentials that will not
        // be sent (the head builder also keeps the session's defaults from that origin).
        if !next.sendsCredentials {
            for name in RequestSpec.credentialHeaders { next.headers.remove(name: name) }
        }
        return .follow(next)
    }

    /// The next hop as a redirect handler rewrote it: its URL, method, headers and body
    /// replace the policy's; the rest (credential origin, timeout, body source) stays.
    package static func apply(_ rewritten: RedirectRewrite, to target: RequestSpec) -> RequestSpec {
        var spec = target
        spec.url = rewritten.url ?? target.url
        spec.method = rewritten.method ?? target.method
        spec.headers = rewritten.headers
        spec.body = rewritten.body
        return spec
    }
}
