import Foundation
import Synchronization
import Testing
import TinyFireCore

@testable import FireAgent

/// Proxy passwords stay secret wherever fire-agent shows a proxy URL or its command line, and
/// the proxy settings it cannot use are said rather than dropped.
@Suite("fire-agent: proxy credentials are never shown, unusable no_proxy entries are said", .serialized)
struct ProxyCredentialTests {
    /// A valid config document with `network` as its network section.
    func document(network: String) -> String {
        "{ device: { id: 'board-1' }, server: { url: 'https://fleet.example:8086' }, telemetry: { influx: { database: 'fleet' } }, "
            + "network: { \(network) } }"
    }

    @Test("a password holding /, ? or # is masked in usage errors, config check and the mask itself")
    func passwordWithURLDelimiters() throws {
        for (url, secret) in [
            ("http://fleet:pa/ss@proxy:3128", "pa/ss"), ("http://fleet:pa?ss@proxy:3128", "pa?ss"),
            ("http://fleet:pa#ss@proxy:3128", "pa#ss"), ("fleet:p/a?s#s@proxy:3128", "p/a?s#s"),
            ("http://fleet:pa/ss@proxy:3128/", "pa/ss"),
        ] {
            let masked = Proxy.masked(url)
            #expect(!masked.contains(secret) && masked.contains("fleet:***@proxy:3128"), "\(url) → \(masked)")
        }
        #expect(Proxy.masked("http://u:pw@h:1/") == "http://u:***@h:1/")
        #expect(Proxy.masked("http://token@h:1") == "http://token:***@h:1")
        #expect(Proxy.masked("http://h:1") == "http://h:1")

        // fire-agent request -x: exit 5, the user named, the password not.
        let request = try fireAgent(
            ["request", "-x", "http://fleet:pa/ss@127.0.0.1:3128", "http://127.0.0.1:1/"], environment: environmentWithoutProxies())
        #expect(request.status == 5, "\(request.stderr)")
        #expect(request.stderr.contains("fleet:***@127.0.0.1:3128") && request.stderr.contains("%2F"), "\(request.stderr)")
        #expect(!request.stderr.contains("pa/ss") && !request.stderr.contains("ss@"), "\(request.stderr)")

        // fire-agent config check on a file (the agent's own, mode 0600) with such a proxy.
        let directory = try agentScratch("proxy-delimiters")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/agent.json5"
        try Data(document(network: "proxy: 'http://fleet:hunter/2@gw:3128'").utf8).write(to: URL(filePath: path))
        chmod(path, 0o600)
        let check = try fireAgent(["config", "check", path], environment: environmentWithoutProxies())
        #expect(check.status == 78 && check.stderr.contains("network.proxy: http://fleet:***@gw:3128"), "\(check.stderr)")
        #expect(!check.stderr.contains("hunter"), "\(check.stderr)")
    }

    @Test("a proxy password in a config that group or others can read is a problem naming the file, its mode and why")
    func readableConfigWithProxyPassword() throws {
        let directory = try agentScratch("proxy-secret")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/agent.json5"
        try Data(document(network: "proxy: 'http://fleet:s3cret@gw:3128'").utf8).write(to: URL(filePath: path))
        chmod(path, 0o644)
        let readable = try fireAgent(["config", "check", path], environment: environmentWithoutProxies())
        #expect(readable.status == 78, "\(readable.stderr)")
        #expect(
            readable.stderr.contains(
                "network.proxy: holds the proxy's user and password in this file, and \(path) is readable or writable by group or others (mode 0644)"
            ), "\(readable.stderr)")
        #expect(!readable.stderr.contains("s3cret"))
        chmod(path, 0o600)
        let ownOnly = try fireAgent(["config", "check", path], environment: environmentWithoutProxies())
        #expect(ownOnly.status == 0, "\(ownOnly.stderr)")
        // A proxy without credentials, and one taken from the environment, are no secret of
        // the file.
        try Data(document(network: "proxy: 'http://gw:3128'").utf8).write(to: URL(filePath: path))
        chmod(path, 0o644)
        #expect(try fireAgent(["config", "check", path], environment: environmentWithoutProxies()).status == 0)
        try Data(document(network: "").utf8).write(to: URL(filePath: path))
        let fromEnvironment = try fireAgent(
            ["config", "check", path], environment: environmentWithoutProxies(["https_proxy": "http://fleet:s3cret@gw:3128"]))
        #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")
    }

    @Test("-x and -U passwords do not stay readable in /proc/PID/cmdline while the request runs")
    func passwordsLeaveTheCommandLine() throws {
        let shared = HeldRequests()
        // A forward proxy that holds each request until the test has read the command line.
        let proxy = try HostileServer { client in
            let head = client.readRequest()
            shared.heads.withLock { $0.append(head) }
            let deadline = ContinuousClock.now + .seconds(60)
            while !shared.release.load(ordering: .relaxed) && ContinuousClock.now < deadline { client.sleep(0.01) }
            client.send("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
        }
        // The arguments, the secret as written there, the user, the password as sent.
        let cases: [(arguments: [String], secret: String, user: String, password: String)] = [
            (["-x", "http://u:s3cretpw@127.0.0.1:\(proxy.port)"], "s3cretpw", "u", "s3cretpw"),
            (["--proxy=http://u:s3%2Fcret%3Fpw@127.0.0.1:\(proxy.port)"], "s3%2Fcret%3Fpw", "u", "s3/cret?pw"),
            (["-x", "127.0.0.1:\(proxy.port)", "-U", "agent:an0ther-pw"], "an0ther-pw", "agent", "an0ther-pw"),
            (["-x", "127.0.0.1:\(proxy.port)", "--proxy-user=agent:an0ther-pw"], "an0ther-pw", "agent", "an0ther-pw"),
        ]
        for (index, (arguments, secret, user, password)) in cases.enumerated() {
            shared.release.store(false, ordering: .relaxed)
            let child = try ChildProcess(
                try fireAgentPath(), ["request"] + arguments + ["http://origin.example/item"], environment: environmentWithoutProxies(),
                stdout: .pipe, stderr: .pipe)
            #expect(waitUntil { shared.heads.withLock { $0.count } == index + 1 }, "\(arguments)")
            let commandLine = String(decoding: FileManager.default.contents(atPath: "/proc/\(child.pid)/cmdline") ?? Data(), as: UTF8.self)
            shared.release.store(true, ordering: .relaxed)
            let result = try #require(child.collectOutput())
            #expect(result.status == 0 && result.stdout == Data("ok\n".utf8), "\(arguments): \(result.stderr)")
            #expect(commandLine.contains("http://origin.example/item"), "\(commandLine)")
            #expect(!commandLine.contains(secret), "\(arguments): \(commandLine)")
            #expect(commandLine.contains(user + ":" + String(repeating: "*", count: secret.utf8.count)), "\(commandLine)")
            // The proxy still got the password the command line gave.
            let expected = Data("\(user):\(password)".utf8).base64EncodedString()
            #expect(shared.heads.withLock { $0[index] }.contains("Proxy-Authorization: Basic \(expected)"), "\(arguments)")
        }
    }

    @Test("unusable no_proxy entries of the environment are said once by name; the usable ones still apply")
    func invalidNoProxyEntries() throws {
        // request: direct to a host the valid entry names, a warning for each bad entry.
        let origin = try HostileServer { client in
            client.readRequest()
            client.send("HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\ndirect\n")
        }
        let environment = environmentWithoutProxies([
            "http_proxy": "http://127.0.0.1:1", "no_proxy": "10.0.0.0/40,127.0.0.1,host:8080",
        ])
        let request = try fireAgent(["request", "\(origin.base)/x"], environment: environment)
        #expect(request.status == 0 && request.stdout == Data("direct\n".utf8), "\(request.stderr)")
        for entry in ["10.0.0.0/40", "host:8080"] {
            let line =
                "fire-agent: warning: no_proxy: \"\(entry)\" is not a host name, an IP address, a CIDR range (10.0.0.0/8) or \"*\": ignored"
            #expect(request.stderr.components(separatedBy: line).count == 2, "\(request.stderr)")
        }
        // --noproxy is named as the source when it is.
        let option = try fireAgent(["request", "--noproxy", "127.0.0.1,a/b", "\(origin.base)/x"], environment: environment)
        #expect(option.status == 0 && option.stderr.contains("warning: --noproxy: \"a/b\""), "\(option.stderr)")

        // config check: the same words, as warnings (the config is fine).
        let directory = try agentScratch("no-proxy")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/agent.json5"
        try Data(document(network: "").utf8).write(to: URL(filePath: path))
        let check = try fireAgent(
            ["config", "check", path],
            environment: environmentWithoutProxies(["https_proxy": "http://gw:3128", "NO_PROXY": "fleet.example,10.0.0.0/40"]))
        #expect(check.status == 0, "\(check.stderr)")
        #expect(check.stderr.contains("warning: NO_PROXY: \"10.0.0.0/40\" is not a host name"), "\(check.stderr)")
        #expect(!check.stderr.contains("fleet.example\""), "\(check.stderr)")
        // In-process: the entries the agent logs when it starts; the valid one applies.
        let config = try AgentConfig.parse(
            Data(document(network: "").utf8), file: path, machineIDPath: "/nonexistent",
            environment: ["https_proxy": "http://gw:3128", "no_proxy": "fleet.example, 300.1.1.1/8"].lookup)
        #expect(config.network.ignoredNoProxyEntries.count == 1 && config.network.ignoredNoProxyEntries[0].contains("\"300.1.1.1/8\""))
        #expect(config.network.proxy.proxy(forScheme: "https", host: "fleet.example") == nil)
        // Entries the file gives are problems of the file, as before, never these warnings.
        let fromFile = try AgentConfig.parse(
            Data(document(network: "noProxy: ['fleet.example']").utf8), file: path, machineIDPath: "/nonexistent",
            environment: ["https_proxy": "http://gw:3128", "no_proxy": "300.1.1.1/8"].lookup)
        #expect(fromFile.network.ignoredNoProxyEntries.isEmpty)
    }
}

/// What the held proxy and the test share.
private final class HeldRequests: Sendable {
    let heads = Mutex<[String]>([])
    let release = Atomic<Bool>(false)
}

extension Dictionary where Key == String, Value == String {
    /// The dictionary as an environment lookup.
    fileprivate var lookup: (String) -> String? { { self[$0] } }
}
