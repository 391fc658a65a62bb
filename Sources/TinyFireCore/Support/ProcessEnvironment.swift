import CTinyFireSystem

/// The process's environment as a dictionary, without Foundation's `ProcessInfo` (which the
/// Embedded build does not have).
package enum ProcessEnvironment {
    /// Every `NAME=VALUE` of `environ`; an entry without `=` is left out, a repeated name keeps
    /// its first value (what `getenv` returns).
    ///
    /// Memory: a copy of the environment.
    package static func current() -> [String: String] {
        var result: [String: String] = [:]
        guard let entries = tinyfire_environment() else { return result }
        var index = 0
        while let entry = entries[index] {
            index += 1
            let text = String(cString: entry)
            guard let equals = text.utf8.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let name = String(text[..<equals])
            if result[name] == nil { result[name] = String(text[text.index(after: equals)...]) }
        }
        return result
    }
}
