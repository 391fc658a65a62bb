/// A firmware version, compared the way Semantic Versioning 2.0.0 orders them: numeric
/// `MAJOR.MINOR.PATCH` (missing parts are 0, so `2.1` is `2.1.0`; a leading `v` is allowed), then
/// a pre-release (`-rc.1`) sorts before the release itself, identifiers compared numerically when
/// both are numbers and as ASCII otherwise; build metadata (`+build.7`) is ignored.
///
/// Sans-I/O and total: `init?` refuses what is not a version rather than guessing.
package struct SemanticVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// MAJOR, MINOR, PATCH.
    package let core: [UInt64]
    /// Pre-release identifiers (`rc`, `1` for `-rc.1`); empty for a release.
    package let preRelease: [String]
    /// The text it was read from.
    package let description: String

    /// Reads `text`; nil when it is not a version (empty parts, letters in the core, more than
    /// three core numbers, a number beyond 64 bits, an empty pre-release identifier).
    /// - Parameter text: e.g. `1.4.2`, `v2.0.0-rc.1+build.5`.
    package init?(_ text: String) {
        var rest = Substring(text)
        if rest.first == "v" || rest.first == "V" { rest = rest.dropFirst() }
        if let plus = rest.firstIndex(of: "+") {
            let metadata = rest[rest.index(after: plus)...]
            guard !metadata.isEmpty, metadata.split(separator: ".", omittingEmptySubsequences: false).allSatisfy(Self.isIdentifier)
            else { return nil }
            rest = rest[..<plus]
        }
        var preRelease: [String] = []
        if let dash = rest.firstIndex(of: "-") {
            let parts = rest[rest.index(after: dash)...].split(separator: ".", omittingEmptySubsequences: false)
            guard parts.allSatisfy(Self.isIdentifier) else { return nil }
            preRelease = parts.map(String.init)
            rest = rest[..<dash]
        }
        let numbers = rest.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...3).contains(numbers.count) else { return nil }
        var core: [UInt64] = []
        for number in numbers {
            guard !number.isEmpty, number.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = UInt64(number) else { return nil }
            core.append(value)
        }
        while core.count < 3 { core.append(0) }
        self.core = core
        self.preRelease = preRelease
        description = text
    }

    private static func isIdentifier(_ part: Substring) -> Bool {
        !part.isEmpty
            && part.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D }
    }

    /// Equal when they sort equal (build metadata and a leading `v` do not count).
    package static func == (lhs: SemanticVersion, rhs: SemanticVersion) -> Bool {
        lhs.core == rhs.core && lhs.preRelease == rhs.preRelease
    }

    /// Hashes what `==` compares.
    package func hash(into hasher: inout Hasher) {
        hasher.combine(core)
        hasher.combine(preRelease)
    }

    /// Semantic Versioning's precedence.
    package static func < (lhs: SemanticVersion, rhs: SemanticVersion) -> Bool {
        if lhs.core != rhs.core { return lhs.core.lexicographicallyPrecedes(rhs.core) }
        // A release sorts after its pre-releases.
        switch (lhs.preRelease.isEmpty, rhs.preRelease.isEmpty) {
        case (true, true), (true, false): return false
        case (false, true): return true
        case (false, false): break
        }
        for (left, right) in zip(lhs.preRelease, rhs.preRelease) where left != right {
            switch (UInt64(left), UInt64(right)) {
            case (let l?, let r?): return l < r
            case (.some, nil): return true  // numeric identifiers sort before alphanumeric ones
            case (nil, .some): return false
            case (nil, nil): return left < right
            }
        }
        return lhs.preRelease.count < rhs.preRelease.count
    }
}
