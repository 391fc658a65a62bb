#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// One thing wrong with a config file: where (a key path such as `server.url`; empty for the
/// whole file) and why.
package struct ConfigProblem: Sendable, Equatable, CustomStringConvertible {
    /// The key path.
    package let path: String
    /// What is wrong, and what is allowed.
    package let reason: String

    /// A problem at `path`.
    package init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }

    /// "path: reason".
    package var description: String { path.isEmpty ? reason : "\(path): \(reason)" }
}

/// A config file that cannot be used, with every problem found in it (not only the first).
package struct ConfigError: Error, Sendable, CustomStringConvertible {
    /// The file.
    package let file: String
    /// The problems, in the order found.
    package let problems: [ConfigProblem]

    /// The problems found in `file`.
    package init(file: String, problems: [ConfigProblem]) {
        self.file = file
        self.problems = problems
    }

    /// The file and one problem per line.
    package var description: String {
        (["\(file): \(problems.count == 1 ? "1 problem" : "\(problems.count) problems")"] + problems.map { "  \($0)" })
            .joined(separator: "\n")
    }
}

/// Collects problems while a document is read.
package final class ProblemList {
    package init() {}
    package private(set) var problems: [ConfigProblem] = []
    package func add(_ path: String, _ reason: String) { problems.append(ConfigProblem(path: path, reason: reason)) }
}

/// Reads one object of a config document with types, bounds and key paths in every message;
/// `finish()` reports the keys nobody asked for, with the closest known key as a suggestion.
package final class ConfigReader {
    package let path: String
    private let values: [String: JSONValue]
    private let problems: ProblemList
    private var known: Set<String> = []

    package init(path: String, values: [String: JSONValue], problems: ProblemList) {
        self.path = path
        self.values = values
        self.problems = problems
    }

    /// Reads a whole document: it must be an object.
    package static func document(_ value: JSONValue, problems: ProblemList) -> ConfigReader {
        guard case .object(let values) = value else {
            problems.add("", "the document must be an object ({ … }), not \(value.kindDescription)")
            return ConfigReader(path: "", values: [:], problems: problems)
        }
        return ConfigReader(path: "", values: values, problems: problems)
    }

    package func keyPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    package func problem(_ key: String, _ reason: String) { problems.add(keyPath(key), reason) }

    private func take(_ key: String) -> JSONValue? {
        known.insert(key)
        guard let value = values[key] else { return nil }
        if case .null = value { return nil }
        return value
    }

    /// Whether the document sets `key`.
    package func has(_ key: String) -> Bool { values[key] != nil }

    /// Whether the document sets `key` to something other than null.
    package func hasValue(_ key: String) -> Bool {
        guard let value = values[key] else { return false }
        if case .null = value { return false }
        return true
    }

    /// A nested object (an empty one when absent).
    package func section(_ key: String) -> ConfigReader {
        let value = take(key)
        guard let value else { return ConfigReader(path: keyPath(key), values: [:], problems: problems) }
        guard case .object(let values) = value else {
            problem(key, "must be an object ({ … }), not \(value.kindDescription)")
            return ConfigReader(path: keyPath(key), values: [:], problems: problems)
        }
        return ConfigReader(path: keyPath(key), values: values, problems: problems)
    }

    package func string(_ key: String, nonEmpty: Bool = true) -> String? {
        guard let value = take(key) else { return nil }
        guard case .string(let text) = value else {
            problem(key, "must be a string, not \(value.kindDescription)")
            return nil
        }
        if nonEmpty && text.isEmpty {
            problem(key, "must not be empty")
            return nil
        }
        return text
    }

    package func requiredString(_ key: String) -> String? {
        if values[key] == nil { problem(key, "is required") }
        return string(key)
    }

    package func bool(_ key: String, default fallback: Bool) -> Bool {
        guard let value = take(key) else { return fallback }
        guard case .bool(let flag) = value else {
            problem(key, "must be true or false, not \(value.kindDescription)")
            return fallback
        }
        return flag
    }

    package func integer(_ key: String, default fallback: Int, in range: ClosedRange<Int>) -> Int {
        guard let value = take(key) else { return fallback }
        guard case .number(let number) = value, number.rounded() == number, number.isFinite else {
            problem(key, "must be a whole number, not \(value.kindDescription == "a number" ? "a fraction" : value.kindDescription)")
            return fallback
        }
        guard number >= Double(range.lowerBound), number <= Double(range.upperBound) else {
            problem(key, "\(Self.format(number)) is out of range \(range.lowerBound)…\(range.upperBound)")
            return fallback
        }
        return Int(number)
    }

    package func fraction(_ key: String, default fallback: Double, in range: ClosedRange<Double>) -> Double {
        guard let value = take(key) else { return fallback }
        guard case .number(let number) = value, number.isFinite else {
            problem(key, "must be a number, not \(value.kindDescription)")
            return fallback
        }
        guard range.contains(number) else {
            problem(key, "\(Self.format(number)) is out of range \(Self.format(range.lowerBound))…\(Self.format(range.upperBound))")
            return fallback
        }
        return number
    }

    /// A duration: a number of seconds, or a string with a unit ("250ms", "30s", "5m", "2h", "1d").
    package func duration(_ key: String, default fallback: Duration, minimum: Duration, maximum: Duration = .seconds(86400 * 365))
        -> Duration
    {
        guard let value = take(key) else { return fallback }
        let parsed: Duration?
        switch value {
        case .number(let seconds) where seconds.isFinite: parsed = .milliseconds(Int64((seconds * 1000).rounded()))
        case .string(let text): parsed = Self.parseDuration(text)
        default: parsed = nil
        }
        guard let parsed else {
            problem(key, "must be a duration: seconds as a number, or a string such as \"30s\", \"5m\", \"2h\" (got \(Self.show(value)))")
            return fallback
        }
        guard parsed >= minimum, parsed <= maximum else {
            problem(key, "\(Self.show(value)) is out of range \(Self.describe(minimum))…\(Self.describe(maximum))")
            return fallback
        }
        return parsed
    }

    /// A size: a number of bytes, or a string with a unit ("512KiB", "64MiB", "1GiB", "10MB").
    package func byteCount(_ key: String, default fallback: Int64, minimum: Int64, maximum: Int64 = 1 << 40) -> Int64 {
        guard let value = take(key) else { return fallback }
        let parsed: Int64?
        switch value {
        case .number(let number) where number.isFinite && number.rounded() == number && abs(number) < 9e15: parsed = Int64(number)
        case .string(let text): parsed = Self.parseBytes(text)
        default: parsed = nil
        }
        guard let parsed else {
            problem(key, "must be a size: bytes as a number, or a string such as \"512KiB\", \"64MiB\" (got \(Self.show(value)))")
            return fallback
        }
        guard parsed >= minimum, parsed <= maximum else {
            problem(key, "\(Self.show(value)) is out of range \(Self.describeBytes(minimum))…\(Self.describeBytes(maximum))")
            return fallback
        }
        return parsed
    }

    package func choice(_ key: String, default fallback: String, from choices: [String]) -> String {
        guard let value = take(key) else { return fallback }
        guard case .string(let text) = value, choices.contains(text) else {
            let suggestion = Self.closest(to: Self.show(value).filter { $0 != "\"" }, among: choices)
            problem(
                key,
                "must be one of \(choices.map { "\"\($0)\"" }.joined(separator: ", ")) (got \(Self.show(value)))"
                    + (suggestion.map { "; did you mean \"\($0)\"?" } ?? ""))
            return fallback
        }
        return text
    }

    package func stringArray(_ key: String) -> [String] {
        guard let value = take(key) else { return [] }
        guard case .array(let items) = value else {
            problem(key, "must be an array of strings, not \(value.kindDescription)")
            return []
        }
        var out: [String] = []
        for (index, item) in items.enumerated() {
            guard case .string(let text) = item, !text.isEmpty else {
                problems.add("\(keyPath(key))[\(index)]", "must be a non-empty string, not \(item.kindDescription)")
                continue
            }
            out.append(text)
        }
        return out
    }

    package func stringMap(_ key: String) -> [String: String] {
        guard let value = take(key) else { return [:] }
        guard case .object(let entries) = value else {
            problem(key, "must be an object of strings, not \(value.kindDescription)")
            return [:]
        }
        var out: [String: String] = [:]
        for (name, item) in entries {
            guard case .string(let text) = item else {
                problems.add("\(keyPath(key)).\(name)", "must be a string, not \(item.kindDescription)")
                continue
            }
            out[name] = text
        }
        return out
    }

    /// Reports every key of this object that was not read, with the closest known key.
    package func finish() {
        for key in values.keys.sorted() where !known.contains(key) {
            let suggestion = Self.closest(to: key, among: Array(known))
            problems.add(keyPath(key), "unknown key" + (suggestion.map { "; did you mean \"\($0)\"?" } ?? ""))
        }
    }

    // MARK: - Parsing and formatting

    package static func parseDuration(_ text: String) -> Duration? {
        let trimmed = text.trimmed()
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
        for (suffix, scale) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count).trimmed()
            // "5m" must not be read as "5" + "m" of "ms".
            guard !number.isEmpty, let value = Double(number), value.isFinite, value >= 0 else { continue }
            return .milliseconds(Int64((value * scale * 1000).rounded()))
        }
        return nil
    }

    package static func parseBytes(_ text: String) -> Int64? {
        let trimmed = text.trimmed()
        let units: [(String, Double)] = [
            ("KiB", 1024), ("MiB", 1_048_576), ("GiB", 1_073_741_824), ("KB", 1000), ("MB", 1e6), ("GB", 1e9), ("B", 1),
        ]
        for (suffix, scale) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count).trimmed()
            guard let value = Double(number), value.isFinite, value >= 0, value * scale < 9e15 else { return nil }
            return Int64((value * scale).rounded())
        }
        if let value = Int64(trimmed) { return value }
        return nil
    }

    package static func describe(_ duration: Duration) -> String {
        let ms = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        if ms % 86_400_000 == 0 && ms >= 86_400_000 { return "\(ms / 86_400_000)d" }
        if ms % 3_600_000 == 0 && ms >= 3_600_000 { return "\(ms / 3_600_000)h" }
        if ms % 60000 == 0 && ms >= 60000 { return "\(ms / 60000)m" }
        if ms % 1000 == 0 { return "\(ms / 1000)s" }
        return "\(ms)ms"
    }

    package static func describeBytes(_ bytes: Int64) -> String {
        for (unit, scale) in [("GiB", Int64(1) << 30), ("MiB", Int64(1) << 20), ("KiB", Int64(1024))]
        where bytes >= scale && bytes % scale == 0 {
            return "\(bytes / scale)\(unit)"
        }
        return "\(bytes)B"
    }

    package static func format(_ number: Double) -> String {
        number.rounded() == number && abs(number) < 1e15 ? String(Int64(number)) : String(number)
    }

    package static func show(_ value: JSONValue) -> String {
        switch value {
        case .string(let text): return "\"\(text)\""
        case .number(let number): return format(number)
        case .bool(let flag): return String(flag)
        default: return value.kindDescription
        }
    }

    /// The candidate within edit distance 2 (or a third of the word) of `word`, if any.
    package static func closest(to word: String, among candidates: [String]) -> String? {
        let lowered = Array(word.lowercased())
        var best: (String, Int)?
        for candidate in candidates.sorted() {
            let distance = editDistance(lowered, Array(candidate.lowercased()))
            if distance <= max(2, lowered.count / 3), distance < (best?.1 ?? .max) { best = (candidate, distance) }
        }
        return best?.0
    }

    package static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + [Int](repeating: 0, count: b.count)
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}
