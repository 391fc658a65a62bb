/// A `Content-Range` value (RFC 9110 §14.4): `bytes first-last/complete` or `bytes */complete`.
/// Numbers are plain decimal digits, at most 19 of them (`parseDecimal`), so `last + 1` and
/// `complete - first` never overflow. Sans-I/O; fuzzed by fuzz/run.sh.
package struct ContentRange: Equatable {
    /// First and last byte, nil for an unsatisfied range (`*`).
    package var range: ClosedRange<UInt64>?
    /// The whole representation's length, nil when `*`.
    package var completeLength: UInt64?

    package init?(_ value: String) {
        let trimmed = value.trimmingHTTPWhitespace()
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst(6).trimmingHTTPWhitespace()
        let halves = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        if halves[1] == "*" {
            completeLength = nil
        } else {
            guard let complete = parseDecimal(halves[1]) else { return nil }
            completeLength = complete
        }
        if halves[0] == "*" {
            guard completeLength != nil else { return nil }
            range = nil
            return
        }
        let bounds = halves[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = parseDecimal(bounds[0]), let last = parseDecimal(bounds[1]), first <= last else { return nil }
        if let completeLength, last >= completeLength { return nil }
        range = first...last
    }
}
