#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `strerror` for an errno value.
package func errnoMessage(_ code: Int32) -> String {
    String(cString: strerror(code))
}

/// The operating system refused a resource (epoll, eventfd, a thread, a descriptor): what
/// failed and errno's text, e.g. "epoll_create1: Too many open files". TinyFire reports it as
/// `TinyFireError.resourceExhausted`.
package struct SystemResourceError: Error, Sendable, CustomStringConvertible {
    package let description: String

    package init(_ description: String) { self.description = description }
}
