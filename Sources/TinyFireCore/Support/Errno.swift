#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `strerror` for an errno value.
package func errnoMessage(_ code: Int32) -> String {
    String(cString: strerror(code))
}
