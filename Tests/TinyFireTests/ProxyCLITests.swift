import Foundation
import Testing

@testable import TinyFire

/// `fire-agent request` through proxies: curl's options, curl's environment rules and curl's
/// exit codes, checked against squid's and the origin's logs.
@Suite("fire-agent request through proxies", .serialized)
struct ProxyCLITests {
    /// This process's environment without its proxy variables, plus `extra`.
    func environment(_ extra: [String: String] = [:]) -> [String: String] {
        environmentWithoutProxies(extra)
    }

    func token(_ name: String) -> String { "/hello.txt?cli-\(name)-\(UInt32.random(in: 0...UInt32.max))" }

    @Test("-x with credentials in the URL, or -U: absolute form and CONNECT through squid; -v names the proxy, never the password")
    func proxyOption() throws {
        let fixture = try proxies()
        let proxy = "http://\(ProxyFixture.encodedCredentials)@127.0.0.1:\(fixture.authPort)"
        let plain = token("x-plain")
        var result = try fireAgent(["request", "-v", "-x", proxy, fixture.originHTTP + plain], environment: environment())
        #expect(result.status == 0 && String(decoding: result.stdout, as: UTF8.self) == "hello through the proxy\n", "\(result.stderr)")
        #expect(result.stderr.contains("* via proxy http://127.0.0.1:\(fixture.authPort), absolute form"))
        #expect(!result.stderr.contains("s3cret") && !result.stderr.contains("p%40ss"))
        #expect(fixture.squidLines(containing: plain).first?.contains(" fleet ") == true)
        let secure = token("U-tls")
        result = try fireAgent(
            [
                "request", "-v", "-x", "127.0.0.1:\(fixture.authPort)", "-U", "\(ProxyFixture.user):\(ProxyFixture.password)", "--cacert",
                fixture.originCAFile, fixture.originHTTPS + secure,
            ], environment: environment())
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("CONNECT tunnel") && !result.stderr.contains("s3cret"))
        let line = try #require(fixture.originLines(containing: secure).first)
        #expect(line.split(separator: "|", omittingEmptySubsequences: false)[1] == "", "\(line)")
    }

    @Test(
        "curl's exit codes: 5 for a proxy that does not resolve or a malformed -x, 7 unreachable, 56 for a refused CONNECT or 407, 60 for an untrusted https proxy"
    )
    func exitCodes() throws {
        let fixture = try proxies()
        let cases: [([String], Int32, String)] = [
            (["-x", "http://proxy.nonexistent.invalid:3128", fixture.originHTTP + "/hello.txt"], 5, "cannot resolve the proxy"),
            (["-x", "socks5://fleet:hunter2@127.0.0.1:1080", fixture.originHTTP + "/hello.txt"], 5, "SOCKS proxies are not supported"),
            (["-x", "http://fleet:hunter2@127.0.0.1:99999", fixture.originHTTP + "/hello.txt"], 5, "port"),
            (["-x", "http://127.0.0.1:\(freePort())", fixture.originHTTPS + "/hello.txt"], 7, "cannot connect to the proxy"),
            (["-x", "http://127.0.0.1:\(fixture.authPort)", fixture.originHTTPS + "/hello.txt"], 56, "requires authentication: 407"),
            (
                ["-x", "http://fleet:hunter2@127.0.0.1:\(fixture.authPort)", fixture.originHTTPS + "/hello.txt"], 56,
                "requires authentication"
            ),
            (["-x", "https://127.0.0.1:\(fixture.tlsPort)", fixture.originHTTPS + "/hello.txt"], 60, "certificate of the proxy"),
            (
                ["-x", "http://127.0.0.1:\(fixture.bumpPort)", fixture.originHTTPS + "/hello.txt"], 60,
                "certificate of localhost not trusted"
            ),
        ]
        for (arguments, status, message) in cases {
            let result = try fireAgent(["request", "--cacert", fixture.originCAFile] + arguments, environment: environment())
            #expect(result.status == status && result.stderr.contains(message), "\(arguments): \(result.status) \(result.stderr)")
            #expect(!result.stderr.contains("hunter2"), "\(arguments): \(result.stderr)")
        }
        // With its CA the https proxy is trusted; the origin is still checked with --cacert.
        let trusted = try fireAgent(
            [
                "request", "--cacert", fixture.originCAFile, "--proxy-cacert", fixture.proxyCAFile, "-x",
                "https://127.0.0.1:\(fixture.tlsPort)",
                fixture.originHTTPS + token("proxy-cacert"),
            ], environment: environment())
        #expect(trusted.status == 0, "\(trusted.stderr)")
    }

    @Test(
        "the environment as curl reads it: http_proxy and https_proxy used, HTTP_PROXY ignored, no_proxy and --noproxy bypass, -x '' disables"
    )
    func environmentVariables() throws {
        let fixture = try proxies()
        let open = "http://127.0.0.1:\(fixture.openPort)"
        let dead = "http://127.0.0.1:\(freePort())"
        let viaHTTPProxy = token("env-http")
        var result = try fireAgent(["request", fixture.originHTTP + viaHTTPProxy], environment: environment(["http_proxy": open]))
        #expect(result.status == 0 && fixture.squidLines(containing: viaHTTPProxy).count == 1, "\(result.stderr)")
        // A CGI program can be handed HTTP_PROXY by a client's "Proxy:" header: ignored.
        result = try fireAgent(["request", fixture.originHTTP + token("env-cgi")], environment: environment(["HTTP_PROXY": dead]))
        #expect(result.status == 0, "HTTP_PROXY was used: \(result.stderr)")
        // https_proxy, and its uppercase form, for https URLs.
        for name in ["https_proxy", "HTTPS_PROXY", "all_proxy"] {
            result = try fireAgent(
                ["request", "--cacert", fixture.originCAFile, fixture.originHTTPS + token("env-\(name)")],
                environment: environment([name: dead]))
            #expect(result.status == 7 && result.stderr.contains("cannot connect to the proxy"), "\(name): \(result.stderr)")
        }
        // Bypassed: no_proxy, --noproxy '*', -x ''.
        let bypasses: [([String], [String: String])] = [
            ([], ["http_proxy": dead, "no_proxy": "localhost,127.0.0.0/8"]),
            ([], ["http_proxy": dead, "NO_PROXY": "127.0.0.1"]),
            (["--noproxy", "*"], ["http_proxy": dead]),
            (["--noproxy", "127.0.0.1"], ["http_proxy": dead, "no_proxy": "other.example"]),
            (["-x", ""], ["http_proxy": dead]),
        ]
        for (options, variables) in bypasses {
            let name = token("bypass")
            result = try fireAgent(["request"] + options + [fixture.originHTTP + name], environment: environment(variables))
            #expect(result.status == 0 && fixture.originLines(containing: name).count == 1, "\(options) \(variables): \(result.stderr)")
        }
        // -x wins over the environment, and no_proxy still applies to it (as in curl).
        result = try fireAgent(
            ["request", "-x", dead, fixture.originHTTP + token("x-over-env")], environment: environment(["no_proxy": "127.0.0.1"]))
        #expect(result.status == 0, "\(result.stderr)")
        // A malformed variable is named.
        result = try fireAgent(["request", fixture.originHTTP + "/hello.txt"], environment: environment(["http_proxy": "http://[::1"]))
        #expect(result.status == 5 && result.stderr.contains("http_proxy"), "\(result.stderr)")
    }

    @Test("-p tunnels an http:// URL with CONNECT")
    func proxyTunnelFlag() throws {
        let fixture = try proxies()
        let name = token("proxytunnel")
        let result = try fireAgent(
            ["request", "-v", "-p", "-x", "http://127.0.0.1:\(fixture.openPort)", fixture.originHTTP + name], environment: environment())
        #expect(result.status == 0 && result.stderr.contains("CONNECT tunnel"), "\(result.stderr)")
        #expect(fixture.originLines(containing: name).count == 1)
    }
}
