import TinyFireCore

/// The curl-like TLS and proxy options of `fire-agent request` and `queue flush`, read once
/// for both: `--cacert`, `--pin`, `--cert`/`--key`, `-k`; `-x`, `-U`, `--noproxy`,
/// `--proxy-cacert`, `-p`. Memory: the option texts and the decoded pins (32 bytes each).
package struct TransferOptions: Sendable {
    static let options: Set<String> = [
        "--cacert", "--pin", "--cert", "--key", "--proxy", "--proxy-user", "--noproxy", "--proxy-cacert",
    ]
    static let flags: Set<String> = ["--insecure", "--proxytunnel"]
    static let repeated: Set<String> = ["--pin"]
    static let aliases = ["-k": "--insecure", "-x": "--proxy", "-U": "--proxy-user", "-p": "--proxytunnel"]
    static let help = [
        "--cacert": "Trust the CA certificates in FILE (PEM or DER) instead of the system bundle.",
        "--pin": "Require a public key with this pin, sha256//BASE64 (repeatable; any one matches).",
        "--cert": "Client certificate FILE for mutual TLS (with --key).",
        "--key": "Private key FILE of --cert.",
        "--proxy": "Use this proxy: [http|https://][USER:PASSWORD@]HOST[:PORT] (default port 1080; '' disables the environment's).",
        "--proxy-user": "USER:PASSWORD for the proxy's Basic authentication.",
        "--noproxy": "Hosts that go direct, comma-separated ('*': all; overrides no_proxy).",
        "--proxy-cacert": "Trust the CA certificates in FILE for an https:// proxy's own certificate.",
    ]

    /// `command` taking these options too.
    static func adding(to command: AgentCommandLine.Command) -> AgentCommandLine.Command {
        var command = command
        command.options.formUnion(options)
        command.flags.formUnion(flags)
        command.repeated.formUnion(repeated)
        for (short, long) in aliases { command.aliases[short] = long }
        for (name, line) in help { command.help[name] = line }
        return command
    }

    /// `--cacert FILE`.
    package var caCertificate: String?
    /// `--pin sha256//BASE64`, each given.
    package var pins: [String]
    /// `--cert FILE`.
    package var clientCertificate: String?
    /// `--key FILE`.
    package var clientKey: String?
    /// `-k`.
    package var insecure: Bool
    /// `-x URL` ("" disables the environment's proxy).
    package var proxy: String?
    /// `-U USER:PASSWORD`.
    package var proxyUser: String?
    /// `--noproxy LIST`.
    package var noProxy: String?
    /// `--proxy-cacert FILE`.
    package var proxyCACertificate: String?
    /// `-p`.
    package var proxyTunnel: Bool

    /// The options as given (the host's swift-argument-parser front end builds them).
    package init(
        caCertificate: String?, pins: [String], clientCertificate: String?, clientKey: String?, insecure: Bool, proxy: String?,
        proxyUser: String?, noProxy: String?, proxyCACertificate: String?, proxyTunnel: Bool
    ) {
        self.caCertificate = caCertificate
        self.pins = pins
        self.clientCertificate = clientCertificate
        self.clientKey = clientKey
        self.insecure = insecure
        self.proxy = proxy
        self.proxyUser = proxyUser
        self.noProxy = noProxy
        self.proxyCACertificate = proxyCACertificate
        self.proxyTunnel = proxyTunnel
    }

    init(_ parsed: AgentCommandLine.Parsed) {
        caCertificate = parsed.options["--cacert"]
        pins = parsed.lists["--pin"] ?? []
        clientCertificate = parsed.options["--cert"]
        clientKey = parsed.options["--key"]
        insecure = parsed.flags.contains("--insecure")
        proxy = parsed.options["--proxy"]
        proxyUser = parsed.options["--proxy-user"]
        noProxy = parsed.options["--noproxy"]
        proxyCACertificate = parsed.options["--proxy-cacert"]
        proxyTunnel = parsed.flags.contains("--proxytunnel")
    }

    /// Overwrites the proxy passwords of the command line (`-x USER:PASSWORD@HOST`, `-U
    /// USER:PASSWORD`, and their `--proxy=` and `--proxy-user=` spellings) with `*` in the
    /// process's argument memory, as curl blanks `-U`: any local user reads `/proc/PID/cmdline`
    /// while the transfer runs. The parsed values keep the password; only what others see
    /// changes. Nothing is done for a command without these options.
    /// - Parameter parsed: the command line as parsed.
    static func hideCredentials(in parsed: AgentCommandLine.Parsed) {
        var secrets: [ProcessArguments.Secret] = []
        func hide(_ name: String, _ secret: ([UInt8]) -> Range<Int>?) {
            guard let value = parsed.options[name] else { return }
            let bytes = Array(value.utf8)
            guard let range = secret(bytes), !range.isEmpty else { return }
            secrets.append(ProcessArguments.Secret(argument: bytes, bytes: range))
            let spelled = Array((name + "=").utf8)
            let shifted = (range.lowerBound + spelled.count)..<(range.upperBound + spelled.count)
            secrets.append(ProcessArguments.Secret(argument: spelled + bytes, bytes: shifted))
        }
        hide("--proxy") { Proxy.secretRange(in: $0) }
        hide("--proxy-user") { bytes in bytes.firstIndex(of: UInt8(ascii: ":")).map { ($0 + 1)..<bytes.count } }
        ProcessArguments.overwrite(secrets)
    }

    /// The servers' TLS: `--cacert` instead of the system bundle, the client certificate.
    var tls: TLSConfiguration {
        var tls = TLSConfiguration()
        if let caCertificate { tls.caCertificateFiles = [caCertificate] }
        tls.clientCertificateFile = clientCertificate
        tls.clientKeyFile = clientKey
        return tls
    }

    /// How every server (the URL's host and those it redirects to) is judged: nil for mbedTLS's
    /// validation; with `--pin`, that validation and a pinned key on the verified path (the
    /// library's `PublicKeysTrustEvaluator`, whose name the refusal carries); with `-k`,
    /// anything (after a warning on standard error).
    /// - Returns: the judge, or the message for a pin that is not `sha256//BASE64` (exit 58).
    func trust() -> Result<(@Sendable (TrustFacts) -> String?)?, TransferOptionError> {
        if insecure {
            AgentCommandLine.printError(
                "fire-agent: WARNING: --insecure: the server's certificate is NOT verified; anyone on the path can read and change this transfer"
            )
            return .success({ _ in nil })
        }
        guard !pins.isEmpty else { return .success(nil) }
        var digests: [[UInt8]] = []
        for pin in pins {
            for part in pin.split(separator: ";") {
                let text = String(part).trimmingHTTPWhitespace()
                guard text.hasPrefix("sha256//"), let digest = Base64.decode(text.dropFirst(8)), digest.count == 32 else {
                    return .failure(
                        TransferOptionError(
                            "invalid TLS configuration: pin \(quoted(text)) is not sha256// followed by a base64 SHA-256",
                            exit: AgentCommandLine.Exit.sslCertificateProblem))
                }
                digests.append(digest)
            }
        }
        let pinned = digests
        return .success({ facts in Self.pinRefusal(facts, pins: pinned) })
    }

    /// Why `facts` fail `--pin`, in the library's words, or nil when a key of the verified
    /// path is pinned and mbedTLS's validation passed.
    static func pinRefusal(_ facts: TrustFacts, pins: [[UInt8]]) -> String? {
        let prefix = "PublicKeysTrustEvaluator did not trust \(facts.host): "
        let failures = facts.defaultValidationFailures(validateHost: true)
        guard failures.isEmpty else {
            var text = prefix
            for (index, failure) in failures.enumerated() { text += (index == 0 ? "" : "; ") + failure }
            return text
        }
        var seen = ""
        for certificate in facts.verifiedPath {
            guard let digest = certificate.withUnsafeBytes({ X509.spkiSHA256(certificate: $0) }) else { continue }
            if pins.contains(digest) { return nil }
            seen += (seen.isEmpty ? "" : ", ") + "sha256//" + Base64.encode(digest)
        }
        return prefix + "no public key of the verified path is pinned (path: \(seen))"
    }

    /// The proxy settings: `-x`, else the environment (`http_proxy`, `https_proxy`,
    /// `all_proxy`, `no_proxy`, as curl reads them); then `--noproxy`, `-U`, `--proxy-cacert`
    /// and `-p` applied on top.
    /// - Parameter lookup: reads an environment variable.
    /// - Returns: the settings, or the message naming the malformed option or variable (exit 5).
    func proxySettings(environment lookup: (String) -> String? = ProxySettings.processEnvironment) -> Result<
        ProxySettings, TransferOptionError
    > {
        var settings: ProxySettings
        if let proxy {
            if proxy.isEmpty {
                settings = .direct
            } else {
                do throws(ProxyURLError) {
                    settings = ProxySettings(all: try Proxy(parsing: proxy))
                } catch {
                    return .failure(TransferOptionError("invalid proxy: -x: \(error.reason)", exit: AgentCommandLine.Exit.proxyProblem))
                }
            }
            // curl keeps honouring no_proxy with -x.
            let environmentList = lookup("no_proxy").flatMap { $0.isEmpty ? nil : $0 } ?? lookup("NO_PROXY")
            if let environmentList, !environmentList.isEmpty { settings.noProxy = NoProxyList(parsing: environmentList) }
        } else {
            do throws(ProxyURLError) {
                settings = try ProxySettings.parseEnvironment(lookup)
            } catch {
                return .failure(TransferOptionError("invalid proxy: \(error.reason)", exit: AgentCommandLine.Exit.proxyProblem))
            }
        }
        if let noProxy { settings.noProxy = NoProxyList(parsing: noProxy) }
        // curl ignores what it cannot read in the list; so does this, once said.
        let listName = noProxy != nil ? "--noproxy" : (lookup("no_proxy").map { $0.isEmpty ? "NO_PROXY" : "no_proxy" } ?? "NO_PROXY")
        for entry in settings.noProxy.invalidEntries {
            AgentCommandLine.printError(
                "fire-agent: warning: \(listName): \(quoted(entry)) is not a host name, an IP address, a CIDR range (10.0.0.0/8) or \"*\": ignored"
            )
        }
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
        return .success(settings)
    }
}

/// A transfer option that cannot be used: the message (after `fire-agent: `) and the exit
/// status.
struct TransferOptionError: Error {
    let message: String
    let exit: Int32

    init(_ message: String, exit: Int32) {
        self.message = message
        self.exit = exit
    }
}
