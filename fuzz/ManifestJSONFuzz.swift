// libFuzzer entry point: the strict RFC 8259 reader firmware manifests go through. It must never
// crash or recurse past its depth limit, and what it accepts must read the same again when
// written back out (no two readings of one document). Built by fuzz/run.sh from
// Sources/TinyFire/Support/StrictJSON.swift.

/// One input: a document.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzManifestJSON(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let value = try? StrictJSON.parse(bytes) else { return 0 }
    let again = try? StrictJSON.parse(Array(write(value).utf8))
    precondition(again == value, "a document read differently once written back")
    return 0
}

/// `value` as JSON text, every string escaped the plain way.
func write(_ value: StrictJSON) -> String {
    switch value {
    case .string(let text): return quote(text)
    case .integer(let number): return String(number)
    case .unsigned(let number): return String(number)
    case .number(let number):
        return number.description.contains("e") || number.description.contains(".") ? number.description : number.description + ".0"
    case .bool(let flag): return flag ? "true" : "false"
    case .null: return "null"
    case .array(let items): return "[" + items.map(write).joined(separator: ",") + "]"
    case .object(let fields): return "{" + fields.map { quote($0.key) + ":" + write($0.value) }.joined(separator: ",") + "}"
    }
}

func quote(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case _ where scalar.value < 0x20:
            out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out + "\""
}
