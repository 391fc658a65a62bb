// The public, throwing ways in to the core's proxy types (TinyFireCore/Connection/Proxy.swift),
// with TinyFire's error.

extension Proxy {
    /// Parses a proxy URL as curl takes it: `[scheme://][user[:password]@]host[:port][/]`.
    /// A URL without a scheme is `http://`; user and password are percent-decoded.
    /// - Throws: `TinyFireError.invalidProxy` naming the problem: an unsupported scheme (SOCKS
    ///   is not supported), no host, a bad port, a path, or characters a host cannot hold.
    public init(url text: String) throws(TinyFireError) {
        do throws(ProxyURLError) {
            self = try Proxy(parsing: text)
        } catch {
            throw .invalidProxy(reason: error.reason)
        }
    }
}

extension ProxySettings {
    /// Settings from the environment, by curl's rules:
    /// - `http_proxy` for `http://` URLs (lowercase only: `HTTP_PROXY` is ignored, since a CGI
    ///   program gets a client's `Proxy:` header under that name);
    /// - `https_proxy` or `HTTPS_PROXY` for `https://` URLs;
    /// - `all_proxy` or `ALL_PROXY` for either when its own variable is unset;
    /// - `no_proxy` or `NO_PROXY`: hosts that go direct (see `NoProxyList`).
    /// Lowercase wins over uppercase; an empty value is unset.
    /// - Parameter lookup: reads a variable; default `getenv`.
    /// - Throws: `TinyFireError.invalidProxy` naming the variable whose proxy URL is malformed.
    public static func environment(_ lookup: (String) -> String? = ProxySettings.processEnvironment) throws(TinyFireError)
        -> ProxySettings
    {
        do throws(ProxyURLError) {
            return try ProxySettings.parseEnvironment(lookup)
        } catch {
            throw .invalidProxy(reason: error.reason)
        }
    }
}
