import Foundation
import Testing

@testable import TinyFireCore

@Suite("the core's URL parser and reference resolution: RFC 3986's examples, and the same answers as Foundation")
struct AbsoluteURLTests {
    let base = "http://a/b/c/d;p?q"

    @Test("RFC 3986 §5.4.1 normal and §5.4.2 abnormal examples")
    func rfcExamples() throws {
        let examples: [(String, String)] = [
            ("g:h", "g:h"), ("g", "http://a/b/c/g"), ("./g", "http://a/b/c/g"), ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"), ("//g", "http://g"), ("?y", "http://a/b/c/d;p?y"), ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q#s"), ("g#s", "http://a/b/c/g#s"), ("g?y#s", "http://a/b/c/g?y#s"),
            (";x", "http://a/b/c/;x"), ("g;x", "http://a/b/c/g;x"), ("g;x?y#s", "http://a/b/c/g;x?y#s"),
            ("", "http://a/b/c/d;p?q"), (".", "http://a/b/c/"), ("./", "http://a/b/c/"), ("..", "http://a/b/"),
            ("../", "http://a/b/"), ("../g", "http://a/b/g"), ("../..", "http://a/"), ("../../", "http://a/"),
            ("../../g", "http://a/g"),
            // Abnormal.
            ("../../../g", "http://a/g"), ("../../../../g", "http://a/g"), ("/./g", "http://a/g"), ("/../g", "http://a/g"),
            ("g.", "http://a/b/c/g."), (".g", "http://a/b/c/.g"), ("g..", "http://a/b/c/g.."), ("..g", "http://a/b/c/..g"),
            ("./../g", "http://a/b/g"), ("./g/.", "http://a/b/c/g/"), ("g/./h", "http://a/b/c/g/h"), ("g/../h", "http://a/b/c/h"),
            ("g;x=1/./y", "http://a/b/c/g;x=1/y"), ("g;x=1/../y", "http://a/b/c/y"), ("g?y/./x", "http://a/b/c/g?y/./x"),
            ("g?y/../x", "http://a/b/c/g?y/../x"), ("g#s/./x", "http://a/b/c/g#s/./x"), ("g#s/../x", "http://a/b/c/g#s/../x"),
            ("http:g", "http:g"),
        ]
        let url = try #require(AbsoluteURL(base))
        for (reference, expected) in examples {
            #expect(url.resolving(reference)?.absoluteString == expected, "\(reference)")
        }
    }

    @Test("parts: scheme, userinfo, host (IPv6 without brackets), port, path, query, fragment; malformed authorities refused")
    func parts() throws {
        let url = try #require(AbsoluteURL("HTTPS://user:pw@[::1]:8443/a%20b/c?x=1&y#top"))
        #expect(url.scheme == "HTTPS" && url.userinfo == "user:pw" && url.host == "::1" && url.port == 8443)
        #expect(url.path == "/a%20b/c" && url.query == "x=1&y" && url.fragment == "top")
        #expect(url.absoluteString == "HTTPS://user:pw@[::1]:8443/a%20b/c?x=1&y#top")
        let bare = try #require(AbsoluteURL("http://example.com"))
        #expect(bare.host == "example.com" && bare.port == nil && bare.path == "" && bare.query == nil)
        #expect(bare.resolving("x")?.absoluteString == "http://example.com/x")
        #expect(AbsoluteURL("http://h:/p")?.port == nil)
        #expect(AbsoluteURL("http://h:99999/")?.port == 99999)
        for bad in ["/relative", "no scheme", "http://h:99999999999/", "http://h:8x/", "http://[::1/", "http://[::1]x/", "1http://h/"] {
            #expect(AbsoluteURL(bad) == nil, "\(bad)")
        }
        // Bytes no URL may hold are percent-encoded; the rest is kept as written.
        #expect(AbsoluteURL("http://h/a b\"<ü>")?.path == "/a%20b%22%3C%C3%BC%3E")
        #expect(AbsoluteURL("http://h/a%2fb?q=%41")?.absoluteString == "http://h/a%2fb?q=%41")
    }

    @Test(
        "resolution and parts agree with Foundation's URL for Location values servers send",
        arguments: [
            "http://example.com/dir/page?x=1", "https://example.com:8443/a/b/", "http://127.0.0.1:8080", "http://[::1]:81/p/q",
        ])
    func sameAsFoundation(base: String) throws {
        let references = [
            "/get", "get", "../up", "./here", "//other.test/path", "https://secure.test/", "http://h:8080/x?y=1",
            "?only=query", "#frag", "a/b/../c", "/a/./b/../../c", "../../../../too/far", "page;params?q", "%7Euser/x",
            "/path with space", "/ümlaut", "HTTP://UPPER.TEST/Case", "http://user@h/x", "//h:99/", "x?a=1&b=2#f",
            ".", "..", "/", "//[::1]:8080/v6",
        ]
        let ours = try #require(AbsoluteURL(base))
        let theirs = try #require(URL(string: base))
        // The one difference: an empty reference is the base itself to RFC 3986 (§5.4.1) and
        // nothing to Foundation; a redirect policy refuses an empty Location on its own.
        #expect(ours.resolving("")?.absoluteString == base && URL(string: "", relativeTo: theirs) == nil)
        for reference in references {
            let expected = URL(string: reference, relativeTo: theirs)?.absoluteURL
            let resolved = ours.resolving(reference)
            #expect(resolved?.absoluteString == expected?.absoluteString, "\(base) + \(reference)")
            guard let resolved, let expected else { continue }
            #expect(resolved.host == expected.host(percentEncoded: true), "host of \(base) + \(reference)")
            #expect(resolved.port == expected.port, "port of \(base) + \(reference)")
            #expect(resolved.path == expected.path(percentEncoded: true), "path of \(base) + \(reference)")
            #expect(resolved.query == expected.query(percentEncoded: true), "query of \(base) + \(reference)")
        }
    }
}
