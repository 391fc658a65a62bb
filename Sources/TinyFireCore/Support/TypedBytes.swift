// The standard library's withUnsafeBytes rethrows untyped errors, which Embedded Swift cannot
// carry: these pass the closure's own error type through.

extension Array where Element == UInt8 {
    /// `withUnsafeBytes` whose closure's error type is the caller's.
    package func withBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let result: Result<R, E> = withUnsafeBytes { bytes in Result { () throws(E) -> R in try body(bytes) } }
        return try result.get()
    }
}

extension ArraySlice where Element == UInt8 {
    /// `withUnsafeBytes` whose closure's error type is the caller's.
    package func withBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let result: Result<R, E> = withUnsafeBytes { bytes in Result { () throws(E) -> R in try body(bytes) } }
        return try result.get()
    }
}
