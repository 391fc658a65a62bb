// CTinyFireSystem too: its headers include <sys/socket.h>, and the Embedded build resolves
// AF_INET and sockaddr_storage through whichever of the two modules a file imports.
import CTinyFireSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// IP literals as bytes, for the iPAddress check.
package enum IPAddressBytes {
    /// 4 bytes for IPv4, 16 for IPv6, nil for a name.
    package static func parse(_ host: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }
}
