/// The unit of line-protocol timestamps (InfluxDB's `precision` parameter).
public enum TimestampPrecision: String, Sendable, CaseIterable {
    /// Nanoseconds.
    case ns
    /// Microseconds.
    case us
    /// Milliseconds.
    case ms
    /// Seconds.
    case s
}
