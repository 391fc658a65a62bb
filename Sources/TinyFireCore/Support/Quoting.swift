/// A short, printable rendering of untrusted text for error messages (at most 80 characters,
/// control characters escaped).
package func quoted(_ text: String) -> String {
    var out = "\""
    var count = 0
    for scalar in text.unicodeScalars {
        if count == 80 {
            out += "…"
            break
        }
        switch scalar {
        case "\r": out += "\\r"
        case "\n": out += "\\n"
        case "\t": out += "\\t"
        case "\"": out += "\\\""
        default:
            if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
                out += "\\x" + String(scalar.value, radix: 16)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        count += 1
    }
    return out + "\""
}

extension String {
    /// The text with control characters other than newline and tab (C0, DEL and the C1 range,
    /// where terminals find escape sequences) written as `\xNN`: safe to print to a terminal or
    /// a log whatever a peer sent.
    /// - Returns: the escaped text; the same text when it has none.
    public func escapingControlCharacters() -> String {
        func isControl(_ scalar: Unicode.Scalar) -> Bool {
            (scalar.value < 0x20 && scalar != "\n" && scalar != "\t") || (0x7F...0x9F).contains(scalar.value)
        }
        guard unicodeScalars.contains(where: isControl) else { return self }
        var out = String.UnicodeScalarView()
        for scalar in unicodeScalars {
            if isControl(scalar) {
                out.append(contentsOf: "\\x\(String(scalar.value, radix: 16))".unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }
}

extension StringProtocol {
    /// The first occurrence of the ASCII text `needle`, compared byte for byte (what
    /// `firstRange(of:)` gives, without the string-processing module Embedded Swift lacks).
    /// ASCII bytes never sit inside a multi-byte character, so the range is on scalar
    /// boundaries.
    package func firstRange(ofASCII needle: String) -> Range<Index>? {
        let pattern = Array(needle.utf8)
        guard let first = pattern.first else { return startIndex..<startIndex }
        var index = utf8.startIndex
        while index != utf8.endIndex {
            if utf8[index] == first {
                var end = index
                var matched = 0
                while matched < pattern.count, end != utf8.endIndex, utf8[end] == pattern[matched] {
                    end = utf8.index(after: end)
                    matched += 1
                }
                if matched == pattern.count { return index..<end }
            }
            index = utf8.index(after: index)
        }
        return nil
    }
}

/// `text` with its `%XX` escapes decoded, or nil when an escape is not two hexadecimal digits
/// or the bytes are not UTF-8.
package func percentDecoded(_ text: Substring) -> String? {
    var bytes: [UInt8] = []
    bytes.reserveCapacity(text.utf8.count)
    var iterator = text.utf8.makeIterator()
    while let byte = iterator.next() {
        guard byte == UInt8(ascii: "%") else {
            bytes.append(byte)
            continue
        }
        guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
        bytes.append(high << 4 | low)
    }
    return String(validating: bytes, as: UTF8.self)
}
