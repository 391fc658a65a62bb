#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// close(2), for code inside a type that has a `close()` of its own. The result is not looked
/// at: after close, the descriptor is gone whatever it returned (EINTR included, on Linux).
package func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}

#if hasFeature(Embedded)
    import CTinyFireSystem
    import Glibc

    // What Glibc's Swift overlay gives the full build, for the Embedded build (which imports the
    // C headers only: cross/embedded/Glibc). The same names, so the code above them is one.

    /// The calling thread's errno.
    package var errno: Int32 {
        get { __errno_location().pointee }
        set { __errno_location().pointee = newValue }
    }

    /// open(2) without a mode.
    package func open(_ path: UnsafePointer<CChar>, _ flags: Int32) -> Int32 { tinyfire_open(path, flags, 0) }

    /// open(2) with the mode of a file it creates.
    package func open(_ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: mode_t) -> Int32 {
        tinyfire_open(path, flags, UInt32(mode))
    }

    /// openat(2) without a mode.
    package func openat(_ dirfd: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32) -> Int32 {
        tinyfire_openat(dirfd, path, flags, 0)
    }

    /// openat(2) with the mode of a file it creates.
    package func openat(_ dirfd: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32, _ mode: mode_t) -> Int32 {
        tinyfire_openat(dirfd, path, flags, UInt32(mode))
    }

    /// fcntl(2) with no argument.
    package func fcntl(_ fd: Int32, _ command: Int32) -> Int32 { tinyfire_fcntl(fd, command, 0) }

    /// fcntl(2) with an integer argument.
    package func fcntl(_ fd: Int32, _ command: Int32, _ argument: Int32) -> Int32 {
        tinyfire_fcntl(fd, command, Int(argument))
    }
#endif
