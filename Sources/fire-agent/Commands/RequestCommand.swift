import ArgumentParser
import FireAgentCore

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
    var maxRedirects: Int = 10

    @Option(name: .customLong("max-body"), help: "Largest request body read from -d @FILE, in bytes (default 16 MiB).")
    var maxRequestBody: Int = 16 * 1024 * 1024

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
        let status = AgentCommandLine.request(
            RequestOptions(
                url: url, method: method, headers: header, data: data, output: output, include: include, verbose: verbose,
                timeout: timeout, connectTimeout: connectTimeout, idleTimeout: idleTimeout, speedLimit: speedLimit,
                speedTime: speedTime, limitRate: limitRate, maxFilesize: maxFilesize, maxRedirects: maxRedirects,
                maxRequestBody: maxRequestBody, uploadFile: uploadFile, form: form, continueAt: continueAt, progress: progress,
                waitForNetwork: waitForNetwork, deferTo: deferTo, transfer: transferOptions(tlsOptions, proxyOptions)))
        if status != 0 { throw ExitCode(status) }
    }

    func validate() throws {
        try validateSeconds([
            ("--timeout", timeout), ("--connect-timeout", connectTimeout), ("--idle-timeout", idleTimeout), ("--speed-time", speedTime),
            ("--wait-for-network", waitForNetwork),
        ])
        for (name, value) in [("--limit-rate", limitRate), ("--max-filesize", maxFilesize)] {
            if let value, AgentCommandLine.curlSize(value) == nil {
                throw ValidationError("\(name) takes a size in bytes (suffix k, M or G), not \(value)")
            }
        }
    }
}

/// Writes `text` and a newline to stderr, with control characters escaped.
func printError(_ text: String) {
    let line = text.escapingControlCharacters() + "\n"
    _ = line.withCString { write(STDERR_FILENO, $0, strlen($0)) }
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
}

/// The core's form of the TLS and proxy options.
func transferOptions(_ tls: TLSOptions, _ proxy: ProxyOptions) -> TransferOptions {
    TransferOptions(
        caCertificate: tls.caCertificate, pins: tls.pins, clientCertificate: tls.clientCertificate, clientKey: tls.clientKey,
        insecure: tls.insecure, proxy: proxy.proxy, proxyUser: proxy.proxyUser, noProxy: proxy.noProxy,
        proxyCACertificate: proxy.proxyCACertificate, proxyTunnel: proxy.proxyTunnel)
}
