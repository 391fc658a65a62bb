/// Where one hop of a request goes, worked out once from its URL's parts and the proxy
/// settings: the origin, the request target the head carries, the route (direct, in absolute
/// form to a proxy, or through a CONNECT tunnel), the host the socket connects to, and the key
/// its connection is pooled under.
package struct RequestTarget: Sendable, Equatable {
    /// How the hop reaches its origin.
    package enum Route: Sendable, Equatable {
        /// A connection to the origin itself.
        case direct
        /// To the proxy, the request in absolute form (`GET http://origin/path`): `http://`
        /// URLs through an HTTP proxy.
        case forward(Proxy)
        /// Through a CONNECT tunnel the proxy opens to the origin; TLS to the origin, if any,
        /// runs inside it.
        case tunnel(Proxy)
    }

    /// `http` or `https`, lowercased.
    package let scheme: String
    /// The origin's host (an IPv6 address without brackets).
    package let host: String
    /// The origin's port.
    package let port: Int
    /// `host[:port]` as the `Host` field carries it (brackets around IPv6, the port only when
    /// it is not the scheme's default).
    package let authority: String
    /// The path and query (`/` at least).
    package let originForm: String
    package let route: Route

    /// - Parameters:
    ///   - scheme: the URL's scheme (any case).
    ///   - host: the URL's host, percent-encoded as written, brackets allowed around IPv6.
    ///   - port: the URL's port, nil for the scheme's default.
    ///   - path: the percent-encoded path ("" for none).
    ///   - query: the percent-encoded query, without "?".
    ///   - url: the URL as text, for errors.
    ///   - proxies: which proxy the hop goes through.
    /// - Throws: `RequestTargetError` for a scheme other than http/https, no host, or a port
    ///   out of range (TinyFire: `TinyFireError.invalidURL`).
    package init(
        scheme rawScheme: String?, host rawHost: String?, port: Int?, path: String, query: String?, url: String,
        proxies: ProxySettings
    ) throws(RequestTargetError) {
        guard let rawScheme else { throw RequestTargetError(url: url, reason: "no scheme") }
        let scheme = rawScheme.lowercased()
        guard scheme == "http" || scheme == "https" else {
            throw RequestTargetError(url: url, reason: "unsupported scheme \(quoted(scheme))")
        }
        guard var host = rawHost, !host.isEmpty else { throw RequestTargetError(url: url, reason: "no host") }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let defaultPort = scheme == "https" ? 443 : 80
        let port = port ?? defaultPort
        guard (1...65535).contains(port) else { throw RequestTargetError(url: url, reason: "port \(port) out of range") }
        self.scheme = scheme
        self.host = host
        self.port = port
        let hostForHeader = host.contains(":") ? "[\(host)]" : host
        authority = port == defaultPort ? hostForHeader : "\(hostForHeader):\(port)"
        var target = path.isEmpty ? "/" : path
        if let query { target += "?" + query }
        originForm = target
        if let proxy = proxies.proxy(forScheme: scheme, host: host) {
            route = scheme == "https" || proxy.tunnelsHTTP ? .tunnel(proxy) : .forward(proxy)
        } else {
            route = .direct
        }
    }

    /// Whether TLS runs to the origin.
    package var isTLS: Bool { scheme == "https" }

    /// The proxy the hop goes through.
    package var proxy: Proxy? {
        switch route {
        case .direct: return nil
        case .forward(let proxy), .tunnel(let proxy): return proxy
        }
    }

    /// The request line's target: the origin form, or the absolute form to a proxy.
    package var requestTarget: String {
        if case .forward = route { return "\(scheme)://\(authority)\(originForm)" }
        return originForm
    }

    /// `host:port` for CONNECT (always with the port).
    package var tunnelAuthority: String {
        let hostForHeader = host.contains(":") ? "[\(host)]" : host
        return "\(hostForHeader):\(port)"
    }

    /// The host and port the socket connects to: the proxy's, or the origin's.
    package var connectHost: String { proxy?.host ?? host }
    package var connectPort: Int { proxy?.port ?? port }

    /// The key connections for this hop are pooled under. Requests in absolute form to one
    /// proxy share its connections whatever their origin; a tunnel belongs to its origin and
    /// its proxy (and the credentials it was opened with).
    package var poolKey: PoolKey {
        switch route {
        case .direct:
            return PoolKey(scheme: scheme, host: host, port: port)
        case .forward(let proxy):
            return PoolKey(scheme: "http", host: "", port: 0, proxy: ProxyKey(proxy, tunnel: false))
        case .tunnel(let proxy):
            return PoolKey(scheme: scheme, host: host, port: port, proxy: ProxyKey(proxy, tunnel: true))
        }
    }
}

/// The part of a pool key that says which proxy a connection runs through and how.
package struct ProxyKey: Hashable, Sendable {
    package var scheme: Proxy.Scheme
    package var host: String
    package var port: Int
    /// The credentials a tunnel was opened with (a tunnel is not shared across users).
    package var user: String?
    package var password: String?
    package var tunnel: Bool
    /// The https proxy's trust anchors (two settings that trust differently do not share).
    package var caFiles: [String]
    package var caDirectories: [String]

    package init(_ proxy: Proxy, tunnel: Bool) {
        scheme = proxy.scheme
        host = proxy.host.lowercased()
        port = proxy.port
        user = proxy.credentials?.user
        password = proxy.credentials?.password
        self.tunnel = tunnel
        caFiles = proxy.tls.caCertificateFiles
        caDirectories = proxy.tls.caCertificateDirectories
    }

    /// `scheme://host:port`, without credentials.
    package var displayURL: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(scheme.rawValue)://\(shownHost):\(port)"
    }
}

/// The key a pooled connection is filed under.
package struct PoolKey: Hashable, Sendable, CustomStringConvertible {
    package var scheme: String
    package var host: String
    package var port: Int
    /// The proxy the connection runs through (nil: direct). Requests in absolute form to a
    /// proxy are keyed by the proxy alone (empty host).
    package var proxy: ProxyKey? = nil

    /// `scheme://host:port [via proxy]`, without credentials.
    package var description: String {
        guard let proxy else { return "\(scheme)://\(host):\(port)" }
        if host.isEmpty { return "via \(proxy.displayURL)" }
        return "\(scheme)://\(host):\(port) via \(proxy.displayURL)"
    }

    package init(scheme: String, host: String, port: Int, proxy: ProxyKey? = nil) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.proxy = proxy
    }
}

/// A hop whose URL cannot be requested: no scheme, a scheme other than http/https, no host,
/// or a port out of range. `url` is the URL as text, `reason` the problem.
package struct RequestTargetError: Error, Sendable, CustomStringConvertible {
    package let url: String
    package let reason: String
    package var description: String { "\(url): \(reason)" }

    package init(url: String, reason: String) {
        self.url = url
        self.reason = reason
    }
}
