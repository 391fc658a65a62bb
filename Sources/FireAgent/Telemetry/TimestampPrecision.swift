/// The unit of line-protocol timestamps (InfluxDB's `precision` parameter).
package enum TimestampPrecision: String, Sendable, CaseIterable {
    /// Nanoseconds.
    case ns
    /// Microseconds.
    case us
    /// Milliseconds.
    case ms
    /// Seconds.
    case s
}
