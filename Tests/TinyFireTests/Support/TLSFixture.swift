import Foundation

/// A throw-away PKI made with the openssl CLI, and an nginx serving https with it.
///
/// Root CA → server certificate for `localhost` (DNS) and 127.0.0.1 (IP address), ECDSA P-256;
/// a second server certificate whose only name is the DNS name "127.0.0.1" (which must not
/// pass for the address).
final class TLSFixture: Sendable {
    static let shared = Result { try TLSFixture() }

    let directory: String
    let port: Int
    let dnsSpellingPort: Int
    /// Another key for `localhost`, also signed by the test root (what a MITM with a trusted CA
    /// would present).
    let mitmPort: Int
    /// A self-signed certificate for `localhost`.
    let selfSignedPort: Int
    /// Requires a client certificate issued by the test root (mutual TLS).
    let mutualPort: Int
    /// A certificate that expired in 2020.
    let expiredPort: Int
    /// A leaf issued by an intermediate CA, sent without the intermediate.
    let missingIntermediatePort: Int
    /// The same leaf with its intermediate.
    let fullChainPort: Int
    /// `openssl s_server -www` with the server certificate (a second TLS implementation as peer).
    let sServerPort: Int
    /// `crl.pem` revokes the mitm certificate.
    var crlFile: String { directory + "/crl.pem" }
    var caFile: String { directory + "/ca.pem" }

    private init() throws {
        guard let openssl = which("openssl") else { throw FixtureError(description: "openssl is not installed") }
        guard let nginx = which("nginx") else { throw FixtureError(description: "nginx is not installed") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-tls-\(getpid())").path
        self.directory = directory
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory + "/www", withIntermediateDirectories: true)
        try Data("hello over tls\n".utf8).write(to: URL(fileURLWithPath: directory + "/www/hello.txt"))
        let run = { (arguments: [String]) throws in
            let result = try runCapturingOutput(openssl, arguments, directory: directory)
            guard result.status == 0 else {
                throw FixtureError(description: "openssl \(arguments.joined(separator: " ")) failed: \(result.stderr)")
            }
        }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        try run(["req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.pem", "-days", "30", "-subj", "/CN=TinyFire Test Root"])
        for (name, san) in [
            ("server", "DNS:localhost,IP:127.0.0.1"), ("dnsip", "DNS:127.0.0.1"), ("mitm", "DNS:localhost,IP:127.0.0.1"),
            ("client", "DNS:device-0001"),
        ] {
            try run(["req"] + ec + ["-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=\(name)"])
            try "subjectAltName=\(san)\n".write(toFile: directory + "/\(name).ext", atomically: true, encoding: .utf8)
            try run([
                "x509", "-req", "-in", "\(name).csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "\(name).pem",
                "-days", "30", "-extfile", "\(name).ext",
            ])
        }
        try "subjectAltName=DNS:localhost\n".write(toFile: directory + "/self.ext", atomically: true, encoding: .utf8)
        try run(
            ["req", "-x509"] + ec + [
                "-keyout", "self.key", "-out", "self.pem", "-days", "30", "-subj", "/CN=localhost", "-addext",
                "subjectAltName=DNS:localhost",
            ])
        // `openssl ca` for what `x509 -req` cannot do: dates in the past, revocation, a CRL.
        try """
        [ ca ]
        default_ca = tf
        [ tf ]
        dir = .
        database = index.txt
        new_certs_dir = .
        serial = serial
        crlnumber = crlnumber
        default_md = sha256
        default_crl_days = 30
        policy = anything
        copy_extensions = copy
        [ anything ]
        commonName = supplied
        """.write(toFile: directory + "/ca.cnf", atomically: true, encoding: .utf8)
        try "".write(toFile: directory + "/index.txt", atomically: true, encoding: .utf8)
        try "1000\n".write(toFile: directory + "/serial", atomically: true, encoding: .utf8)
        try "1000\n".write(toFile: directory + "/crlnumber", atomically: true, encoding: .utf8)
        let ca = ["ca", "-batch", "-config", "ca.cnf", "-keyfile", "ca.key", "-cert", "ca.pem"]
        try run(
            ["req"] + ec + [
                "-keyout", "expired.key", "-out", "expired.csr", "-subj", "/CN=expired", "-addext", "subjectAltName=DNS:localhost",
            ])
        try run(ca + ["-startdate", "20200101000000Z", "-enddate", "20200201000000Z", "-in", "expired.csr", "-out", "expired.pem"])
        try run(ca + ["-revoke", "mitm.pem"])
        try run(ca + ["-gencrl", "-out", "crl.pem"])
        // A CRL whose validity ended in 2020, and one issued by the intermediate CA (which
        // issued none of the nginx server certificates).
        try run(ca + ["-gencrl", "-crl_lastupdate", "20200101000000Z", "-crl_nextupdate", "20200201000000Z", "-out", "crl-expired.pem"])
        // An intermediate CA and a leaf it issues.
        try "basicConstraints=critical,CA:true\nkeyUsage=critical,keyCertSign,cRLSign\n".write(
            toFile: directory + "/intermediate.ext", atomically: true, encoding: .utf8)
        try run(["req"] + ec + ["-keyout", "intermediate.key", "-out", "intermediate.csr", "-subj", "/CN=TinyFire Test Intermediate"])
        try run([
            "x509", "-req", "-in", "intermediate.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "intermediate.pem",
            "-days", "30", "-extfile", "intermediate.ext",
        ])
        try run([
            "ca", "-batch", "-config", "ca.cnf", "-keyfile", "intermediate.key", "-cert", "intermediate.pem", "-gencrl", "-out",
            "crl-intermediate.pem",
        ])
        try run(["req"] + ec + ["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=leaf"])
        try "subjectAltName=DNS:localhost\n".write(toFile: directory + "/leaf.ext", atomically: true, encoding: .utf8)
        try run([
            "x509", "-req", "-in", "leaf.csr", "-CA", "intermediate.pem", "-CAkey", "intermediate.key", "-CAcreateserial", "-out",
            "leaf.pem",
            "-days", "30", "-extfile", "leaf.ext",
        ])
        try run(["pkey", "-in", "server.key", "-pubout", "-out", "server.pub"])
        try run(["x509", "-in", "server.pem", "-outform", "DER", "-out", "server.der"])
        let leaf = try String(contentsOfFile: directory + "/leaf.pem", encoding: .utf8)
        let intermediate = try String(contentsOfFile: directory + "/intermediate.pem", encoding: .utf8)
        try (leaf + intermediate).write(toFile: directory + "/leaf-chain.pem", atomically: true, encoding: .utf8)

        // Uploads over https go through nginx to httpbin, which echoes what arrived. Started
        // before the ports below are picked: they stay free only while nothing else binds.
        let httpbinPort = (try? httpbin().port) ?? 1
        port = freePort()
        dnsSpellingPort = freePort()
        expiredPort = freePort()
        missingIntermediatePort = freePort()
        fullChainPort = freePort()
        sServerPort = freePort()
        mitmPort = freePort()
        selfSignedPort = freePort()
        mutualPort = freePort()
        let dir = directory
        // One TLS server block per certificate under test: (port, certificate, key, extra directives).
        let servers: [(Int, String, String, String)] = [
            (
                port, "server.pem", "server.key",
                """
                location = /close { keepalive_timeout 0; return 200 "closing\\n"; }
                location = /to-http { return 302 http://127.0.0.1:1/hello.txt; }
                location /httpbin/ { proxy_pass http://127.0.0.1:\(httpbinPort)/; client_max_body_size 64m; }
                """
            ),
            (dnsSpellingPort, "dnsip.pem", "dnsip.key", ""),
            (mitmPort, "mitm.pem", "mitm.key", ""),
            (expiredPort, "expired.pem", "expired.key", ""),
            (missingIntermediatePort, "leaf.pem", "leaf.key", ""),
            (fullChainPort, "leaf-chain.pem", "leaf.key", #"location = /close { keepalive_timeout 0; return 200 "closing\n"; }"#),
            (
                mutualPort, "server.pem", "server.key",
                """
                ssl_client_certificate \(dir)/ca.pem;
                ssl_verify_client on;
                location = /whoami { return 200 "$ssl_client_s_dn\n"; }
                """
            ),
            (selfSignedPort, "self.pem", "self.key", ""),
        ]
        let blocks = servers.map { port, certificate, key, extra in
            """
            server {
              listen 127.0.0.1:\(port) ssl;
              ssl_certificate \(dir)/\(certificate);
              ssl_certificate_key \(dir)/\(key);
              root \(dir)/www;
              \(extra)
            }
            """
        }
        let config = """
            worker_processes 1;
            daemon off;
            pid \(dir)/nginx.pid;
            error_log \(dir)/error.log;
            events { worker_connections 64; }
            http {
              access_log off;
              # nginx bounds a TLS handshake with this (60 s by default): the slow-evaluator
              # test holds one open while another transfer runs, which under qemu at start-up
              # took 60 s (ci38).
              client_header_timeout 600s;
              client_body_temp_path \(dir)/body; proxy_temp_path \(dir)/proxy; fastcgi_temp_path \(dir)/fastcgi;
              uwsgi_temp_path \(dir)/uwsgi; scgi_temp_path \(dir)/scgi;
              default_type text/plain;
              ssl_protocols TLSv1.2;
              ssl_session_cache shared:tls:1m;
              ssl_session_tickets off;
            \(blocks.joined(separator: "\n"))
            }
            """
        try config.write(toFile: dir + "/nginx.conf", atomically: true, encoding: .utf8)
        _ = try startProcess(nginx, ["-c", dir + "/nginx.conf", "-e", dir + "/error.log"])
        for (port, _, _, _) in servers { try waitForPort(port) }
        _ = try startProcess(
            openssl,
            [
                "s_server", "-accept", "127.0.0.1:\(sServerPort)", "-cert", dir + "/server.pem", "-key", dir + "/server.key", "-www",
                "-tls1_2", "-quiet",
            ])
        try waitForPort(sServerPort)
    }
}

func tlsServer() throws -> TLSFixture { try TLSFixture.shared.get() }
