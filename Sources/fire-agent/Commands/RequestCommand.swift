import ArgumentParser
import Dispatch
import FireAgentCore
import HTTPTypes
import Synchronization
import TinyFire

#if canImport(Glibc)
    import Glibc
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `fire-agent request URL`: one HTTP transfer, curl style.
struct RequestCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request",
        abstract: "Perform one HTTP request (curl-like). Exit 0 only for a complete 2xx response.",
        discussion: """
            The body goes to stdout, or with -o to a file that appears only once the body is \
            complete (written to a hidden sibling, then renamed). See docs/CLI.md for exit codes.
            """
    )

    @Argument(help: "The URL (http:// or https://).")
    var url: String

    @Option(name: [.customShort("X"), .long], help: "Request method (default GET, or POST with -d).")
    var method: String?

    @Option(name: [.customShort("H"), .long], help: "Extra header 'Name: value' (repeatable).")
    var header: [String] = []

    @Option(name: [.customShort("d"), .long], help: "Request body; @FILE reads it from a file.")
    var data: String?

    @Option(name: [.customShort("o"), .long], help: "Write the body to FILE instead of stdout.")
    var output: String?

    @Flag(name: [.customShort("i"), .customLong("include")], help: "Include the response head in the output.")
    var include = false

    @Flag(name: [.customShort("v"), .long], help: "Show the request and response heads and phase timings on stderr.")
    var verbose = false

    @Option(name: .customLong("timeout"), help: "Total time allowed, in seconds (curl's --max-time).")
    var timeout: Double?

    @Option(name: .customLong("connect-timeout"), help: "Time allowed for DNS plus connect, in seconds (default 30).")
    var connectTimeout: Double?

    @Option(name: .customLong("idle-timeout"), help: "Time allowed without any byte moving, in seconds (default 60).")
    var idleTimeout: Double?

    @Option(name: .customLong("speed-limit"), help: "Abort when slower than this many bytes/s for --speed-time seconds.")
    var speedLimit: Int?

    @Option(name: .customLong("speed-time"), help: "Window for --speed-limit, in seconds (default 30).")
    var speedTime: Double = 30

    @Option(name: .customLong("limit-rate"), help: "Read at most this many bytes/s (suffix k, M or G for KiB, MiB, GiB, as curl).")
    var limitRate: String?

    @Option(name: .customLong("max-filesize"), help: "Refuse a download that would exceed this size (exit 63; suffix k, M or G).")
    var maxFilesize: String?

    @Option(name: .customLong("max-redirs"), help: "Redirects to follow at most (default 10; 0 disables).")
    var maxRedirects: Int = SessionConfiguration.defaultMaxRedirects

    @Option(name: .customLong("max-body"), help: "Largest request body read from -d @FILE, in bytes (default 16 MiB).")
    var maxRequestBody: Int = SessionConfiguration.defaultMaxInMemoryBodyBytes

    @Option(name: [.customShort("T"), .customLong("upload-file")], help: "Send FILE as the body, streamed (PUT unless -X says otherwise).")
    var uploadFile: String?

    @Option(
        name: [.customShort("F"), .customLong("form")],
        help: "Multipart form field (repeatable): name=value, or name=@FILE[;type=MIME][;filename=NAME] for a file part (POST).")
    var form: [String] = []

    @Option(
        name: [.customShort("C"), .customLong("continue-at")],
        help: "'-' continues a partial -o FILE from its size (a Range request, as curl; a 200 rewrites the file).")
    var continueAt: String?

    @Flag(
        name: [.customShort("#"), .customLong("progress")],
        help: "Show progress on stderr: a bar on a terminal, a line per second otherwise.")
    var progress = false

    @Option(
        name: .customLong("wait-for-network"),
        help: "When the request fails for lack of network, wait up to this many seconds for a route to the host, then try again.")
    var waitForNetwork: Double?

    @Option(
        name: .customLong("defer-to"),
        help: "When the request fails for lack of network, queue it durably in the offline queue DIR instead of failing (exit 75).")
    var deferTo: String?

    @OptionGroup var tlsOptions: TLSOptions
    @OptionGroup var proxyOptions: ProxyOptions

    func run() throws {
        signal(SIGPIPE, SIG_IGN)
        let status = perform()
        if status != .success { throw ExitCode(status.rawValue) }
    }

    func validate() throws {
        try validateSeconds([
            ("--timeout", timeout), ("--connect-timeout", connectTimeout), ("--idle-timeout", idleTimeout), ("--speed-time", speedTime),
            ("--wait-for-network", waitForNetwork),
        ])
        for (name, value) in [("--limit-rate", limitRate), ("--max-filesize", maxFilesize)] {
            if let value, curlSize(value) == nil {
                throw ValidationError("\(name) takes a size in bytes (suffix k, M or G), not \(value)")
            }
        }
    }

    private func perform() -> ExitStatus {
        var configuration = SessionConfiguration()
        if let timeout { configuration.totalTimeout = .timeInterval(timeout) }
        if let connectTimeout, let limit = Duration.timeInterval(connectTimeout) { configuration.connectTimeout = limit }
        if let idleTimeout, let limit = Duration.timeInterval(idleTimeout) { configuration.idleTimeout = limit }
        if let speedLimit, let window = Duration.timeInterval(speedTime) {
            configuration.lowSpeedLimit = LowSpeedLimit(bytesPerSecond: speedLimit, window: window)
        }
        configuration.maxRedirects = maxRedirects
        configuration.maxReceiveBytesPerSecond = limitRate.flatMap(curlSize).map { Int(clamping: $0) }
        let trustManager: ServerTrustManager?
        switch tlsOptions.apply(to: &configuration) {
        case .success(let manager): trustManager = manager
        case .failure(let error): return fail(.sslCertificateProblem, error.description)
        }
        do {
            configuration.proxy = try proxyOptions.settings()
        } catch {
            return fail(.couldNotResolveProxy, error.description)
        }
        configuration.headers.update(
            name: "User-Agent", value: "fire-agent/\(HTTPHeaders.tinyFireVersion) TinyFire/\(HTTPHeaders.tinyFireVersion)")

        var headers = HTTPHeaders()
        for line in header {
            guard let colon = line.firstIndex(of: ":") else {
                return fail(.malformedURL, "invalid header \(line.debugDescription): expected 'Name: value'")
            }
            let name = trimmed(line[..<colon])
            let value = trimmed(line[line.index(after: colon)...])
            guard HTTPField.Name(name) != nil else {
                return fail(.malformedURL, "invalid header name \(name.debugDescription)")
            }
            headers.append(name: name, value: value)
        }

        var body: Data?
        if let data {
            if data.hasPrefix("@") {
                let path = String(data.dropFirst())
                switch readFile(path, limit: maxRequestBody) {
                case .success(let contents): body = contents
                case .failure(let error): return fail(.readError, error.message)
                }
            } else {
                body = Data(data.utf8)
            }
            if headers.value(for: "Content-Type") == nil {
                headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            }
        }
        if [uploadFile != nil, body != nil, !form.isEmpty].filter({ $0 }).count > 1 {
            return fail(.malformedURL, "use only one of -d/--data, -T/--upload-file and -F/--form")
        }
        var upload: UploadRequest.Uploadable?
        if let uploadFile { upload = .file(URL(filePath: uploadFile)) }
        if !form.isEmpty {
            switch multipartForm(form) {
            case .success(let multipart): upload = .multipart(multipart)
            case .failure(let error): return fail(.malformedURL, error.message)
            }
        }
        let method = HTTPMethod(rawValue: method ?? (uploadFile != nil ? "PUT" : body == nil && form.isEmpty ? "GET" : "POST"))

        var resumeFrom: DownloadResumeData?
        if let continueAt {
            guard continueAt == "-" else { return fail(.malformedURL, "-C takes '-' (continue from the size of the -o file)") }
            guard let output, output != "-" else { return fail(.malformedURL, "-C - needs -o FILE to continue") }
            var info = stat()
            if stat(output, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG && info.st_size > 0, let resource = URL(string: url) {
                // Continued only with the validator an earlier -C - run recorded for these
                // bytes: without it, a file changed on the server would be spliced.
                if let record = DownloadResumeData.read(from: resumeRecordPath(for: output)),
                    record.entityTag != nil || record.lastModified != nil
                {
                    resumeFrom = DownloadResumeData(
                        url: resource, partialFile: output, bytesOnDisk: UInt64(info.st_size), entityTag: record.entityTag,
                        lastModified: record.lastModified, totalLength: record.totalLength)
                } else {
                    printError("fire-agent: no validator recorded for the bytes in \(output): downloading it from the start")
                }
            }
        }

        // Where the body goes.
        let target: DownloadRequest.Target
        var outputFD: Int32 = -1
        if let output, output != "-" {
            var info = stat()
            if stat(output, &info) == 0 && (info.st_mode & S_IFMT) != S_IFREG {
                // /dev/null, a FIFO, a terminal: write straight through.
                outputFD = open(output, O_WRONLY | O_CLOEXEC)
                guard outputFD >= 0 else {
                    return fail(.writeError, "cannot open \(output): \(String(cString: strerror(errno)))")
                }
                target = .descriptor(outputFD)
            } else {
                let url = URL(filePath: output)
                target = .destination { _, _ in (url, [.removePreviousFile]) }
            }
        } else {
            target = .descriptor(STDOUT_FILENO)
        }
        defer { if outputFD >= 0 { close(outputFD) } }

        var interceptors: [any RequestInterceptor] = []
        if let waitForNetwork {
            do {
                // Through a proxy, the route that matters is the one to the proxy.
                let target = URL(string: url)
                let host = target?.host().map { configuration.proxy.routeHost(forScheme: target?.scheme ?? "", host: $0) }
                let monitor = try NetworkReachabilityManager(host: host)
                interceptors.append(OfflineRetrier(monitor: monitor, maximumWait: .timeInterval(waitForNetwork) ?? .zero))
            } catch {
                return fail(.internalError, "--wait-for-network: \(error)")
            }
        }
        var offlineQueue: OfflineQueue?
        if let deferTo {
            do {
                let queue = try OfflineQueue(directory: deferTo)
                interceptors.append(OfflineQueueDeferrer(queue: queue))
                offlineQueue = queue
            } catch {
                return fail(ExitStatus(error), "--defer-to: \(error)")
            }
        }
        defer { offlineQueue?.close() }

        let session = Session(configuration: configuration, serverTrustManager: trustManager)
        let request = session.download(
            url, method: method, headers: headers, body: body, upload: upload, target: target,
            acceptableStatusCodes: 200..<300, includeResponseHead: include,
            interceptor: interceptors.isEmpty ? nil : Interceptor(interceptors: interceptors), resumingFrom: resumeFrom,
            partialPolicy: continueAt != nil ? .inPlace : .discard,
            resumeRecord: continueAt != nil ? output.map(resumeRecordPath(for:)) : nil,
            maximumFileSize: maxFilesize.flatMap(curlSize))
        let display = progress ? ProgressDisplay() : nil
        if let display {
            if upload != nil || body != nil { request.uploadProgress { display.update("upload", $0) } }
            request.downloadProgress { display.update("download", $0) }
        }
        if verbose {
            request.onHTTPResponse { [request] response in
                var lines: [String] = []
                if let sent = request.httpRequest {
                    lines.append("> \(sent.method.rawValue) \(sent.path ?? "/") HTTP/1.1")
                    lines.append("> Host: \(sent.authority ?? "")")
                    for field in sent.headerFields { lines.append("> \(field.name.rawName): \(field.value)") }
                    lines.append(">")
                }
                lines.append("< HTTP/1.1 \(response.status.code) \(response.status.reasonPhrase)")
                for field in response.headerFields { lines.append("< \(field.name.rawName): \(field.value)") }
                lines.append("<")
                printError(lines.joined(separator: "\n"))
            }
        }
        let response = request.waitForResponse()
        display?.finish()
        if verbose, let metrics = response.metrics { printError(describe(metrics, proxies: configuration.proxy)) }
        switch response.result {
        case .success:
            return .success
        case .failure(let error):
            if let deferral = error.offlineQueueDeferral, case .requestRetryFailed(_, let original) = error {
                return fail(.deferred, "\(original); \(deferral)")
            }
            if case .requestRetryFailed(let queueError as OfflineQueueError, let original) = error {
                return fail(ExitStatus(queueError), "\(original); not queued: \(queueError)")
            }
            let status = ExitStatus(error)
            if case .responseValidationFailed(.unacceptableStatusCode(let code)) = error {
                let reason = response.response?.status.reasonPhrase ?? ""
                return fail(status, "HTTP \(code) \(reason) from \(url)" + (output != nil ? " (no output written)" : ""))
            }
            return fail(status, error.description)
        }
    }

    /// `-v`'s summary; `proxies` says which proxy the final hop went through and how.
    private func describe(_ metrics: TransferMetrics, proxies: ProxySettings) -> String {
        func ms(_ duration: Duration?) -> String {
            guard let duration else { return "-" }
            let (s, a) = duration.components
            let micros = s * 1_000_000 + a / 1_000_000_000_000
            let fraction = String(micros % 1000)
            return "\(micros / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction) ms"
        }
        var text = "* remote \(metrics.remoteAddress ?? "-")\(metrics.reusedConnection ? " (reused connection)" : "")"
        if let last = URL(string: metrics.redirects.last ?? url), let scheme = last.scheme?.lowercased(), let host = last.host(),
            let proxy = proxies.proxy(forScheme: scheme, host: host)
        {
            text += "\n* via proxy \(proxy.displayURL)\(scheme == "https" || proxy.tunnelsHTTP ? ", CONNECT tunnel" : ", absolute form")"
        }
        if let tls = metrics.tls {
            text +=
                "\n* TLS \(tls.version), \(tls.cipherSuite), session \(tls.resumed ? "resumed" : "new"), handshake \(ms(metrics.tlsHandshake))"
            if let leaf = tls.peerCertificates.first.map(Certificate.init(der:)) {
                let names = leaf.names
                text += "\n* certificate subject: \(names.subject)"
                text += "\n* certificate issuer: \(names.issuer)"
                text += "\n* public key pin: \(leaf.publicKeyPin ?? "-")"
            }
        }
        for hop in metrics.redirects { text += "\n* redirected to \(hop)" }
        text +=
            "\n* dns \(ms(metrics.nameLookup)), connect \(ms(metrics.connect)), first byte \(ms(metrics.timeToFirstByte)), total \(ms(metrics.total))"
        text +=
            "\n* sent \(metrics.requestBytesSent) bytes, received \(metrics.responseBytesReceived) bytes (body \(metrics.responseBodyBytes) on the wire, \(metrics.decodedBodyBytes) decoded)"
        return text
    }

    private func fail(_ status: ExitStatus, _ message: String) -> ExitStatus {
        printError("fire-agent: \(message)")
        return status
    }
}

/// The form `-F` arguments describe: `name=value`, `name=@path[;type=…][;filename=…]`.
func multipartForm(_ fields: [String]) -> Result<MultipartFormData, ReadFileError> {
    let form = MultipartFormData()
    for field in fields {
        guard let equals = field.firstIndex(of: "="), equals != field.startIndex else {
            return .failure(ReadFileError("invalid form field \(field.debugDescription): expected name=value or name=@file"))
        }
        let name = String(field[..<equals])
        let value = field[field.index(after: equals)...]
        guard value.hasPrefix("@") else {
            form.append(Data(value.utf8), withName: name)
            continue
        }
        let parts = value.dropFirst().split(separator: ";", omittingEmptySubsequences: false)
        let path = String(parts.first ?? "")
        var mimeType: String?
        var fileName: String?
        for parameter in parts.dropFirst() {
            if parameter.hasPrefix("type=") {
                mimeType = String(parameter.dropFirst(5))
            } else if parameter.hasPrefix("filename=") {
                fileName = String(parameter.dropFirst(9))
            } else {
                return .failure(ReadFileError("unknown form parameter \(String(parameter).debugDescription) in \(field.debugDescription)"))
            }
        }
        guard !path.isEmpty else { return .failure(ReadFileError("no file after @ in \(field.debugDescription)")) }
        let url = URL(filePath: path)
        form.append(
            url, withName: name, fileName: fileName ?? url.lastPathComponent,
            mimeType: mimeType ?? MIMEType.forPathExtension(url.pathExtension))
    }
    return .success(form)
}

/// One evaluator for whatever host the command line names (and the hosts it redirects to).
final class EveryHostTrustManager: ServerTrustManager, @unchecked Sendable {
    private let evaluator: any ServerTrustEvaluating

    init(evaluator: any ServerTrustEvaluating) {
        self.evaluator = evaluator
        super.init(evaluators: [:])
    }

    override func serverTrustEvaluator(forHost host: String) throws -> (any ServerTrustEvaluating)? { evaluator }
}

/// Reads a whole file up to `limit` bytes.
func readFile(_ path: String, limit: Int) -> Result<Data, ReadFileError> {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return .failure(ReadFileError("cannot open \(path): \(String(cString: strerror(errno)))")) }
    defer { close(fd) }
    var data = Data()
    var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n == 0 { return .success(data) }
        if n < 0 {
            if errno == EINTR { continue }
            return .failure(ReadFileError("cannot read \(path): \(String(cString: strerror(errno)))"))
        }
        guard data.count + n <= limit else {
            return .failure(ReadFileError("\(path) is larger than the request body limit of \(limit) bytes (--max-body)"))
        }
        data.append(contentsOf: buffer[0..<n])
    }
}

struct ReadFileError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}

/// Writes `text` and a newline to stderr, with control characters (which a peer can put in a
/// header, a reason phrase or a certificate name) escaped.
func printError(_ text: String) {
    let line = text.escapingControlCharacters() + "\n"
    _ = line.withCString { write(STDERR_FILENO, $0, strlen($0)) }
}

/// `text` without leading and trailing spaces and tabs.
func trimmed(_ text: Substring) -> String {
    var slice = text
    while let first = slice.first, first == " " || first == "\t" { slice = slice.dropFirst() }
    while let last = slice.last, last == " " || last == "\t" { slice = slice.dropLast() }
    return String(slice)
}

extension DownloadRequest {
    /// Blocks the calling thread until the request finishes (a CLI's main thread, never the
    /// session's queues). The response comes on the root queue, after the progress handlers
    /// queued there before it (the final 100 % line is printed before the command ends).
    func waitForResponse() -> DownloadResponse<URL?, TinyFireError> {
        let done = DispatchSemaphore(value: 0)
        let box = Mutex<DownloadResponse<URL?, TinyFireError>?>(nil)
        response { response in
            box.withLock { $0 = response }
            done.signal()
        }
        done.wait()
        return box.withLock { $0 }
            ?? DownloadResponse(request: nil, response: nil, fileURL: nil, metrics: nil, result: .failure(.explicitlyCancelled))
    }
}

/// TLS options shared by the commands that talk to servers.
struct TLSOptions: ParsableArguments {
    @Option(name: .customLong("cacert"), help: "Trust the CA certificates in FILE (PEM or DER) instead of the system bundle.")
    var caCertificate: String?

    @Option(name: .customLong("pin"), help: "Require a public key with this pin, sha256//BASE64 (repeatable; any one matches).")
    var pins: [String] = []

    @Option(name: .customLong("cert"), help: "Client certificate FILE for mutual TLS (with --key).")
    var clientCertificate: String?

    @Option(name: .customLong("key"), help: "Private key FILE of --cert.")
    var clientKey: String?

    @Flag(name: [.customShort("k"), .customLong("insecure")], help: "Do NOT verify the server's certificate (debugging only; warns).")
    var insecure = false

    /// Sets the CA and client certificate in `configuration`; returns the trust manager for
    /// --pin or --insecure (nil for the default evaluation).
    func apply(to configuration: inout SessionConfiguration) -> Result<ServerTrustManager?, TinyFireError> {
        if let caCertificate { configuration.tls.caCertificateFiles = [caCertificate] }
        configuration.tls.clientCertificateFile = clientCertificate
        configuration.tls.clientKeyFile = clientKey
        if insecure {
            printError(
                "fire-agent: WARNING: --insecure: the server's certificate is NOT verified; anyone on the path can read and change this transfer"
            )
            return .success(EveryHostTrustManager(evaluator: DisabledTrustEvaluator()))
        }
        guard !pins.isEmpty else { return .success(nil) }
        do {
            return .success(EveryHostTrustManager(evaluator: try PublicKeysTrustEvaluator(pins: pins)))
        } catch {
            return .failure(error)
        }
    }
}

/// Proxy options, by curl's names and rules.
struct ProxyOptions: ParsableArguments {
    @Option(
        name: [.customShort("x"), .customLong("proxy")],
        help: "Use this proxy: [http|https://][USER:PASSWORD@]HOST[:PORT] (default port 1080; '' disables the environment's).")
    var proxy: String?

    @Option(name: [.customShort("U"), .customLong("proxy-user")], help: "USER:PASSWORD for the proxy's Basic authentication.")
    var proxyUser: String?

    @Option(name: .customLong("noproxy"), help: "Hosts that go direct, comma-separated ('*': all; overrides no_proxy).")
    var noProxy: String?

    @Option(name: .customLong("proxy-cacert"), help: "Trust the CA certificates in FILE for an https:// proxy's own certificate.")
    var proxyCACertificate: String?

    @Flag(name: [.customShort("p"), .customLong("proxytunnel")], help: "Tunnel http:// URLs through the proxy with CONNECT too.")
    var proxyTunnel = false

    /// The proxy settings: `-x`, else the environment (`http_proxy`, `https_proxy`,
    /// `all_proxy`, `no_proxy`, as curl reads them); then `--noproxy`, `-U`, `--proxy-cacert`
    /// and `-p` applied on top.
    /// - Parameter lookup: reads an environment variable.
    /// - Throws: `TinyFireError.invalidProxy` naming the option or variable that is malformed.
    func settings(environment lookup: (String) -> String? = ProxySettings.processEnvironment) throws(TinyFireError)
        -> ProxySettings
    {
        var settings: ProxySettings
        if let proxy {
            if proxy.isEmpty {
                settings = .direct
            } else {
                do {
                    settings = ProxySettings(all: try Proxy(url: proxy))
                } catch {
                    throw .invalidProxy(reason: "-x: \(error.proxyReasonText)")
                }
            }
            // curl keeps honouring no_proxy with -x.
            let environmentList = lookup("no_proxy").flatMap { $0.isEmpty ? nil : $0 } ?? lookup("NO_PROXY")
            if let environmentList, !environmentList.isEmpty { settings.noProxy = NoProxyList(parsing: environmentList) }
        } else {
            settings = try ProxySettings.environment(lookup)
        }
        if let noProxy { settings.noProxy = NoProxyList(parsing: noProxy) }
        var credentials: ProxyCredentials?
        if let proxyUser {
            let colon = proxyUser.firstIndex(of: ":")
            credentials = ProxyCredentials(
                user: String(proxyUser[..<(colon ?? proxyUser.endIndex)]),
                password: colon.map { String(proxyUser[proxyUser.index(after: $0)...]) } ?? "")
        }
        func adjust(_ proxy: Proxy?) -> Proxy? {
            guard var proxy else { return nil }
            if let credentials { proxy.credentials = credentials }
            if let proxyCACertificate { proxy.tls.caCertificateFiles = [proxyCACertificate] }
            if proxyTunnel { proxy.tunnelsHTTP = true }
            return proxy
        }
        settings.http = adjust(settings.http)
        settings.https = adjust(settings.https)
        return settings
    }
}

/// The hidden file beside `-C -`'s output that holds the validator (ETag, else Last-Modified)
/// of the bytes in it, `.NAME.fire-agent-resume`; removed when the download completes.
func resumeRecordPath(for output: String) -> String {
    let slash = output.lastIndex(of: "/")
    let directory = slash.map { String(output[...$0]) } ?? ""
    let name = slash.map { String(output[output.index(after: $0)...]) } ?? output
    return directory + "." + name + ".fire-agent-resume"
}

/// A size as curl's options take it: bytes, or a number with k, M or G (powers of 1024; either
/// case). Nil for anything else, 0, or more than 2^62.
func curlSize(_ text: String) -> UInt64? {
    var digits = Substring(text)
    var scale: UInt64 = 1
    switch digits.last {
    case "k", "K": scale = 1 << 10
    case "m", "M": scale = 1 << 20
    case "g", "G": scale = 1 << 30
    default: break
    }
    if scale > 1 { digits = digits.dropLast() }
    guard let value = UInt64(digits), value > 0, value <= (1 << 62) / scale else { return nil }
    return value * scale
}
