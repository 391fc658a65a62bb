import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Real proxies for the proxy tests, started once per test process, with an origin that logs
/// the headers it receives:
/// - squid (Debian's squid-openssl) on four ports: `open` (no authentication), `authed` (Basic,
///   basic_ncsa_auth, user `fleet` / `s3cret:p@ss`), `tls` (an https proxy, its certificate from
///   a CA of its own, not the origin's), and `bump` (ssl-bump: it terminates TLS and presents a
///   certificate of its own CA for the origin's name — a MITM);
/// - tinyproxy with Basic authentication (user `fleet` / `tiny-s3cret`);
/// - an nginx origin, http and https (the TLS fixture's `localhost` certificate), logging
///   `request|Proxy-Authorization|Authorization|Host` of each request.
final class ProxyFixture: Sendable {
    static let shared = Result { try ProxyFixture() }

    static let user = "fleet"
    static let password = "s3cret:p@ss"
    /// tinyproxy's configuration cannot hold ':' or '@' in a password.
    static let tinyproxyPassword = "tiny-s3cret"
    /// The credentials as they go into a proxy URL (percent-encoded).
    static let encodedCredentials = "fleet:s3cret%3Ap%40ss"

    let directory: String
    let openPort: Int
    let authPort: Int
    let tlsPort: Int
    let bumpPort: Int
    let tinyproxyPort: Int
    let originHTTPPort: Int
    let originHTTPSPort: Int
    /// The CA of the https proxy's own certificate.
    var proxyCAFile: String { directory + "/proxy-ca.pem" }
    /// The CA the bumping squid signs its forged certificates with.
    var bumpCAFile: String { directory + "/bump-ca.pem" }
    /// The origin's CA (the TLS fixture's root).
    let originCAFile: String
    var originLog: String { directory + "/origin.log" }
    var squidLog: String { directory + "/squid-access.log" }

    var originHTTP: String { "http://127.0.0.1:\(originHTTPPort)" }
    var originHTTPS: String { "https://localhost:\(originHTTPSPort)" }

    /// Lines of the origin's log that contain `token`, waiting up to 5 s for `expected`.
    func originLines(containing token: String, expected: Int = 1) -> [String] {
        lines(of: originLog, containing: token, expected: expected)
    }

    /// Lines of squid's access log that contain `token`, waiting up to 5 s for `expected` (squid
    /// logs a request when it ends, a CONNECT when its tunnel closes).
    func squidLines(containing token: String, expected: Int = 1) -> [String] {
        lines(of: squidLog, containing: token, expected: expected)
    }

    private func lines(of file: String, containing token: String, expected: Int) -> [String] {
        var lines: [String] = []
        _ = waitUntil(within: .seconds(5)) {
            let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
            lines = text.split(separator: "\n").map(String.init).filter { $0.contains(token) }
            return lines.count >= expected
        }
        return lines
    }

    private init() throws {
        guard let squid = which("squid") else { throw FixtureError(description: "squid is not installed (apt-get install squid-openssl)") }
        guard let tinyproxy = which("tinyproxy") else { throw FixtureError(description: "tinyproxy is not installed") }
        guard let nginx = which("nginx"), let openssl = which("openssl") else {
            throw FixtureError(description: "nginx and openssl are needed")
        }
        let tls = try tlsServer()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-proxy-\(getpid())").path
        self.directory = directory
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory + "/www", withIntermediateDirectories: true)
        // squid started by root runs as `proxy`: it must reach its directory and read its files.
        ProxyFixture.openToOthers(directory)
        try Data("hello through the proxy\n".utf8).write(to: URL(fileURLWithPath: directory + "/www/hello.txt"))
        var generator = SplitMix64(seed: 7)
        try Data((0..<(1 << 20)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }).write(
            to: URL(fileURLWithPath: directory + "/www/1m.bin"))
        originCAFile = tls.caFile

        let run = { (arguments: [String]) throws in
            let result = try runCapturingOutput(openssl, arguments, directory: directory)
            guard result.status == 0 else {
                throw FixtureError(description: "openssl \(arguments.joined(separator: " ")) failed: \(result.stderr)")
            }
        }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        try run(["req", "-x509"] + ec + ["-keyout", "proxy-ca.key", "-out", "proxy-ca.pem", "-days", "30", "-subj", "/CN=Proxy Test CA"])
        try run(["req"] + ec + ["-keyout", "proxy.key", "-out", "proxy.csr", "-subj", "/CN=proxy"])
        try "subjectAltName=DNS:localhost,IP:127.0.0.1\n".write(toFile: directory + "/proxy.ext", atomically: true, encoding: .utf8)
        try run([
            "x509", "-req", "-in", "proxy.csr", "-CA", "proxy-ca.pem", "-CAkey", "proxy-ca.key", "-CAcreateserial", "-out", "proxy.pem",
            "-days", "30", "-extfile", "proxy.ext",
        ])
        // The MITM's CA: squid signs a certificate for whatever name the client asks for.
        try run([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "bump-ca.key", "-out", "bump-ca.pem", "-days", "30", "-subj",
            "/CN=Intercepting Proxy CA", "-addext", "basicConstraints=critical,CA:true", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ])
        for file in ["server.pem", "server.key", "ca.pem"] {
            try? FileManager.default.removeItem(atPath: directory + "/origin-" + file)
            try FileManager.default.copyItem(atPath: tls.directory + "/" + file, toPath: directory + "/origin-" + file)
        }
        let hash = String(decoding: try runCapturingOutput(openssl, ["passwd", "-apr1", ProxyFixture.password]).stdout, as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        try "\(ProxyFixture.user):\(hash)\n".write(toFile: directory + "/passwd", atomically: true, encoding: .utf8)
        if let certgen = ["/usr/lib/squid/security_file_certgen"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) {
            let result = try runCapturingOutput(certgen, ["-c", "-s", directory + "/ssldb", "-M", "4MB"])
            guard result.status == 0 else { throw FixtureError(description: "security_file_certgen -c failed: \(result.stderr)") }
        }
        ProxyFixture.openToOthers(directory)

        // The origin.
        originHTTPPort = freePort()
        originHTTPSPort = freePort()
        let originConfig = """
            worker_processes 1;
            daemon off;
            pid \(directory)/origin.pid;
            error_log \(directory)/origin-error.log;
            events { worker_connections 64; }
            http {
              log_format headers escape=none '$request|$http_proxy_authorization|$http_authorization|$http_host';
              access_log \(directory)/origin.log headers;
              client_body_temp_path \(directory)/body; proxy_temp_path \(directory)/proxy; fastcgi_temp_path \(directory)/fastcgi;
              uwsgi_temp_path \(directory)/uwsgi; scgi_temp_path \(directory)/scgi;
              keepalive_requests 100000;
              default_type text/plain;
              server {
                listen 127.0.0.1:\(originHTTPPort);
                listen 127.0.0.1:\(originHTTPSPort) ssl;
                ssl_certificate \(directory)/origin-server.pem;
                ssl_certificate_key \(directory)/origin-server.key;
                root \(directory)/www;
                location /ingest/ { client_max_body_size 64m; return 204; }
              }
            }
            """
        try originConfig.write(toFile: directory + "/origin.conf", atomically: true, encoding: .utf8)
        _ = try startProcess(nginx, ["-c", directory + "/origin.conf", "-e", directory + "/origin-error.log"])

        // squid.
        openPort = freePort()
        authPort = freePort()
        tlsPort = freePort()
        bumpPort = freePort()
        let squidConfig = """
            http_port 127.0.0.1:\(openPort) name=open
            http_port 127.0.0.1:\(authPort) name=authed
            https_port 127.0.0.1:\(tlsPort) name=tls tls-cert=\(directory)/proxy.pem tls-key=\(directory)/proxy.key
            http_port 127.0.0.1:\(bumpPort) name=bump ssl-bump tls-cert=\(directory)/bump-ca.pem tls-key=\(directory)/bump-ca.key generate-host-certificates=on dynamic_cert_mem_cache_size=4MB
            sslcrtd_program /usr/lib/squid/security_file_certgen -s \(directory)/ssldb -M 4MB
            sslcrtd_children 2 startup=1 idle=1
            acl step1 at_step SslBump1
            acl bumpport myportname bump
            ssl_bump peek step1 bumpport
            ssl_bump bump bumpport
            ssl_bump splice all
            tls_outgoing_options cafile=\(directory)/origin-ca.pem
            pid_filename \(directory)/squid.pid
            cache deny all
            strip_query_terms off
            buffered_logs off
            cache_mem 8 MB
            access_log stdio:\(directory)/squid-access.log
            cache_log \(directory)/squid-cache.log
            cache_store_log none
            coredump_dir \(directory)
            netdb_filename none
            auth_param basic program /usr/lib/squid/basic_ncsa_auth \(directory)/passwd
            auth_param basic realm tinyfire-test
            auth_param basic children 2 startup=1 idle=1
            acl authedport myportname authed
            acl authenticated proxy_auth REQUIRED
            acl CONNECT method CONNECT
            http_access allow authedport authenticated
            http_access deny authedport
            http_access allow all
            shutdown_lifetime 0 seconds
            """
        try squidConfig.write(toFile: directory + "/squid.conf", atomically: true, encoding: .utf8)
        // A service name of this process's own: squid names its shared-memory segments after it,
        // and another squid (or one an earlier run left) must not hold the same names.
        _ = try startProcess(squid, ["-N", "-n", "tinyfire\(getpid())", "-f", directory + "/squid.conf"])

        // tinyproxy.
        tinyproxyPort = freePort()
        let tinyproxyConfig = """
            Port \(tinyproxyPort)
            Listen 127.0.0.1
            Timeout 60
            MaxClients 32
            LogLevel Info
            BasicAuth \(ProxyFixture.user) \(ProxyFixture.tinyproxyPassword)
            """
        try tinyproxyConfig.write(toFile: directory + "/tinyproxy.conf", atomically: true, encoding: .utf8)
        _ = try startProcess(tinyproxy, ["-d", "-c", directory + "/tinyproxy.conf"])

        for port in [originHTTPPort, originHTTPSPort, openPort, authPort, tlsPort, bumpPort, tinyproxyPort] {
            try waitForPort(port, timeout: 30)
        }
    }

    /// Lets other users reach `path` (and read what is in it) when this process runs as root:
    /// squid drops to its own user. The temporary directories above it that this process owns
    /// get search permission (o+x) only.
    private static func openToOthers(_ path: String) {
        guard getuid() == 0 else { return }
        _ = try? runCapturingOutput("/bin/chmod", ["-R", "a+rwX", path])
        var parent = (path as NSString).deletingLastPathComponent
        while parent != "/" && !parent.isEmpty {
            var info = stat()
            if stat(parent, &info) == 0, info.st_uid == getuid(), info.st_mode & 0o001 == 0 {
                chmod(parent, info.st_mode & 0o7777 | 0o001)
            }
            parent = (parent as NSString).deletingLastPathComponent
        }
    }
}

func proxies() throws -> ProxyFixture { try ProxyFixture.shared.get() }

/// This process's environment without any proxy variable (the runner's own must not steer the
/// test), plus `extra`. The rest is kept: under qemu it says where the target's loader is
/// (QEMU_LD_PREFIX).
func environmentWithoutProxies(_ extra: [String: String] = [:]) -> [String: String] {
    var environment = ProcessInfo.processInfo.environment
    for name in ["http_proxy", "https_proxy", "all_proxy", "no_proxy"] {
        environment[name] = nil
        environment[name.uppercased()] = nil
    }
    return environment.merging(extra) { $1 }
}
