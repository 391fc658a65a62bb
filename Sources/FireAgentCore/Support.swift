import TinyFire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension TinyFireError {
    /// The reason of an `.invalidProxy` alone (the proxy URL, password masked, and the problem),
    /// else the whole description.
    public var proxyReasonText: String {
        if case .invalidProxy(let reason) = self { return reason }
        return description
    }
}
