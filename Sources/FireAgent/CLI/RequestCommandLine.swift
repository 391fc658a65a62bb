import CTinyFireSystem
import HTTPTypes
import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `fire-agent request URL`: one HTTP transfer, curl style, on the core's engine. The body goes
/// to standard output, or with `-o` to a file that appears only once the body is complete and
/// the status 2xx; exit 0 only for a complete 2xx response, else curl's number for the same
/// failure (docs/CLI.md).
///
/// Memory: the engine's read buffer (128 KiB), a `-d` body (at most `--max-body`, 16 MiB by
/// default), the form's headers; files (`-T`, `-F name=@FILE`, `-o`) are streamed.
extension AgentCommandLine {
    /// The largest `-d @FILE` body read unless `--max-body` says otherwise: 16 MiB.
    static let defaultMaxRequestBody = 16 << 20

    static let requestCommand = TransferOptions.adding(
        to: Command(
            name: "request", usage: "request [<options>] <url>",
            options: [
                "--method", "--header", "--data", "--output", "--timeout", "--connect-timeout", "--idle-timeout", "--speed-limit",
                "--speed-time", "--limit-rate", "--max-filesize", "--max-redirs", "--max-body", "--upload-file", "--form",
                "--continue-at", "--wait-for-network", "--defer-to",
            ],
            flags: ["--include", "--verbose", "--progress"], positionals: 1, repeated: ["--header", "--form"],
            requiredPositionals: [("url", "The URL (http:// or https://).")],
            integers: ["--speed-limit", "--max-redirs", "--max-body"],
            seconds: ["--timeout", "--connect-timeout", "--idle-timeout", "--speed-time", "--wait-for-network"],
            aliases: [
                "-X": "--method", "-H": "--header", "-d": "--data", "-o": "--output", "-i": "--include", "-v": "--verbose",
                "-T": "--upload-file", "-F": "--form", "-C": "--continue-at", "-#": "--progress",
            ],
            help: [
                "--method": "Request method (default GET, or POST with -d).", "--header": "Extra header 'Name: value' (repeatable).",
                "--data": "Request body; @FILE reads it from a file.", "--output": "Write the body to FILE instead of stdout.",
                "--timeout": "Total time allowed, in seconds (curl's --max-time).",
                "--connect-timeout": "Time allowed for DNS plus connect, in seconds (default 30).",
                "--idle-timeout": "Time allowed without any byte moving, in seconds (default 60).",
                "--speed-limit": "Abort when slower than this many bytes/s for --speed-time seconds.",
                "--speed-time": "Window for --speed-limit, in seconds (default 30).",
                "--limit-rate": "Read at most this many bytes/s (suffix k, M or G for KiB, MiB, GiB, as curl).",
                "--max-filesize": "Refuse a download that would exceed this size (exit 63; suffix k, M or G).",
                "--max-redirs": "Redirects to follow at most (default 10; 0 disables).",
                "--max-body": "Largest request body read from -d @FILE, in bytes (default 16 MiB).",
                "--upload-file": "Send FILE as the body, streamed (PUT unless -X says otherwise).",
                "--form":
                    "Multipart form field (repeatable): name=value, or name=@FILE[;type=MIME][;filename=NAME] for a file part (POST).",
                "--continue-at": "'-' continues a partial -o FILE from its size (a Range request, as curl; a 200 rewrites the file).",
                "--wait-for-network":
                    "When the request fails for lack of network, wait up to this many seconds for a route to the host, then try again.",
                "--defer-to":
                    "When the request fails for lack of network, queue it durably in the offline queue DIR instead of failing (exit 75).",
            ]))

    static func request(_ arguments: Parsed) -> Int32 {
        for name in ["--limit-rate", "--max-filesize"] {
            if let value = arguments.options[name], curlSize(value) == nil {
                return usageError("\(name) takes a size in bytes (suffix k, M or G), not \(value)", requestCommand)
            }
        }
        func seconds(_ name: String) -> Double? { arguments.options[name].flatMap { Double($0) } }
        return request(
            RequestOptions(
                url: arguments.positionals.first ?? "", method: arguments.options["--method"], headers: arguments.lists["--header"] ?? [],
                data: arguments.options["--data"], output: arguments.options["--output"],
                include: arguments.flags.contains("--include"), verbose: arguments.flags.contains("--verbose"),
                timeout: seconds("--timeout"), connectTimeout: seconds("--connect-timeout"), idleTimeout: seconds("--idle-timeout"),
                speedLimit: arguments.options["--speed-limit"].flatMap { Int($0) }, speedTime: seconds("--speed-time") ?? 30,
                limitRate: arguments.options["--limit-rate"], maxFilesize: arguments.options["--max-filesize"],
                maxRedirects: arguments.options["--max-redirs"].flatMap { Int($0) } ?? 10,
                maxRequestBody: arguments.options["--max-body"].flatMap { Int($0) } ?? defaultMaxRequestBody,
                uploadFile: arguments.options["--upload-file"], form: arguments.lists["--form"] ?? [],
                continueAt: arguments.options["--continue-at"], progress: arguments.flags.contains("--progress"),
                waitForNetwork: seconds("--wait-for-network"), deferTo: arguments.options["--defer-to"],
                transfer: TransferOptions(arguments)))
    }

    /// `fire-agent request`: see the extension's notes.
    /// - Parameter options: the command line.
    /// - Returns: the exit status.
    package static func request(_ options: RequestOptions) -> Int32 {
        tinyfire_ignore_sigpipe()
        return RequestRun(options).perform()
    }

    /// A size as curl's options take it: bytes, or a number with k, M or G (powers of 1024;
    /// either case). Nil for anything else, 0, or more than 2^62.
    package static func curlSize(_ text: String) -> UInt64? {
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

    /// The hidden file beside `-C -`'s output that holds the validator (ETag, else
    /// Last-Modified) of the bytes in it, `.NAME.fire-agent-resume`; removed when the download
    /// completes.
    package static func resumeRecordPath(for output: String) -> String {
        let slash = output.utf8.lastIndex(of: UInt8(ascii: "/"))
        let directory = slash.map { String(output[...$0]) } ?? ""
        let name = slash.map { String(output[output.index(after: $0)...]) } ?? output
        return directory + "." + name + ".fire-agent-resume"
    }
}

/// `fire-agent request`'s options, as given (the host's swift-argument-parser front end builds
/// them; the core's parser does for the Embedded build).
package struct RequestOptions: Sendable {
    /// The URL (http:// or https://).
    package var url: String
    /// `-X`: the method (default GET, or POST with a body, PUT with `-T`).
    package var method: String?
    /// `-H`: extra `Name: value` lines.
    package var headers: [String]
    /// `-d`: the body, or `@FILE` read whole (up to `maxRequestBody`).
    package var data: String?
    /// `-o`: the file the body goes to (`-` or nil: standard output).
    package var output: String?
    /// `-i`: the response head before the body.
    package var include: Bool
    /// `-v`: heads and timings on standard error.
    package var verbose: Bool
    /// `--timeout`: seconds for the whole transfer (nil or 0: no limit).
    package var timeout: Double?
    /// `--connect-timeout`: seconds for DNS plus connect (default 30).
    package var connectTimeout: Double?
    /// `--idle-timeout`: seconds without a byte moving (default 60).
    package var idleTimeout: Double?
    /// `--speed-limit`: bytes per second below which the transfer stops after `speedTime`.
    package var speedLimit: Int?
    /// `--speed-time`: the window of `speedLimit`, seconds.
    package var speedTime: Double
    /// `--limit-rate`: the read rate, curl's size form.
    package var limitRate: String?
    /// `--max-filesize`: the largest body, curl's size form (exit 63).
    package var maxFilesize: String?
    /// `--max-redirs`: redirects followed at most.
    package var maxRedirects: Int
    /// `--max-body`: the largest `-d @FILE`, bytes.
    package var maxRequestBody: Int
    /// `-T`: a file sent as the body, streamed.
    package var uploadFile: String?
    /// `-F`: multipart form fields.
    package var form: [String]
    /// `-C`: `-` continues the `-o` file from its size.
    package var continueAt: String?
    /// `-#`: progress on standard error.
    package var progress: Bool
    /// `--wait-for-network`: seconds to wait for a route when the network is missing.
    package var waitForNetwork: Double?
    /// `--defer-to`: the offline queue a request goes to when the network is missing.
    package var deferTo: String?
    /// TLS and proxy.
    package var transfer: TransferOptions

    /// Every option, by its long name.
    package init(
        url: String, method: String?, headers: [String], data: String?, output: String?, include: Bool, verbose: Bool,
        timeout: Double?, connectTimeout: Double?, idleTimeout: Double?, speedLimit: Int?, speedTime: Double, limitRate: String?,
        maxFilesize: String?, maxRedirects: Int, maxRequestBody: Int, uploadFile: String?, form: [String], continueAt: String?,
        progress: Bool, waitForNetwork: Double?, deferTo: String?, transfer: TransferOptions
    ) {
        self.url = url
        self.method = method
        self.headers = headers
        self.data = data
        self.output = output
        self.include = include
        self.verbose = verbose
        self.timeout = timeout
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
        self.speedLimit = speedLimit
        self.speedTime = speedTime
        self.limitRate = limitRate
        self.maxFilesize = maxFilesize
        self.maxRedirects = maxRedirects
        self.maxRequestBody = maxRequestBody
        self.uploadFile = uploadFile
        self.form = form
        self.continueAt = continueAt
        self.progress = progress
        self.waitForNetwork = waitForNetwork
        self.deferTo = deferTo
        self.transfer = transfer
    }
}

/// One run of `fire-agent request`: the request built once, then attempts until one ends it.
private struct RequestRun {
    typealias Exit = AgentCommandLine.Exit
    let options: RequestOptions

    init(_ options: RequestOptions) {
        self.options = options
    }

    /// The request as every attempt sends it (a resumed one adds `Range`).
    private struct Built {
        var url: AbsoluteURL
        var method: HTTPMethod
        var headers: HTTPHeaders
        var body: [UInt8]?
        var segments: [BodySegment]?
    }

    func perform() -> Int32 {
        // The engine: timeouts, limits, TLS, the proxy.
        let trust: (@Sendable (TrustFacts) -> String?)?
        switch options.transfer.trust() {
        case .success(let judge): trust = judge
        case .failure(let error): return AgentCommandLine.fail(error)
        }
        let proxies: ProxySettings
        switch options.transfer.proxySettings() {
        case .success(let settings): proxies = settings
        case .failure(let error): return AgentCommandLine.fail(error)
        }
        var lowSpeed: LowSpeedLimit?
        if let speedLimit = options.speedLimit, let window = Duration.timeInterval(options.speedTime) {
            lowSpeed = LowSpeedLimit(bytesPerSecond: speedLimit, window: window)
        }
        let settings = AgentCommandLine.commandEngineSettings(
            tls: options.transfer.tls, proxy: proxies, totalTimeout: options.timeout.flatMap { Duration.timeInterval($0) },
            connectTimeout: options.connectTimeout.flatMap { Duration.timeInterval($0) } ?? .seconds(30),
            idleTimeout: options.idleTimeout.flatMap { Duration.timeInterval($0) } ?? .seconds(60), lowSpeedLimit: lowSpeed,
            maxReceiveBytesPerSecond: options.limitRate.flatMap { AgentCommandLine.curlSize($0) }.map { Int(clamping: $0) },
            maxRedirects: options.maxRedirects)

        let built: Built
        switch build() {
        case .success(let request): built = request
        case .failure(let error): return AgentCommandLine.fail(error)
        }

        // -C -: continue the output from its size, with the validator an earlier run recorded.
        var partial: PartialBody?
        if let continueAt = options.continueAt {
            guard continueAt == "-" else { return failed(Exit.malformedURL, "-C takes '-' (continue from the size of the -o file)") }
            guard let output = options.output, output != "-" else { return failed(Exit.malformedURL, "-C - needs -o FILE to continue") }
            var info = stat()
            if stat(output, &info) == 0 && (info.st_mode & mode_t(S_IFMT)) == mode_t(S_IFREG) && info.st_size > 0 {
                // Continued only with the validator an earlier -C - run recorded for these
                // bytes: without it, a file changed on the server would be spliced.
                if let record = ImageResumeRecord.read(from: AgentCommandLine.resumeRecordPath(for: output)),
                    record.entityTag != nil || record.lastModified != nil
                {
                    partial = PartialBody(
                        path: output, bytes: UInt64(info.st_size), entityTag: record.entityTag, lastModified: record.lastModified,
                        totalLength: record.totalLength)
                } else {
                    AgentCommandLine.printError(
                        "fire-agent: no validator recorded for the bytes in \(output): downloading it from the start")
                }
            }
        }

        // Where the body goes.
        let output: RequestOutput
        var outputFD: Int32 = -1
        if let path = options.output, path != "-" {
            var info = stat()
            if stat(path, &info) == 0 && (info.st_mode & mode_t(S_IFMT)) != mode_t(S_IFREG) {
                // /dev/null, a FIFO, a terminal: write straight through.
                outputFD = open(path, O_WRONLY | O_CLOEXEC)
                guard outputFD >= 0 else { return failed(Exit.writeError, "cannot open \(path): \(errnoMessage(errno))") }
                output = .descriptor(outputFD)
            } else if options.continueAt != nil {
                output = .inPlace(path: path, record: AgentCommandLine.resumeRecordPath(for: path))
            } else {
                output = .file(path: path)
            }
        } else {
            output = .descriptor(STDOUT_FILENO)
        }
        defer { if outputFD >= 0 { close(outputFD) } }

        // --defer-to: the queue is opened first, so a queue that cannot be used is said at once.
        var queue: DeliveryQueue?
        if let directory = options.deferTo {
            let limits = OfflineQueueStore.Limits(
                maxRecords: AgentCommandLine.defaultQueueRecords, maxBytes: AgentCommandLine.defaultQueueBytes, dropOldest: false,
                segmentBytes: OfflineQueueStore.defaultSegmentBytes, cursorSyncInterval: .seconds(1))
            do throws(OfflineQueueError) {
                queue = try AgentCommandLine.openQueueOrThrow(directory, limits: limits, sender: QueueOpenedToAdd())
            } catch {
                return failed(Exit.code(error), "--defer-to: \(error.description)")
            }
        }
        defer { queue?.close() }
        var request = built
        if queue != nil && request.headers.value(for: DeliveryQueue.idempotencyKeyHeader) == nil {
            // Every attempt and the queued copy carry the same key.
            request.headers.add(name: DeliveryQueue.idempotencyKeyHeader, value: "\"\(newIdempotencyKey())\"")
        }

        let engine = Engine(settings: settings, name: "fire-agent-io")
        defer { engine.shutdown() }
        let plan = RequestAttempt.Plan(
            output: output, includeHead: options.include, verbose: options.verbose,
            maximumFileSize: options.maxFilesize.flatMap { AgentCommandLine.curlSize($0) },
            progress: options.progress ? ProgressDisplay() : nil, hasBody: request.body != nil || request.segments != nil,
            trust: trust, url: options.url)

        var restarts = 0
        var waits = 0
        while true {
            let (spec, offset) = attemptSpec(request, partial: &partial, output: output)
            let attempt = RequestAttempt(plan: plan, partial: partial, rangeOffset: offset, method: request.method)
            engine.start(spec, owner: attempt)
            let ending = attempt.ended.wait { $0 }
            partial = ending.partial
            if ending.restart && restarts < 3 {
                restarts += 1
                continue
            }
            if case .failure(.failed(let error)) = ending.result, error.isNetworkUnavailable {
                if let wait = options.waitForNetwork,
                    waitForRoute(url: request.url, proxies: proxies, seconds: wait, first: waits == 0)
                {
                    waits += 1
                    continue
                }
                if let queue {
                    plan.progress?.finish()
                    return deferred(request, into: queue, after: error.description)
                }
            }
            plan.progress?.finish()
            if options.verbose { AgentCommandLine.printError(describe(ending.report, proxies: proxies)) }
            return finish(ending, output: output)
        }
    }

    /// What an ended attempt comes to: the file moved into place and exit 0, or the failure.
    private func finish(_ ending: RequestAttempt.Ending, output: RequestOutput) -> Int32 {
        switch ending.result {
        case .success:
            if let code = ending.rejectedStatus {
                let reason = ending.response?.status.reasonPhrase ?? ""
                return failed(
                    Exit.httpError, "HTTP \(code) \(reason) from \(options.url)" + (options.output != nil ? " (no output written)" : ""))
            }
            if let staged = ending.staged {
                switch output {
                case .file(let destination):
                    if let problem = commitOutput(staged, to: destination) { return failed(Exit.writeError, problem) }
                case .inPlace(let destination, let record):
                    _ = commitOutput(staged, to: destination)
                    unlink(record)
                case .descriptor:
                    break
                }
            } else if case .inPlace(_, let record) = output {
                unlink(record)
            }
            return Exit.success
        case .failure(let failure):
            if case .refusedByOwner = failure, let refusal = ending.refusal { return failed(Exit.peerFailedVerification, refusal) }
            return failed(Exit.code(failure), Self.text(failure))
        }
    }

    /// The library's words for a transfer failure (its `TinyFireError` descriptions).
    static func text(_ failure: TransferFailure) -> String {
        switch failure {
        case .invalidURL(let url, let reason): "invalid URL \(quoted(url)): \(reason)"
        case .invalidRequest(let reason): "invalid request: \(reason)"
        case .invalidTLSConfiguration(let reason): "invalid TLS configuration: \(reason)"
        case .explicitlyCancelled: "request explicitly cancelled"
        case .engineShutDown: "session deinitialized while the request was in flight"
        case .resourceExhausted(let what): "out of resources: \(what)"
        case .failed(let error): error.description
        case .refusedByOwner: "the server's certificate was refused"
        }
    }

    /// The request from the options: URL, method, headers, and the body (`-d`, `-T` or `-F`).
    private func build() -> Result<Built, TransferOptionError> {
        guard let url = AbsoluteURL(options.url) else {
            return .failure(TransferOptionError("invalid URL \(quoted(options.url)): not an absolute URL", exit: Exit.malformedURL))
        }
        var headers = HTTPHeaders()
        for line in options.headers {
            guard let colon = line.firstIndex(of: ":") else {
                return .failure(TransferOptionError("invalid header \(quoted(line)): expected 'Name: value'", exit: Exit.malformedURL))
            }
            let name = line[..<colon].trimmingHTTPWhitespace()
            guard HTTPField.Name(name) != nil else {
                return .failure(TransferOptionError("invalid header name \(quoted(name))", exit: Exit.malformedURL))
            }
            headers.append(name: name, value: line[line.index(after: colon)...].trimmingHTTPWhitespace())
        }
        var body: [UInt8]?
        if let data = options.data {
            if data.hasPrefix("@") {
                switch readBody(String(data.dropFirst()), limit: options.maxRequestBody) {
                case .success(let bytes): body = bytes
                case .failure(let error): return .failure(error)
                }
            } else {
                body = Array(data.utf8)
            }
            if headers.value(for: "Content-Type") == nil { headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded") }
        }
        var given = 0
        for present in [options.uploadFile != nil, body != nil, !options.form.isEmpty] where present { given += 1 }
        if given > 1 {
            return .failure(TransferOptionError("use only one of -d/--data, -T/--upload-file and -F/--form", exit: Exit.malformedURL))
        }
        var segments: [BodySegment]?
        if let path = options.uploadFile {
            var info = stat()
            guard stat(path, &info) == 0 else {
                return .failure(
                    TransferOptionError("cannot create the upload body: cannot read \(path): \(errnoMessage(errno))", exit: Exit.readError))
            }
            guard (info.st_mode & mode_t(S_IFMT)) == mode_t(S_IFREG) else {
                return .failure(TransferOptionError("cannot create the upload body: \(path) is not a regular file", exit: Exit.readError))
            }
            let size = UInt64(info.st_size)
            segments = [.file(path: path, offset: 0, length: size, fileSize: size)]
        }
        if !options.form.isEmpty {
            switch MultipartForm.parse(options.form) {
            case .success(let form):
                segments = form.segments
                if headers.value(for: "Content-Type") == nil { headers.add(name: "Content-Type", value: form.contentType) }
            case .failure(let error):
                return .failure(error)
            }
        }
        let method = options.method ?? (options.uploadFile != nil ? "PUT" : body == nil && options.form.isEmpty ? "GET" : "POST")
        return .success(Built(url: url, method: HTTPMethod(rawValue: method), headers: headers, body: body, segments: segments))
    }

    /// A whole file up to `limit` bytes (`-d @FILE`).
    private func readBody(_ path: String, limit: Int) -> Result<[UInt8], TransferOptionError> {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(TransferOptionError("cannot open \(path): \(errnoMessage(errno))", exit: Exit.readError)) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n == 0 { return .success(bytes) }
            if n < 0 {
                if errno == EINTR { continue }
                return .failure(TransferOptionError("cannot read \(path): \(errnoMessage(errno))", exit: Exit.readError))
            }
            guard bytes.count + n <= limit else {
                return .failure(
                    TransferOptionError(
                        "\(path) is larger than the request body limit of \(limit) bytes (--max-body)", exit: Exit.readError))
            }
            bytes.append(contentsOf: buffer[0..<n])
        }
    }

    /// One attempt's request: `Range` and `If-Range` when the partial output can be continued
    /// (its length what was recorded, a validator known), else from the start.
    private func attemptSpec(_ request: Built, partial: inout PartialBody?, output: RequestOutput) -> (RequestSpec, UInt64?) {
        var spec = RequestSpec(
            url: request.url, method: request.method, headers: request.headers, body: request.body.map { ByteArrayBody($0) })
        if let segments = request.segments { spec.bodySource = .segments(segments) }
        guard let known = partial, known.bytes > 0 else { return (spec, nil) }
        guard let validator = known.entityTag ?? known.lastModified else {
            // Nothing proves the bytes are of the version the server has now: start over (an
            // in-place file is emptied only once a new body arrives).
            if !output.keepsPartial { unlink(known.path) }
            partial = nil
            return (spec, nil)
        }
        var info = stat()
        guard stat(known.path, &info) == 0, UInt64(info.st_size) == known.bytes else {
            // Missing, or not the length recorded: nothing in it can be trusted.
            unlink(known.path)
            partial = nil
            return (spec, nil)
        }
        var offset = known.bytes
        // Complete already: ask for the last byte again, to get an ordinary 206.
        if let total = known.totalLength, offset >= total, total > 0 { offset = total - 1 }
        spec.headers.update(name: "Range", value: "bytes=\(offset)-")
        spec.headers.update(name: "If-Range", value: validator)
        // Byte offsets count the file's bytes, not a compressed encoding of them.
        spec.headers.update(name: "Accept-Encoding", value: "identity")
        return (spec, offset)
    }

    /// `--wait-for-network`: waits up to `seconds` for the route to the host (or its proxy) to
    /// come back. The first time, a route that is there already retries at once (the network
    /// came back between the failure and now); otherwise only a change to reachable does, so a
    /// host whose route exists but does not answer is not retried in a loop.
    /// - Returns: whether to try again.
    private func waitForRoute(url: AbsoluteURL, proxies: ProxySettings, seconds: Double, first: Bool) -> Bool {
        let routeHost = url.host.map { proxies.routeHost(forScheme: url.scheme.lowercased(), host: $0) }
        let judge: RouteJudge
        do throws(NetworkReachabilityError) {
            judge = try RouteJudge(host: routeHost, networkNamespace: nil)
        } catch {
            AgentCommandLine.printError("fire-agent: --wait-for-network: \(error.description)")
            return false
        }
        judge.resolveHost()
        let (current, _) = judge.evaluate {}
        if first, current.isReachable { return true }
        var lastSeen = current
        let deadline = Instant.now() + (Duration.timeInterval(seconds) ?? .zero)
        return AgentCommandLine.watchRoutes(judge, until: deadline) { status in
            if status.isReachable && status != lastSeen { return true }
            lastSeen = status
            return false
        }
    }

    /// `--defer-to`: the request queued instead of failing; exit 75 once it is durable.
    private func deferred(_ request: Built, into queue: DeliveryQueue, after original: String) -> Int32 {
        var body: [BodySegment] = request.segments ?? []
        if let bytes = request.body, !bytes.isEmpty { body = [.memory(ByteArrayBody(bytes))] }
        do throws(OfflineQueueError) {
            let (entry, payload) = try queue.enqueue(
                QueueSubmission(method: request.method.rawValue, url: options.url, headers: request.headers, body: body))
            return failed(
                Exit.deferred,
                "\(original); deferred to the offline queue in \(options.deferTo ?? "") as record \(entry.sequence) (Idempotency-Key \(payload.idempotencyKey))"
            )
        } catch {
            return failed(Exit.code(error), "\(original); not queued: \(error.description)")
        }
    }

    /// `-v`'s summary; `proxies` says which proxy the final hop went through and how.
    private func describe(_ report: TransferReport, proxies: ProxySettings) -> String {
        func ms(_ duration: Duration?) -> String {
            guard let duration else { return "-" }
            let (s, a) = duration.components
            let micros = s * 1_000_000 + a / 1_000_000_000_000
            let fraction = String(micros % 1000)
            return "\(micros / 1000).\(String(repeating: "0", count: 3 - fraction.utf8.count))\(fraction) ms"
        }
        var text = "* remote \(report.remoteAddress ?? "-")\(report.reusedConnection ? " (reused connection)" : "")"
        if let last = AbsoluteURL(report.redirects.last ?? options.url), let host = last.host {
            let scheme = last.scheme.lowercased()
            if let proxy = proxies.proxy(forScheme: scheme, host: host) {
                text +=
                    "\n* via proxy \(proxy.displayURL)\(scheme == "https" || proxy.tunnelsHTTP ? ", CONNECT tunnel" : ", absolute form")"
            }
        }
        if let tls = report.tls {
            text +=
                "\n* TLS \(tls.version), \(tls.cipherSuite), session \(tls.resumed ? "resumed" : "new"), handshake \(ms(report.tlsHandshake))"
            if let leaf = tls.peerCertificates.first {
                let names = leaf.withUnsafeBytes { X509.names(certificate: $0) }
                text += "\n* certificate subject: \(names.subject)"
                text += "\n* certificate issuer: \(names.issuer)"
                let pin = leaf.withUnsafeBytes { X509.spkiSHA256(certificate: $0) }.map { "sha256//" + Base64.encode($0) }
                text += "\n* public key pin: \(pin ?? "-")"
            }
        }
        for hop in report.redirects { text += "\n* redirected to \(hop)" }
        text +=
            "\n* dns \(ms(report.nameLookup)), connect \(ms(report.connect)), first byte \(ms(report.timeToFirstByte)), total \(ms(report.total))"
        text +=
            "\n* sent \(report.requestBytesSent) bytes, received \(report.responseBytesReceived) bytes (body \(report.responseBodyBytes) on the wire, \(report.decodedBodyBytes) decoded)"
        return text
    }

    private func failed(_ status: Int32, _ message: String) -> Int32 {
        AgentCommandLine.printError("fire-agent: \(message)")
        return status
    }
}

/// The sender of a queue opened only to add records (never asked to send).
final class QueueOpenedToAdd: QueueSender {
    func sendQueued(_ request: QueuedSend, completion: @escaping @Sendable (QueueReply) -> Void) {
        completion(.noResponse("this queue was opened to add records only"))
    }
}
