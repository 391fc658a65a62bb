import HTTPTypes
import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `fire-agent queue add` and `queue flush`: the library's offline queue format, filled and
/// delivered on the core (the records `OfflineQueue` writes and reads).
extension AgentCommandLine {
    /// The bounds `queue add` opens a queue with unless told otherwise (the library's
    /// `OfflineQueue.Configuration` defaults): 10,000 records, 64 MiB.
    static let defaultQueueRecords = 10_000
    static let defaultQueueBytes: Int64 = 64 << 20
    /// Bodies up to this size go inside the journal record: 64 KiB (the library's default).
    static let queueInlineBodyLimit = 64 << 10

    static let queueAddCommand = Command(
        name: "queue add",
        usage:
            "queue add --dir <dir> <url> [--method <method>] [--header <header> ...] [--data <data>] [--repeat <repeat>] [--start <start>] [--max-records <max-records>] [--max-bytes <max-bytes>] [--drop-oldest]",
        options: ["--dir", "--method", "--header", "--data", "--repeat", "--start", "--max-records", "--max-bytes"],
        flags: ["--drop-oldest"], positionals: 1, repeated: ["--header"],
        requiredPositionals: [("url", "The URL the request goes to.")], required: ["--dir"],
        integers: ["--repeat", "--start", "--max-records", "--max-bytes"],
        aliases: ["-X": "--method", "-H": "--header", "-d": "--data"],
        help: [
            "--dir": "The queue's directory.", "--method": "Method (default POST with a body, else GET).",
            "--header": "Header 'Name: value' (repeatable).", "--data": "The body; @FILE queues a copy of the file.",
            "--repeat": "Queue this many requests.", "--start": "First value of {n}.", "--max-records": "The queue's record bound.",
            "--max-bytes": "The queue's byte bound.",
        ])

    static let queueFlushCommand = TransferOptions.adding(
        to: Command(
            name: "queue flush", usage: "queue flush [<options>] --dir <dir>", options: ["--dir", "--timeout", "--discard-status"],
            required: ["--dir"], seconds: ["--timeout"],
            help: [
                "--dir": "The queue's directory.", "--timeout": "Time allowed per request, in seconds (default 60).",
                "--discard-status": "Statuses that remove a record without success (e.g. 400,422).",
            ]))

    static func queueAdd(_ arguments: Parsed) -> Int32 {
        queueAdd(
            directory: arguments.options["--dir"] ?? "", url: arguments.positionals.first ?? "", method: arguments.options["--method"],
            headers: arguments.lists["--header"] ?? [], data: arguments.options["--data"],
            count: Int(clamping: Int64(arguments.options["--repeat"] ?? "") ?? 1),
            start: Int(clamping: Int64(arguments.options["--start"] ?? "") ?? 1),
            maxRecords: Int(clamping: Int64(arguments.options["--max-records"] ?? "") ?? Int64(defaultQueueRecords)),
            maxBytes: Int64(arguments.options["--max-bytes"] ?? "") ?? defaultQueueBytes,
            dropOldest: arguments.flags.contains("--drop-oldest"))
    }

    /// `fire-agent queue add`: queues `count` requests (at least one) durably, `{n}` in the URL
    /// and the body replaced by a counter from `start`; prints `queued SEQUENCE KEY` for each
    /// once it is on disk. Exit 0 when all were queued, 3 for a bad URL or header, 26 for an
    /// unreadable `@FILE`, 23 when the queue cannot be opened or written, 63 when it is full.
    /// - Parameters:
    ///   - directory: the queue's directory (created if missing).
    ///   - url: the URL, `{n}` replaced.
    ///   - method: default POST with a body, else GET.
    ///   - headers: `Name: value` lines.
    ///   - data: the body, or `@FILE` for a copy of the file.
    ///   - maxRecords: the queue's record bound.
    ///   - maxBytes: the queue's byte bound.
    ///   - dropOldest: when full, drop the oldest records instead of refusing.
    package static func queueAdd(
        directory: String, url: String, method: String?, headers lines: [String], data: String?, count: Int, start: Int,
        maxRecords: Int, maxBytes: Int64, dropOldest: Bool
    ) -> Int32 {
        var headers = HTTPHeaders()
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else {
                printError("fire-agent: invalid header \(quoted(line)): expected 'Name: value'")
                return Exit.malformedURL
            }
            headers.append(name: line[..<colon].trimmingHTTPWhitespace(), value: line[line.index(after: colon)...].trimmingHTTPWhitespace())
        }
        let inline = data.flatMap { $0.hasPrefix("@") ? nil : $0 }
        let limits = OfflineQueueStore.Limits(
            maxRecords: maxRecords, maxBytes: maxBytes, dropOldest: dropOldest, segmentBytes: OfflineQueueStore.defaultSegmentBytes,
            cursorSyncInterval: .seconds(1))
        guard let queue = openQueue(directory, limits: limits, sender: QueueOpenedToAdd()) else { return Exit.writeError }
        defer { queue.close() }
        var bodyFile: (path: String, size: UInt64)?
        if let data, data.hasPrefix("@") {
            let path = String(data.dropFirst())
            var info = stat()
            var problem: String?
            if stat(path, &info) != 0 {
                problem = errnoMessage(errno)
            } else if (info.st_mode & mode_t(S_IFMT)) != mode_t(S_IFREG) {
                problem = "not a regular file"
            }
            if let problem {
                printError("fire-agent: \(OfflineQueueError.bodyFileUnreadable(path: path, message: problem).description)")
                return Exit.readError
            }
            bodyFile = (path, UInt64(info.st_size))
        }
        let method = method ?? (data == nil ? "GET" : "POST")
        let count = max(1, count)
        for n in start..<(start > Int.max - count ? Int.max : start + count) {
            let target = replacingCounter(in: url, with: n)
            guard let parsed = AbsoluteURL(target), parsed.scheme.lowercased() == "http" || parsed.scheme.lowercased() == "https" else {
                printError("fire-agent: invalid URL \(quoted(target)) (an http:// or https:// URL is queued)")
                return Exit.malformedURL
            }
            var body: [BodySegment] = []
            if let bodyFile {
                body = [.file(path: bodyFile.path, offset: 0, length: bodyFile.size, fileSize: bodyFile.size)]
            } else if let inline, !inline.isEmpty {
                body = [.memory(ByteArrayBody(Array(replacingCounter(in: inline, with: n).utf8)))]
            }
            do throws(OfflineQueueError) {
                let (entry, payload) = try queue.enqueue(QueueSubmission(method: method, url: target, headers: headers, body: body))
                printLine("queued \(entry.sequence) \(payload.idempotencyKey)")
            } catch {
                printError("fire-agent: \(error.description)")
                return Exit.code(error)
            }
        }
        return Exit.success
    }

    static func queueFlush(_ arguments: Parsed) -> Int32 {
        queueFlush(
            directory: arguments.options["--dir"] ?? "", timeout: arguments.options["--timeout"].flatMap { Double($0) } ?? 60,
            discardStatus: arguments.options["--discard-status"], options: TransferOptions(arguments))
    }

    /// `fire-agent queue flush`: sends every queued record now, in order, stopping at the first
    /// that fails; prints `delivered N discarded N remaining N` and the failure on standard
    /// error. Exit 0 when the queue is empty afterwards, 7 when a record could not be
    /// delivered, 23 when the queue cannot be opened (its lock: not while the agent has it).
    /// - Parameters:
    ///   - directory: the queue's directory.
    ///   - timeout: seconds allowed per request (0: no limit).
    ///   - discardStatus: statuses that remove a record without success, comma-separated.
    ///   - options: TLS and proxy.
    package static func queueFlush(directory: String, timeout: Double, discardStatus: String?, options: TransferOptions) -> Int32 {
        let trust: (@Sendable (TrustFacts) -> String?)?
        let proxy: ProxySettings
        switch options.trust() {
        case .success(let judge): trust = judge
        case .failure(let error): return fail(error)
        }
        switch options.proxySettings() {
        case .success(let settings): proxy = settings
        case .failure(let error): return fail(error)
        }
        var disposition: @Sendable (Int) -> QueueDisposition = { (200..<300).contains($0) ? .delivered : .retry }
        if let list = discardStatus {
            var codes: Set<Int> = []
            for part in list.split(separator: ",") {
                if let code = Int(part.trimmingHTTPWhitespace()) { codes.insert(code) }
            }
            let discarded = codes
            disposition = { status in (200..<300).contains(status) ? .delivered : discarded.contains(status) ? .discard : .retry }
        }
        let engine = Engine(settings: commandEngineSettings(tls: options.tls, proxy: proxy, totalTimeout: .timeInterval(timeout)))
        defer { engine.shutdown() }
        let limits = OfflineQueueStore.Limits(
            maxRecords: defaultQueueRecords, maxBytes: defaultQueueBytes, dropOldest: false,
            segmentBytes: OfflineQueueStore.defaultSegmentBytes, cursorSyncInterval: .seconds(1))
        guard
            let queue = openQueue(
                directory, limits: limits, sender: EngineQueueSender(engine: engine, trust: trust),
                disposition: disposition)
        else { return Exit.writeError }
        let outcome = ConditionLocked<Result<QueueFlushOutcome, OfflineQueueError>?>(nil)
        queue.flush { result in outcome.withLock { $0 = result } }
        let result = outcome.wait { $0 }
        queue.close()
        switch result {
        case .success(let flushed):
            printLine("delivered \(flushed.delivered) discarded \(flushed.discarded) remaining \(flushed.remaining)")
            if let failure = flushed.failure { printError("fire-agent: \(failure)") }
            return flushed.remaining > 0 ? Exit.couldNotConnect : Exit.success
        case .failure(let error):
            printError("fire-agent: \(error.description)")
            return Exit.internalError
        }
    }

    /// The queue in `directory`, opened with its lock, or nil once the reason is printed.
    static func openQueue(
        _ directory: String, limits: OfflineQueueStore.Limits, sender: any QueueSender,
        disposition: @escaping @Sendable (Int) -> QueueDisposition = { (200..<300).contains($0) ? .delivered : .retry }
    ) -> DeliveryQueue? {
        do throws(OfflineQueueError) {
            return try openQueueOrThrow(directory, limits: limits, sender: sender, disposition: disposition)
        } catch {
            printError("fire-agent: \(error.description)")
            return nil
        }
    }

    /// The queue in `directory`, opened with its lock (the library's `OfflineQueue` settings:
    /// 64 KiB inline bodies, strict order, no dead letters).
    /// - Throws: `OfflineQueueError` naming the directory and the problem (locked, unusable).
    static func openQueueOrThrow(
        _ directory: String, limits: OfflineQueueStore.Limits, sender: any QueueSender,
        disposition: @escaping @Sendable (Int) -> QueueDisposition = { (200..<300).contains($0) ? .delivered : .retry }
    ) throws(OfflineQueueError) -> DeliveryQueue {
        let store = try OfflineQueueStore(directory: directory, limits: limits, logger: LogOutput.standardError)
        let settings = QueueDeliverySettings(
            backoff: QueueBackoff(), disposition: disposition, judge: nil, deadLetterDirectory: nil, maxConcurrentDeliveries: 1,
            inlineBodyLimit: queueInlineBodyLimit)
        do throws(OfflineQueueError) {
            let queue = try DeliveryQueue(
                store: store, settings: settings, sender: sender, logger: LogOutput.standardError, newKey: newIdempotencyKey,
                onEvent: { _ in })
            _ = store.enforceBoundsAfterOpen()
            return queue
        } catch {
            store.close()
            throw error
        }
    }

    /// What the commands that talk to servers run on: the library's defaults
    /// (`EngineSettings.standard`: connect 30 s, idle 60 s, 10 redirects, gzip and deflate,
    /// 128 KiB read buffer) with the command line's TLS, proxy and limits, and fire-agent's
    /// `User-Agent`. Memory: one 128 KiB read buffer per connection.
    static func commandEngineSettings(
        tls: TLSConfiguration, proxy: ProxySettings, totalTimeout: Duration?, connectTimeout: Duration = .seconds(30),
        idleTimeout: Duration = .seconds(60), lowSpeedLimit: LowSpeedLimit? = nil, maxReceiveBytesPerSecond: Int? = nil,
        maxRedirects: Int = 10
    ) -> EngineSettings {
        var settings = EngineSettings.standard
        settings.defaultFields[.userAgent] = FleetServer.defaultUserAgent
        settings.defaultFields[.acceptEncoding] = "gzip;q=1.0, deflate;q=0.9"
        settings.connectTimeout = connectTimeout
        settings.idleTimeout = idleTimeout
        settings.totalTimeout = totalTimeout
        settings.lowSpeedLimit = lowSpeedLimit
        settings.maxReceiveBytesPerSecond = maxReceiveBytesPerSecond.map { max(1, $0) }
        settings.maxRedirects = max(0, maxRedirects)
        settings.tls = tls
        settings.proxy = proxy
        return settings
    }

    /// `text` with every `{n}` replaced by `n`.
    static func replacingCounter(in text: String, with n: Int) -> String {
        var out = ""
        var rest = Substring(text)
        while let range = rest.firstRange(ofASCII: "{n}") {
            out += rest[..<range.lowerBound]
            out += String(n)
            rest = rest[range.upperBound...]
        }
        return out + rest
    }

    static func fail(_ error: TransferOptionError) -> Int32 {
        printError("fire-agent: \(error.message)")
        return error.exit
    }
}
