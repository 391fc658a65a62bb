import Foundation
import Testing

@testable import TinyFire

private struct EncodableStruct: Encodable {
    let one = "one"
    let two = 2
    let three = true
    let four = [1, 2, 3]
    let five = ["a": "a"]
    let six = ["a": ["b": "b"]]
    let seven = Nested()

    struct Nested: Encodable { let a = "a" }
}

private struct Optionals: Encodable {
    let nilValue: String?
    let otherValue: Int
}

private struct CamelKeys: Encodable {
    let oneTwoThree = "x"
}

private let base = URL(string: "https://example.com/get")!

@Suite("URLEncodedFormEncoder")
struct URLEncodedFormEncoderTests {
    @Test("the documented GET example puts foo=bar in the query")
    func documentedGet() throws {
        let request = try URLEncodedFormParameterEncoder.default.encode(["foo": "bar"], into: URLRequest(url: base))
        #expect(request.url?.absoluteString == "https://example.com/get?foo=bar")
        #expect(request.httpBody == nil)
        #expect(request.headers["Content-Type"] == nil)
    }

    @Test("the documented POST example becomes the bracketed body, sorted")
    func documentedPost() throws {
        let parameters: [String: [String]] = ["foo": ["bar"], "baz": ["a", "b"], "qux": ["x", "y", "z"]]
        let request = try URLEncodedFormParameterEncoder.default.encode(
            parameters, into: URLRequest(url: base, method: .post))
        let body = String(decoding: request.httpBody ?? Data(), as: UTF8.self)
        // Alamofire's Usage.md shows "qux[]=x&qux[]=y&qux[]=z&baz[]=a&baz[]=b&foo[]=bar", written
        // before pairs were alphabetized by default and with the brackets unescaped; Alamofire
        // itself sends exactly this:
        #expect(body == "baz%5B%5D=a&baz%5B%5D=b&foo%5B%5D=bar&qux%5B%5D=x&qux%5B%5D=y&qux%5B%5D=z")
        #expect(
            body.removingPercentEncoding?.split(separator: "&").sorted()
                == "qux[]=x&qux[]=y&qux[]=z&baz[]=a&baz[]=b&foo[]=bar".split(separator: "&").sorted())
        #expect(request.headers["Content-Type"] == "application/x-www-form-urlencoded; charset=utf-8")
    }

    @Test("keeps a Content-Type the request already has")
    func keepsContentType() throws {
        var request = URLRequest(url: base, method: .post)
        request.headers.update(.contentType("type"))
        let encoded = try URLEncodedFormParameterEncoder.default.encode(["property": "property"], into: request)
        #expect(encoded.headers["Content-Type"] == "type")
        #expect(encoded.httpBody == Data("property=property".utf8))
    }

    @Test("appends to an existing query; an empty form leaves the URL alone")
    func appendsToQuery() throws {
        let url = URL(string: "https://example.com/get?a=1")!
        let encoded = try URLEncodedFormParameterEncoder(destination: .queryString).encode(
            ["b": "2"], into: URLRequest(url: url, method: .post))
        #expect(encoded.url?.absoluteString == "https://example.com/get?a=1&b=2")
        let empty = try URLEncodedFormParameterEncoder.default.encode([String: String](), into: URLRequest(url: base))
        #expect(empty.url == base)
    }

    @Test("destinations: method dependent, query string, body")
    func destinations() throws {
        for method in [HTTPMethod.get, .head, .delete] {
            let request = try URLEncodedFormParameterEncoder.default.encode(["a": "1"], into: URLRequest(url: base, method: method))
            #expect(request.url?.query == "a=1")
        }
        let put = try URLEncodedFormParameterEncoder.default.encode(["a": "1"], into: URLRequest(url: base, method: .put))
        #expect(put.httpBody == Data("a=1".utf8))
        let body = try URLEncodedFormParameterEncoder(destination: .httpBody).encode(["a": "1"], into: URLRequest(url: base))
        #expect(body.httpBody == Data("a=1".utf8))
        #expect(body.url == base)
    }

    @Test("a struct with nested values, alphabetized and in declaration order")
    func structs() throws {
        #expect(
            try URLEncodedFormEncoder().encode(EncodableStruct()) as String
                == "five%5Ba%5D=a&four%5B%5D=1&four%5B%5D=2&four%5B%5D=3&one=one&seven%5Ba%5D=a&six%5Ba%5D%5Bb%5D=b&three=1&two=2")
        #expect(
            try URLEncodedFormEncoder(alphabetizeKeyValuePairs: false).encode(EncodableStruct()) as String
                == "one=one&two=2&three=1&four%5B%5D=1&four%5B%5D=2&four%5B%5D=3&five%5Ba%5D=a&six%5Ba%5D%5Bb%5D=b&seven%5Ba%5D=a")
    }

    @Test(
        "array encodings",
        arguments: [
            (URLEncodedFormEncoder.ArrayEncoding.brackets, "foo%5B%5D=1&foo%5B%5D=2"),
            (.noBrackets, "foo=1&foo=2"),
            (.indexInBrackets, "foo%5B0%5D=1&foo%5B1%5D=2"),
            (.custom { key, index in "\(key)(\(index))" }, "foo%280%29=1&foo%281%29=2"),
        ])
    func arrays(encoding: URLEncodedFormEncoder.ArrayEncoding, expected: String) throws {
        #expect(try URLEncodedFormEncoder(arrayEncoding: encoding).encode(["foo": [1, 2]]) as String == expected)
    }

    @Test("nested dictionaries in arrays with indices")
    func nestedInArrays() throws {
        let encoder = URLEncodedFormEncoder(arrayEncoding: .indexInBrackets)
        #expect(
            try encoder.encode(["foo": [["bar": 2], ["qux": 3], ["quy": 4]]]) as String
                == "foo%5B0%5D%5Bbar%5D=2&foo%5B1%5D%5Bqux%5D=3&foo%5B2%5D%5Bquy%5D=4")
    }

    @Test("bool encodings")
    func bools() throws {
        #expect(try URLEncodedFormEncoder().encode(["bool": true]) as String == "bool=1")
        #expect(try URLEncodedFormEncoder().encode(["bool": false]) as String == "bool=0")
        #expect(try URLEncodedFormEncoder(boolEncoding: .literal).encode(["bool": true]) as String == "bool=true")
    }

    @Test("data encodings")
    func data() throws {
        let value = ["data": Data("data".utf8)]
        #expect(try URLEncodedFormEncoder().encode(value) as String == "data=ZGF0YQ%3D%3D")
        #expect(try URLEncodedFormEncoder(dataEncoding: .custom { _ in "x" }).encode(value) as String == "data=x")
        #expect(
            try URLEncodedFormEncoder(dataEncoding: .deferredToData).encode(["d": Data([1, 2])]) as String
                == "d%5B%5D=1&d%5B%5D=2")
        struct Failure: Error {}
        #expect(throws: Failure.self) { try URLEncodedFormEncoder(dataEncoding: .custom { _ in throw Failure() }).encode(value) as String }
    }

    @Test("date encodings")
    func dates() throws {
        let value = ["date": Date(timeIntervalSinceReferenceDate: 123.456)]
        #expect(try URLEncodedFormEncoder().encode(value) as String == "date=123.456")
        #expect(try URLEncodedFormEncoder(dateEncoding: .secondsSince1970).encode(value) as String == "date=978307323.456")
        #expect(try URLEncodedFormEncoder(dateEncoding: .millisecondsSince1970).encode(value) as String == "date=978307323456.0")
        #expect(try URLEncodedFormEncoder(dateEncoding: .iso8601).encode(value) as String == "date=2001-01-01T00%3A02%3A03Z")
        let fractional = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        #expect(
            try URLEncodedFormEncoder(dateEncoding: .formatted(fractional)).encode(value) as String
                == "date=2001-01-01T00%3A02%3A03.456Z")
        #expect(
            try URLEncodedFormEncoder(dateEncoding: .custom { "\($0.timeIntervalSinceReferenceDate)" }).encode(value) as String
                == "date=123.456")
    }

    @Test(
        "key encodings",
        arguments: [
            (URLEncodedFormEncoder.KeyEncoding.useDefaultKeys, "oneTwoThree"),
            (.convertToSnakeCase, "one_two_three"),
            (.convertToKebabCase, "one-two-three"),
            (.capitalized, "OneTwoThree"),
            (.uppercased, "ONETWOTHREE"),
            (.lowercased, "onetwothree"),
            (.custom { _ in "A" }, "A"),
        ])
    func keys(encoding: URLEncodedFormEncoder.KeyEncoding, expected: String) throws {
        #expect(try URLEncodedFormEncoder(keyEncoding: encoding).encode(CamelKeys()) as String == "\(expected)=x")
        #expect(try URLEncodedFormEncoder(keyEncoding: encoding).encode(["oneTwoThree": "x"]) as String == "\(expected)=x")
    }

    @Test("snake case splits runs of capitals the way JSONEncoder does")
    func snakeCaseAcronyms() {
        #expect(URLEncodedFormEncoder.KeyEncoding.convertToSnakeCase.encode("URLValue") == "url_value")
        #expect(URLEncodedFormEncoder.KeyEncoding.convertToSnakeCase.encode("userID") == "user_id")
        #expect(URLEncodedFormEncoder.KeyEncoding.convertToSnakeCase.encode("simple") == "simple")
    }

    @Test("key path encodings: brackets, dots, custom")
    func keyPaths() throws {
        let value = ["parent": ["child": ["grandchild": "x"]]]
        #expect(try URLEncodedFormEncoder().encode(value) as String == "parent%5Bchild%5D%5Bgrandchild%5D=x")
        #expect(try URLEncodedFormEncoder(keyPathEncoding: .dots).encode(value) as String == "parent.child.grandchild=x")
        #expect(
            try URLEncodedFormEncoder(keyPathEncoding: URLEncodedFormEncoder.KeyPathEncoding { "-\($0)" }).encode(value) as String
                == "parent-child-grandchild=x")
    }

    @Test("nil encodings, as documented, for optional properties and dictionary values")
    func nils() throws {
        let value = Optionals(nilValue: nil, otherValue: 2)
        #expect(try URLEncodedFormEncoder().encode(value) as String == "otherValue=2")
        #expect(try URLEncodedFormEncoder(nilEncoding: .dropKey).encode(value) as String == "otherValue=2")
        #expect(try URLEncodedFormEncoder(nilEncoding: .dropValue).encode(value) as String == "nilValue=&otherValue=2")
        #expect(try URLEncodedFormEncoder(nilEncoding: .null).encode(value) as String == "nilValue=null&otherValue=2")
        let custom = URLEncodedFormEncoder.NilEncoding { "customNilValue" }
        #expect(try URLEncodedFormEncoder(nilEncoding: custom).encode(value) as String == "nilValue=customNilValue&otherValue=2")
        let dictionary: [String: String?] = ["string": nil]
        #expect(try URLEncodedFormEncoder().encode(dictionary) as String == "")
        #expect(try URLEncodedFormEncoder(nilEncoding: .null).encode(dictionary) as String == "string=null")
    }

    @Test("space encodings")
    func spaces() throws {
        let value = ["spaces": "replace with spaces"]
        #expect(try URLEncodedFormEncoder().encode(value) as String == "spaces=replace%20with%20spaces")
        #expect(try URLEncodedFormEncoder(spaceEncoding: .plusReplaced).encode(value) as String == "spaces=replace+with+spaces")
    }

    @Test("escaping: reserved, illegal, non-Latin; ? and / stay")
    func escaping() throws {
        let encoder = URLEncodedFormEncoder()
        #expect(
            try encoder.encode(["reserved": ":#[]@!$&'()*+,;="]) as String == "reserved=%3A%23%5B%5D%40%21%24%26%27%28%29%2A%2B%2C%3B%3D")
        #expect(try encoder.encode(["illegal": " \"#%<>[]\\^`{}|"]) as String == "illegal=%20%22%23%25%3C%3E%5B%5D%5C%5E%60%7B%7D%7C")
        #expect(try encoder.encode(["?foo?": "/bar/baz"]) as String == "?foo?=/bar/baz")
        #expect(try encoder.encode(["emoji": "😃", "french": "français"]) as String == "emoji=%F0%9F%98%83&french=fran%C3%A7ais")
        #expect(try encoder.encode(["a": Decimal(string: "1.123456")!]) as String == "a=1.123456")
        #expect(try encoder.encode(["b": 1.0]) as String == "b=1.0")
        var allowed = URLEncodedFormEncoder.defaultAllowedBytes
        allowed.subtract("?/".utf8)
        #expect(try URLEncodedFormEncoder(allowedBytes: allowed).encode(["allowed": "?/"]) as String == "allowed=%3F%2F")
    }

    @Test("a root that is not keyed is an error that says so")
    func invalidRoots() {
        #expect(throws: URLEncodedFormEncoder.Error.self) { try URLEncodedFormEncoder().encode([1]) as String }
        #expect(throws: URLEncodedFormEncoder.Error.self) { try URLEncodedFormEncoder().encode("string") as String }
        do {
            _ = try URLEncodedFormParameterEncoder.default.encode([1], into: URLRequest(url: base))
            Issue.record("expected a failure")
        } catch let error as TinyFireError {
            guard case .parameterEncoderFailed(.encoderFailed) = error else {
                Issue.record("unexpected \(error)")
                return
            }
            #expect(error.description.contains("keyed root value"))
        } catch {
            Issue.record("unexpected \(error)")
        }
    }
}

@Suite("JSONParameterEncoder")
struct JSONParameterEncoderTests {
    let parameters: [String: [String]] = ["foo": ["bar"], "baz": ["a", "b"], "qux": ["x", "y", "z"]]

    @Test("the documented example, byte for byte with sorted keys")
    func documented() throws {
        let request = try JSONParameterEncoder.sortedKeys.encode(parameters, into: URLRequest(url: base, method: .post))
        #expect(request.httpBody == Data(#"{"baz":["a","b"],"foo":["bar"],"qux":["x","y","z"]}"#.utf8))
        #expect(request.headers["Content-Type"] == "application/json")
        let plain = try JSONParameterEncoder.default.encode(parameters, into: URLRequest(url: base, method: .post))
        let decoded = try JSONDecoder().decode([String: [String]].self, from: plain.httpBody ?? Data())
        #expect(decoded == parameters)
    }

    @Test("pretty printed and custom encoders")
    func pretty() throws {
        let pretty = try JSONParameterEncoder.prettyPrinted.encode(["property": "property"], into: URLRequest(url: base, method: .post))
        #expect(pretty.httpBody == Data("{\n  \"property\" : \"property\"\n}".utf8))
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        let custom = try JSONParameterEncoder(encoder: encoder).encode(CamelKeys(), into: URLRequest(url: base, method: .post))
        #expect(custom.httpBody == Data(#"{"one_two_three":"x"}"#.utf8))
        var typed = URLRequest(url: base, method: .post)
        typed.headers.update(.contentType("type"))
        #expect(try JSONParameterEncoder.json.encode(["a": 1], into: typed).headers["Content-Type"] == "type")
    }
}
