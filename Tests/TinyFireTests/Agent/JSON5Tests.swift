import Foundation
import Testing

@testable import FireAgent

/// The config's JSON5 reader (FireAgent, Foundation-free for the Embedded agent) against the
/// reader it replaced: Foundation's `JSONDecoder` with `allowsJSON5`. Every document below is
/// read by both; they must take the same ones to the same values and refuse the same ones.
@Suite("JSON5: the agent's reader reads what Foundation's JSON5 decoder read")
struct JSON5Tests {
    /// What Foundation's decoder makes of a document, in the agent's terms.
    private enum Reference: Decodable {
        case value(JSONValue)

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if container.decodeNil() {
                self = .value(.null)
            } else if let flag = try? container.decode(Bool.self) {
                self = .value(.bool(flag))
            } else if let number = try? container.decode(Double.self) {
                self = .value(.number(number))
            } else if let text = try? container.decode(String.self) {
                self = .value(.string(text))
            } else if let items = try? container.decode([Reference].self) {
                self = .value(.array(items.map { $0.json }))
            } else {
                self = .value(.object(try container.decode([String: Reference].self).mapValues { $0.json }))
            }
        }

        var json: JSONValue {
            switch self {
            case .value(let value): value
            }
        }
    }

    private func reference(_ text: String) -> JSONValue? {
        let decoder = JSONDecoder()
        decoder.allowsJSON5 = true
        return try? decoder.decode(Reference.self, from: Data(text.utf8)).json
    }

    private func ours(_ text: String) -> Result<JSONValue, ConfigError> {
        do throws(ConfigError) {
            return .success(try JSONValue.parse(Array(text.utf8), file: "t.json5"))
        } catch {
            return .failure(error)
        }
    }

    /// Equal, counting NaN equal to NaN.
    private func same(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.number(let x), .number(let y)): return x == y || (x.isNaN && y.isNaN)
        case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy { same($0, $1) }
        case (.object(let x), .object(let y)):
            return x.count == y.count && x.allSatisfy { key, value in y[key].map { same(value, $0) } ?? false }
        default: return a == b
        }
    }

    static let taken = [
        "{a: 5.}", "{a: .5}", "{a: +5}", "{a: -.5}", "{a: 0x1F}", "{a: 0X1f}", "{a: -0x10}", "{a: +0x10}", "{a: Infinity}",
        "{a: +Infinity}", "{a: -Infinity}", "{a: NaN}", "{a: 1e3}", "{a: 1E+3}", "{a: 0.5e-2}", "{a: 0}", "{a: -0}", "{a: 0.0}",
        "{a: 9007199254740993}", #"{a: 'it\'s'}"#, #"{a: "\x41\u00e9"}"#, #"{a: "\ud83d\ude00"}"#, "{a: [1,2,],}",
        "{a: \"l\\\nc\"}", "{a: \"l\\\r\nc\"}", "{$a_1: 1}", #"{a: "\/"}"#, #"{a: "\b\f\n\r\t"}"#, #"{a: "\""}"#, #"{a: 'x"y'}"#,
        "{a: \"é\"}", "[]", "\"top\"", "5", "{a:1}//c", "{a: /* in */ 1}", "{a: true, b: false, c: null}",
        "{'quoted key': {\"inner\": [1, 'two', {three: 3}]}}", "  {a: 1}  \n", "{a: \"tab\\tq\"}",
    ]

    static let refused = [
        "{a: 01}", "{a: 00}", "{a: inf}", "{a: 1_0}", "{a: 0x}", "{a: 1.2.3}", #"{a: "x\y"}"#, #"{a: "\ud83d"}"#,
        #"{a: "\ude00"}"#, #"{a: "\ud83dx"}"#, "{a: 0x1p3}", "{a: 1e}", "{a: .}", "{a: tru}", #"{a: "\0"}"#, #"{"a": "x\u0000y"}"#,
        #"{a: "\v"}"#, #"{a: "\a"}"#, #"{a: "\x00"}"#, #"{a: "\x7"}"#, #"{a: "\u00"}"#, "{a: \"x\ty\"}", #"{a: "\1"}"#, "{a: 1,,}",
        "{,}", "{a:1}/*", "{a: 5e400}", "{a: 'open}", "{a: [1 2]}", "{a 1}", "", "{a: 1} x",
    ]

    @Test("documents Foundation's decoder took: the same values", arguments: taken)
    func takesWhatItTook(text: String) throws {
        let expected = try #require(reference(text), "Foundation's decoder refuses \(text.debugDescription)")
        switch ours(text) {
        case .success(let value): #expect(same(value, expected), "\(text.debugDescription): \(value) ≠ \(expected)")
        case .failure(let error): Issue.record("\(text.debugDescription) refused: \(error)")
        }
    }

    @Test("documents Foundation's decoder refused: refused, saying where", arguments: refused)
    func refusesWhatItRefused(text: String) throws {
        #expect(reference(text) == nil, "Foundation's decoder takes \(text.debugDescription)")
        guard case .failure(let error) = ours(text) else {
            Issue.record("\(text.debugDescription) taken")
            return
        }
        #expect(error.problems.first?.reason.hasPrefix("line ") == true, "\(error)")
    }

    @Test(
        "where the two differ on purpose: a key given twice is refused (the decoder kept the first), 0e1 is zero, an escape in an unquoted key is refused (the decoder kept the backslash)"
    )
    func differences() {
        #expect(reference(#"{"a":1, a: 2}"#) != nil)
        guard case .failure(let error) = ours(#"{"a":1, a: 2}"#) else {
            Issue.record("a repeated key was taken")
            return
        }
        #expect(error.problems.first?.reason == #"line 1, column 9: the key "a" appears twice in this object"#)
        #expect(reference("{a: 0e1}") == nil)
        guard case .success(let value) = ours("{a: 0e1}") else {
            Issue.record("0e1 refused")
            return
        }
        #expect(value == .object(["a": .number(0)]))
        #expect(reference(#"{\u0061: 1}"#) == .object(["\\u0061": .number(1)]))
        guard case .failure = ours(#"{\u0061: 1}"#) else {
            Issue.record("an escape in an unquoted key was taken")
            return
        }
    }

    @Test("messages name the place and the reason")
    func messages() {
        let cases: [(String, String)] = [
            ("{a: 01}", "line 1, column 5: '01': a number with a leading zero"),
            ("{\n  a: \"x\\qy\"\n}", "line 2, column 8: unknown escape '\\q'"),
            ("{a: \"\\ud83d\"}", "line 1, column 6: a lone high surrogate (\\u without the one after it)"),
            ("{a: \"x\ty\"}", "line 1, column 7: a control character (byte 0x09) inside a string: write it as an escape"),
            ("{a: 5e400}", "line 1, column 5: the number 5e400 is too large"),
            ("{a: \"\\x00\"}", "line 1, column 6: a NUL character in a string"),
        ]
        for (text, message) in cases {
            guard case .failure(let error) = ours(text) else {
                Issue.record("\(text.debugDescription) taken")
                continue
            }
            #expect(error.problems.first?.reason == message, "\(text.debugDescription)")
        }
    }
}
