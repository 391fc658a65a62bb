import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Errors of the test fixtures themselves (a peer that would not start).
struct FixtureError: Error, CustomStringConvertible {
    var description: String
}

/// A free TCP port on 127.0.0.1 (bound, then released).
func freePort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    _ = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Waits until something accepts TCP connections on `host`:`port` (an IPv4 literal).
func waitForPort(_ port: Int, host: String = "127.0.0.1", timeout: TimeInterval = 15) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(host)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        close(fd)
        if status == 0 { return }
        usleep(50_000)
    }
    throw FixtureError(description: "nothing listening on \(host):\(port) after \(timeout) s")
}

/// Starts a server for the rest of the test process: clean signal mask, stdin empty, output
/// to a log file in the temporary directory (never the runner's own stdout/stderr: swift test
/// waits for every holder of those pipes to close them); stopped at exit (`ChildProcess`).
func startProcess(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> ChildProcess {
    let logPath = FileManager.default.temporaryDirectory.appendingPathComponent(
        "tinyfire-\(URL(fileURLWithPath: executable).lastPathComponent)-\(getpid()).log"
    ).path
    return try ChildProcess(executable, arguments, environment: environment, stdout: .file(logPath), stderr: .file(logPath))
}

/// Finds an executable on PATH (and in the usual sbin directories, where nginx lives).
func which(_ name: String) -> String? {
    let path = (ProcessInfo.processInfo.environment["PATH"] ?? "") + ":/usr/sbin:/sbin:/usr/local/bin"
    for directory in path.split(separator: ":") {
        let candidate = "\(directory)/\(name)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    return nil
}

/// nginx on loopback (IPv4 and IPv6) serving generated files, started once per test process.
final class NginxFixture: Sendable {
    static let shared = Result { try NginxFixture() }

    let port: Int
    /// The address `base` names.
    let address: String
    private let process: ChildProcess
    let root: String
    /// Where nginx logs `uri status body_bytes_sent "Range" "If-Range"`, one line per request.
    let accessLog: String
    /// Where nginx logs requests to /ingest/: `uri status content_length "Idempotency-Key"`.
    let ingestLog: String
    /// 1 MiB of pseudo-random bytes at /1m.bin (also at /norange/1m.bin, where Range is ignored,
    /// and /no-etag/1m.bin, served with Last-Modified and no ETag; /slow-no-etag/ at 128 KiB/s).
    let oneMiB: Data
    /// A compressible text at /text.txt (served gzip'd when asked).
    let text: Data

    var base: String { "http://\(address):\(port)" }

    /// Access-log lines whose URI contains `token`.
    /// nginx logs a request after it has sent the last byte, so a client can read the answer
    /// before the line exists: this waits (up to 5 s) for at least `expected` lines.
    func logLines(containing token: String, expected: Int = 1) -> [String] {
        var lines: [String] = []
        _ = waitUntil(within: .seconds(5)) {
            let text = (try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? ""
            lines = text.split(separator: "\n").map(String.init).filter { $0.contains(token) }
            return lines.count >= expected
        }
        return lines
    }

    /// Lines of the ingest log whose URI contains `token`. nginx writes a request's line when it
    /// finalizes the request; for `return 204` with a body it has not read, that is after it has
    /// drained the body, which can be after the client has the answer. With `expecting`, waits
    /// (up to 10 s) until that many lines are there, then returns what there is.
    func ingestLines(containing token: String, expecting: Int? = nil) -> [String] {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let text = (try? String(contentsOfFile: ingestLog, encoding: .utf8)) ?? ""
            let lines = text.split(separator: "\n").map(String.init).filter { $0.contains(token) }
            guard let expecting, lines.count < expecting, ContinuousClock.now < deadline else { return lines }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    /// A second nginx for one test, listening on `address` only (a veth address of a
    /// `NetworkNamespace`, reachable from inside it); stop it with `stop()`.
    static func dedicated(listeningOn address: String) throws -> NginxFixture {
        try NginxFixture(address: address)
    }

    /// Stops a dedicated instance.
    func stop() {
        process.stop()
    }

    private init(address: String? = nil) throws {
        guard let nginx = which("nginx") else { throw FixtureError(description: "nginx is not installed (apt-get install nginx-light)") }
        let port = freePort()
        self.port = port
        self.address = address ?? "127.0.0.1"
        let listen = address.map { ["\($0):\(port)"] } ?? ["127.0.0.1:\(port)", "[::1]:\(port)"]
        let suffix = address.map { "-" + $0.replacing(".", with: "-") } ?? ""
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tinyfire-nginx-\(getpid())\(suffix)")
        root = directory.appendingPathComponent("www").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        var generator = SplitMix64(seed: 42)
        oneMiB = Data((0..<(1 << 20)).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        try oneMiB.write(to: URL(fileURLWithPath: root + "/1m.bin"))
        text = Data(String(repeating: "TinyFire streams through fixed buffers. ", count: 5000).utf8)
        try text.write(to: URL(fileURLWithPath: root + "/text.txt"))
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: root + "/hello.txt"))
        try Data().write(to: URL(fileURLWithPath: root + "/empty.txt"))
        try Data([0x63, 0x61, 0x66, 0xE9]).write(to: URL(fileURLWithPath: root + "/latin1.txt"))
        let dir = directory.path
        accessLog = dir + "/access.log"
        ingestLog = dir + "/ingest.log"
        let config = """
            worker_processes 1;
            daemon off;
            pid \(dir)/nginx.pid;
            error_log \(dir)/error.log;
            events { worker_connections 256; }
            http {
              log_format tinyfire '$request_uri $status $body_bytes_sent "$http_range" "$http_if_range"';
              log_format ingest escape=none '$request_uri $status $content_length $http_idempotency_key';
              access_log \(dir)/access.log tinyfire;
              sendfile on;
              client_body_temp_path \(dir)/body;
              proxy_temp_path \(dir)/proxy;
              fastcgi_temp_path \(dir)/fastcgi;
              uwsgi_temp_path \(dir)/uwsgi;
              scgi_temp_path \(dir)/scgi;
              keepalive_requests 100000;
              keepalive_timeout 3600s;
              default_type application/octet-stream;
              gzip on; gzip_types text/plain; gzip_min_length 10;
              types { text/plain txt; }
              server {
                \(listen.map { "listen \($0);" }.joined(separator: "\n    "))
                root \(root);
                location = /redirect { return 302 /hello.txt; }
                location = /redirect-absolute { return 301 http://localhost:\(port)/hello.txt; }
                location = /loop { return 302 /loop; }
                location = /no-content { return 204; }
                location = /small-upload { client_max_body_size 1k; return 200 "accepted\\n"; }
                location /norange/ { alias \(root)/; max_ranges 0; }
                location /no-etag/ { alias \(root)/; etag off; }
                location /slow-no-etag/ { alias \(root)/; etag off; limit_rate 128k; }
                location /ingest/ { client_max_body_size 64m; access_log \(dir)/ingest.log ingest; return 204; }
                location /ingest-unavailable/ { access_log \(dir)/ingest.log ingest; return 503; }
                location /ingest-rejected/ { access_log \(dir)/ingest.log ingest; return 422; }
              }
            }
            """
        try config.write(toFile: dir + "/nginx.conf", atomically: true, encoding: .utf8)
        process = try startProcess(nginx, ["-c", dir + "/nginx.conf", "-e", dir + "/error.log"])
        try waitForPort(port, host: self.address)
    }
}

/// httpbin under gunicorn, started once per test process.
final class HttpbinFixture: Sendable {
    static let shared = Result { try HttpbinFixture() }

    let port: Int
    var base: String { "http://127.0.0.1:\(port)" }

    private init() throws {
        guard let python = which("python3"), pythonCanImport(python, "gunicorn"), pythonCanImport(python, "httpbin") else {
            throw FixtureError(description: "gunicorn is not installed (pip install httpbin gunicorn)")
        }
        port = freePort()
        // gunicorn's entry point run in this interpreter (no console script or pyenv shim
        // needed on PATH); its workers are in its process group, stopped with it.
        let run = "import sys; sys.argv = ['gunicorn'] + sys.argv[1:]; from gunicorn.app.wsgiapp import run; run()"
        _ = try startProcess(
            python,
            [
                "-c", run, "-b", "127.0.0.1:\(port)", "-w", "2", "-k", "gthread", "--threads", "16", "--log-level", "error",
                "httpbin:app",
            ])
        try waitForPort(port, timeout: 30)
    }
}

/// Whether `python` can import `module`.
func pythonCanImport(_ python: String, _ module: String) -> Bool {
    (try? runCapturingOutput(python, ["-c", "import \(module)"]))?.status == 0
}

/// A deterministic generator for test data.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
