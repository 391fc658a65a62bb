import Foundation
import Testing

@testable import TinyFire

@Suite("the redirect policy, from response heads: which statuses follow, method rewrites, credentials, limits")
struct RedirectPolicyTests {
    let policy = RedirectPolicy(maxRedirects: 5, allowsInsecureRedirects: false)

    func spec(_ url: String, _ method: HTTPMethod = .get, headers: HTTPHeaders = [:], body: String? = nil) -> RequestSpec {
        RequestSpec(url: AbsoluteURL(url)!, method: method, headers: headers, body: body.map { ByteArrayBody(Array($0.utf8)) })
    }

    func followed(_ decision: RedirectPolicy.Decision) -> RequestSpec? {
        if case .follow(let next) = decision { return next }
        return nil
    }

    func failure(_ decision: RedirectPolicy.Decision) -> String? {
        if case .fail(let reason) = decision { return "\(reason)" }
        return nil
    }

    @Test("301, 302, 303, 307 and 308 with a Location are followed; other statuses, or no Location, are delivered")
    func whichStatuses() {
        let request = spec("http://a.test/x")
        for status in [301, 302, 303, 307, 308] {
            #expect(
                followed(policy.decide(status: status, location: "/y", request: request, redirectsSoFar: 0))?.url.absoluteString
                    == "http://a.test/y")
        }
        for status in [200, 204, 300, 304, 305, 306, 400, 404, 500] {
            if case .deliver = policy.decide(status: status, location: "/y", request: request, redirectsSoFar: 0) {
            } else {
                Issue.record("status \(status) was not delivered")
            }
        }
        if case .deliver = policy.decide(status: 302, location: nil, request: request, redirectsSoFar: 0) {
        } else {
            Issue.record("a 302 without Location was not delivered")
        }
        let never = RedirectPolicy(maxRedirects: 0, allowsInsecureRedirects: false)
        if case .deliver = never.decide(status: 302, location: "/y", request: request, redirectsSoFar: 0) {
        } else {
            Issue.record("maxRedirects 0 followed a redirect")
        }
    }

    @Test("303 makes a bodiless GET of anything but HEAD; 301/302 turn POST into GET; 307/308 keep method and body")
    func methodRewrites() throws {
        let post = spec(
            "http://a.test/form", .post, headers: ["Content-Type": "text/plain", "Content-Encoding": "gzip", "X-Keep": "1"], body: "hello")
        for status in [301, 302, 303] {
            let next = try #require(followed(policy.decide(status: status, location: "/done", request: post, redirectsSoFar: 0)))
            #expect(next.method == .get && next.body == nil && next.bodySource == nil, "status \(status)")
            #expect(next.headers.value(for: "Content-Type") == nil && next.headers.value(for: "Content-Encoding") == nil)
            #expect(next.headers.value(for: "X-Keep") == "1")
        }
        for status in [307, 308] {
            let next = try #require(followed(policy.decide(status: status, location: "/again", request: post, redirectsSoFar: 0)))
            #expect(
                next.method == .post && next.body.map { Data(bodyBytes: $0) } == Data("hello".utf8)
                    && next.headers.value(for: "Content-Type") == "text/plain")
        }
        let put = spec("http://a.test/r", .put, body: "x")
        #expect(followed(policy.decide(status: 302, location: "/s", request: put, redirectsSoFar: 0))?.method == .put)
        #expect(followed(policy.decide(status: 303, location: "/s", request: put, redirectsSoFar: 0))?.method == .get)
        let head = spec("http://a.test/r", .head)
        #expect(followed(policy.decide(status: 303, location: "/s", request: head, redirectsSoFar: 0))?.method == .head)
    }

    @Test("Location resolves against the request's URL: relative path, absolute path, scheme-relative, absolute")
    func locations() {
        let request = spec("http://a.test/dir/page?q=1")
        let cases = [
            ("next", "http://a.test/dir/next"), ("/root", "http://a.test/root"), ("//b.test/p", "http://b.test/p"),
            ("https://c.test:8443/z?x=2", "https://c.test:8443/z?x=2"), ("?only=query", "http://a.test/dir/page?only=query"),
        ]
        for (location, expected) in cases {
            #expect(
                followed(policy.decide(status: 302, location: location, request: request, redirectsSoFar: 0))?.url.absoluteString
                    == expected)
        }
    }

    @Test("a Location that is not an http(s) URL with a host, too many redirects, and https to http are failures")
    func refusals() {
        let request = spec("https://a.test/x")
        for location in ["ftp://a.test/file", "file:///etc/passwd", "http://", "mailto:x@a.test"] {
            #expect(
                failure(policy.decide(status: 302, location: location, request: request, redirectsSoFar: 0))?.contains("invalidRedirect")
                    == true,
                "\(location)")
        }
        #expect(
            failure(policy.decide(status: 302, location: "/y", request: request, redirectsSoFar: 5))?.contains("tooManyRedirects(limit: 5)")
                == true)
        #expect(followed(policy.decide(status: 302, location: "/y", request: request, redirectsSoFar: 4)) != nil)
        #expect(
            failure(policy.decide(status: 301, location: "http://a.test/x", request: request, redirectsSoFar: 0))?.contains(
                "insecureRedirect") == true)
        let lax = RedirectPolicy(maxRedirects: 5, allowsInsecureRedirects: true)
        #expect(followed(lax.decide(status: 301, location: "http://a.test/x", request: request, redirectsSoFar: 0))?.url.scheme == "http")
        // http to https is always fine.
        #expect(
            followed(policy.decide(status: 301, location: "https://a.test/x", request: spec("http://a.test/x"), redirectsSoFar: 0)) != nil)
    }

    @Test("Authorization, Cookie and Proxy-Authorization follow within the origin only, and never come back after leaving it")
    func credentials() throws {
        let request = spec(
            "https://api.test/a", headers: ["Authorization": "Bearer t", "Cookie": "s=1", "Proxy-Authorization": "p", "X-Other": "o"])
        let same = try #require(followed(policy.decide(status: 302, location: "/b", request: request, redirectsSoFar: 0)))
        #expect(same.headers.value(for: "Authorization") == "Bearer t" && same.headers.value(for: "Cookie") == "s=1")
        // Another port is another origin; so is another host or scheme.
        for location in ["https://api.test:8443/b", "https://cdn.test/b"] {
            let other = try #require(followed(policy.decide(status: 302, location: location, request: request, redirectsSoFar: 0)))
            for name in RequestSpec.credentialHeaders { #expect(other.headers.value(for: name) == nil, "\(name) to \(location)") }
            #expect(other.headers.value(for: "X-Other") == "o")
            #expect(other.credentialOrigin == "https://api.test:443")
        }
        // The default port spelled out is the same origin.
        #expect(
            followed(policy.decide(status: 302, location: "https://API.test:443/c", request: request, redirectsSoFar: 0))?.headers.value(
                for: "Cookie") == "s=1")
    }

    @Test("a redirect handler's rewrite replaces URL, method, headers and body, and keeps the credential origin")
    func handlerRewrite() throws {
        let target = spec("https://a.test/next", .post, headers: ["A": "1"], body: "b")
        var rewritten = URLRequest(url: URL(string: "https://elsewhere.test/z")!, method: .put, headers: ["B": "2"])
        rewritten.httpBody = Data("new".utf8)
        let applied = RedirectPolicy.apply(try RedirectRewrite(rewritten), to: target)
        #expect(applied.url.absoluteString == "https://elsewhere.test/z" && applied.method == .put)
        #expect(
            applied.headers.value(for: "A") == nil && applied.headers.value(for: "B") == "2"
                && applied.body.map { Data(bodyBytes: $0) } == Data("new".utf8))
        // A handler's URL that is not absolute fails the request, naming it.
        #expect(throws: TinyFireError.self) { try RedirectRewrite(URLRequest(url: URL(string: "relative/path")!)) }
        #expect(applied.credentialOrigin == target.credentialOrigin)
    }
}
