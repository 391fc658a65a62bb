/// fire-agent's help pages, one per command (`fire-agent [COMMAND …] --help`, `fire-agent help
/// [COMMAND …]`, and a command group alone): the text both builds print, at most 80 columns.
/// Written from swift-argument-parser's pages when fire-agent left it; kept by hand since.
extension AgentCommandLine {
    /// The page of the command `words` name ("" for fire-agent itself), nil for none.
    static func helpPage(_ words: String) -> String? {
        switch words {
        case "":
            """
            OVERVIEW: TinyFire device agent: telemetry, offline queue, firmware updates,
            and a curl-like client.

            USAGE: fire-agent <subcommand>

            OPTIONS:
              --version               Show the version.
              -h, --help              Show help information.

            SUBCOMMANDS:
              request                 Perform one HTTP request (curl-like). Exit 0 only for
                                      a complete 2xx response.
              reachability            Print whether the network is reachable, and through
                                      which interface (rtnetlink).
              queue                   Inspect, fill and flush a durable offline request
                                      queue (docs/OFFLINE.md).
              config                  Check the config file, or show the effective config.
              sync                    Collect telemetry once, take the spool, queue the
                                      batches and deliver the queue; then exit.
              run                     Run the agent as a service: collect and sync on a
                                      schedule until SIGTERM; SIGHUP reloads the config.
              status                  Show the running daemon's status: last sync and
                                      delivery, queue, dead letters, reachability, config.
              firmware                Firmware manifests and images, checked as the agent
                                      checks them.

              See 'fire-agent help <subcommand>' for detailed help.
            """
        case "request":
            """
            OVERVIEW: Perform one HTTP request (curl-like). Exit 0 only for a complete 2xx
            response.

            The body goes to stdout, or with -o to a file that appears only once the body
            is complete (written to a hidden sibling, then renamed). See docs/CLI.md for
            exit codes.

            USAGE: fire-agent request [<options>] <url>

            ARGUMENTS:
              <url>                   The URL (http:// or https://).

            OPTIONS:
              -X, --method <method>   Request method (default GET, or POST with -d).
              -H, --header <header>   Extra header 'Name: value' (repeatable).
              -d, --data <data>       Request body; @FILE reads it from a file.
              -o, --output <output>   Write the body to FILE instead of stdout.
              -i, --include           Include the response head in the output.
              -v, --verbose           Show the request and response heads and phase timings
                                      on stderr.
              --timeout <timeout>     Total time allowed, in seconds (curl's --max-time).
              --connect-timeout <connect-timeout>
                                      Time allowed for DNS plus connect, in seconds
                                      (default 30).
              --idle-timeout <idle-timeout>
                                      Time allowed without any byte moving, in seconds
                                      (default 60).
              --speed-limit <speed-limit>
                                      Abort when slower than this many bytes/s for
                                      --speed-time seconds.
              --speed-time <speed-time>
                                      Window for --speed-limit, in seconds (default 30).
                                      (default: 30.0)
              --limit-rate <limit-rate>
                                      Read at most this many bytes/s (suffix k, M or G for
                                      KiB, MiB, GiB, as curl).
              --max-filesize <max-filesize>
                                      Refuse a download that would exceed this size (exit
                                      63; suffix k, M or G).
              --max-redirs <max-redirs>
                                      Redirects to follow at most (default 10; 0 disables).
                                      (default: 10)
              --max-body <max-body>   Largest request body read from -d @FILE, in bytes
                                      (default 16 MiB). (default: 16777216)
              -T, --upload-file <upload-file>
                                      Send FILE as the body, streamed (PUT unless -X says
                                      otherwise).
              -F, --form <form>       Multipart form field (repeatable): name=value, or
                                      name=@FILE[;type=MIME][;filename=NAME] for a file
                                      part (POST).
              -C, --continue-at <continue-at>
                                      '-' continues a partial -o FILE from its size (a
                                      Range request, as curl; a 200 rewrites the file).
              -#, --progress          Show progress on stderr: a bar on a terminal, a line
                                      per second otherwise.
              --wait-for-network <wait-for-network>
                                      When the request fails for lack of network, wait up
                                      to this many seconds for a route to the host, then
                                      try again.
              --defer-to <defer-to>   When the request fails for lack of network, queue it
                                      durably in the offline queue DIR instead of failing
                                      (exit 75).
              --cacert <cacert>       Trust the CA certificates in FILE (PEM or DER)
                                      instead of the system bundle.
              --pin <pin>             Require a public key with this pin, sha256//BASE64
                                      (repeatable; any one matches).
              --cert <cert>           Client certificate FILE for mutual TLS (with --key).
              --key <key>             Private key FILE of --cert.
              -k, --insecure          Do NOT verify the server's certificate (debugging
                                      only; warns).
              -x, --proxy <proxy>     Use this proxy:
                                      [http|https://][USER:PASSWORD@]HOST[:PORT] (default
                                      port 1080; '' disables the environment's).
              -U, --proxy-user <proxy-user>
                                      USER:PASSWORD for the proxy's Basic authentication.
              --noproxy <noproxy>     Hosts that go direct, comma-separated ('*': all;
                                      overrides no_proxy).
              --proxy-cacert <proxy-cacert>
                                      Trust the CA certificates in FILE for an https://
                                      proxy's own certificate.
              -p, --proxytunnel       Tunnel http:// URLs through the proxy with CONNECT
                                      too.
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "reachability":
            """
            OVERVIEW: Print whether the network is reachable, and through which interface
            (rtnetlink).

            Prints one line: 'reachable IFACE TYPE' (TYPE is ethernet, wifi, cellular or
            other), 'not-reachable' or 'unknown'. With --watch, prints the current state
            and then one line per change until stopped. Without --watch the exit status is
            0 when reachable and 1 otherwise.

            USAGE: fire-agent reachability [--watch] [--host <host>] [--netns <netns>]

            OPTIONS:
              --watch                 Keep running and print a line at every change.
              --host <host>           Judge the kernel's route to this host (name or
                                      address) instead of any default route.
              --netns <netns>         Watch the network namespace in FILE (e.g.
                                      /run/netns/NAME) instead of this process's.
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "queue":
            """
            OVERVIEW: Inspect, fill and flush a durable offline request queue
            (docs/OFFLINE.md).

            USAGE: fire-agent queue <subcommand>

            OPTIONS:
              --version               Show the version.
              -h, --help              Show help information.

            SUBCOMMANDS:
              list                    One line per queued record, oldest first: SEQUENCE
                                      AGE_S METHOD URL BODY_BYTES IDEMPOTENCY_KEY.
              stats                   Counts, bytes, the oldest record's age and the drop
                                      counters, as key=value lines.
              flush                   Send every queued record now, in order; stop at the
                                      first that fails.
              add                     Queue a request durably; prints 'queued SEQUENCE
                                      IDEMPOTENCY_KEY' once it is on disk.

              See 'fire-agent help queue <subcommand>' for detailed help.
            """
        case "queue list":
            """
            OVERVIEW: One line per queued record, oldest first: SEQUENCE AGE_S METHOD URL
            BODY_BYTES IDEMPOTENCY_KEY.

            Reads without taking the queue's lock, so it works while the agent runs.

            USAGE: fire-agent queue list --dir <dir> [--limit <limit>]

            OPTIONS:
              --dir <dir>             The queue's directory.
              --limit <limit>         Print at most this many records. (default:
                                      9223372036854775807)
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "queue stats":
            """
            OVERVIEW: Counts, bytes, the oldest record's age and the drop counters, as
            key=value lines.

            Reads without taking the queue's lock, so it works while the agent runs.

            USAGE: fire-agent queue stats --dir <dir>

            OPTIONS:
              --dir <dir>             The queue's directory.
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "queue flush":
            """
            OVERVIEW: Send every queued record now, in order; stop at the first that fails.

            Prints 'delivered N discarded N remaining N', and the failure on stderr. Exit 0
            when the queue is empty afterwards, 7 when a record could not be delivered.
            Takes the queue's lock: not while the agent has the queue open.

            USAGE: fire-agent queue flush [<options>] --dir <dir>

            OPTIONS:
              --dir <dir>             The queue's directory.
              --cacert <cacert>       Trust the CA certificates in FILE (PEM or DER)
                                      instead of the system bundle.
              --pin <pin>             Require a public key with this pin, sha256//BASE64
                                      (repeatable; any one matches).
              --cert <cert>           Client certificate FILE for mutual TLS (with --key).
              --key <key>             Private key FILE of --cert.
              -k, --insecure          Do NOT verify the server's certificate (debugging
                                      only; warns).
              -x, --proxy <proxy>     Use this proxy:
                                      [http|https://][USER:PASSWORD@]HOST[:PORT] (default
                                      port 1080; '' disables the environment's).
              -U, --proxy-user <proxy-user>
                                      USER:PASSWORD for the proxy's Basic authentication.
              --noproxy <noproxy>     Hosts that go direct, comma-separated ('*': all;
                                      overrides no_proxy).
              --proxy-cacert <proxy-cacert>
                                      Trust the CA certificates in FILE for an https://
                                      proxy's own certificate.
              -p, --proxytunnel       Tunnel http:// URLs through the proxy with CONNECT
                                      too.
              --timeout <timeout>     Time allowed per request, in seconds (default 60).
                                      (default: 60.0)
              --discard-status <discard-status>
                                      Statuses that remove a record without success (e.g.
                                      400,422).
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "queue add":
            """
            OVERVIEW: Queue a request durably; prints 'queued SEQUENCE IDEMPOTENCY_KEY'
            once it is on disk.

            With --repeat N, queues N requests one after another, replacing {n} in the URL
            and the body with a counter that starts at --start; each line is printed when
            its request is durable. Exit 0 when all were queued; 23 when the disk is full
            or a write failed; 63 when the queue is full.

            USAGE: fire-agent queue add --dir <dir> <url> [--method <method>] [--header <header> ...] [--data <data>] [--repeat <repeat>] [--start <start>] [--max-records <max-records>] [--max-bytes <max-bytes>] [--drop-oldest]

            ARGUMENTS:
              <url>                   The URL the request goes to.

            OPTIONS:
              --dir <dir>             The queue's directory.
              -X, --method <method>   Method (default POST with a body, else GET).
              -H, --header <header>   Header 'Name: value' (repeatable).
              -d, --data <data>       The body; @FILE queues a copy of the file.
              --repeat <repeat>       Queue this many requests. (default: 1)
              --start <start>         First value of {n}. (default: 1)
              --max-records <max-records>
                                      The queue's record bound. (default: 10000)
              --max-bytes <max-bytes> The queue's byte bound. (default: 67108864)
              --drop-oldest           When full, drop the oldest records instead of
                                      refusing.
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "config":
            """
            OVERVIEW: Check the config file, or show the effective config.

            USAGE: fire-agent config <subcommand>

            OPTIONS:
              --version               Show the version.
              -h, --help              Show help information.

            SUBCOMMANDS:
              check                   Check a config file; prints every problem with its
                                      key path (exit 78 when there is one).
              show                    Print the effective config, defaults filled in,
                                      secrets masked.

              See 'fire-agent help config <subcommand>' for detailed help.
            """
        case "config check":
            """
            OVERVIEW: Check a config file; prints every problem with its key path (exit 78
            when there is one).

            USAGE: fire-agent config check [<file>] [--config <config>]

            ARGUMENTS:
              <file>                  The file (default: --config, else
                                      /etc/fire-agent/fire-agent.json5).

            OPTIONS:
              --config <config>       The config file.
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "config show":
            """
            OVERVIEW: Print the effective config, defaults filled in, secrets masked.

            USAGE: fire-agent config show [--config <config>] [--show-secrets]

            OPTIONS:
              --config <config>       The config file (default
                                      /etc/fire-agent/fire-agent.json5).
              --show-secrets          Print passwords and tokens instead of ********.
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "sync":
            """
            OVERVIEW: Collect telemetry once, take the spool, queue the batches and deliver
            the queue; then exit.

            USAGE: fire-agent sync [--config <config>] [--once]

            OPTIONS:
              --config <config>       The config file (default
                                      /etc/fire-agent/fire-agent.json5).
              --once                  Run one cycle and exit (the only mode until the
                                      daemon runs it on a schedule).
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "run":
            """
            OVERVIEW: Run the agent as a service: collect and sync on a schedule until
            SIGTERM; SIGHUP reloads the config.

            USAGE: fire-agent run [--config <config>]

            OPTIONS:
              --config <config>       The config file (default
                                      /etc/fire-agent/fire-agent.json5).
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "status":
            """
            OVERVIEW: Show the running daemon's status: last sync and delivery, queue, dead
            letters, reachability, config.

            Exit status: 0 when the daemon runs, 69 when it does not (its last status is
            still shown), 75 when it runs but has not rewritten its status when due (what
            is shown is stale, and why), 78 for a bad config.

            USAGE: fire-agent status [--config <config>] [--status-file <status-file>] [--json]

            OPTIONS:
              --config <config>       The config file naming the status file (default
                                      /etc/fire-agent/fire-agent.json5).
              --status-file <status-file>
                                      Read this status file instead of the config's
                                      daemon.statusFile.
              --json                  Print the status document as JSON (for scripts).
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "firmware":
            """
            OVERVIEW: Firmware manifests and images, checked as the agent checks them.

            USAGE: fire-agent firmware <subcommand>

            OPTIONS:
              --version               Show the version.
              -h, --help              Show help information.

            SUBCOMMANDS:
              verify                  Verify a manifest's signature against public keys,
                                      and optionally an image against the manifest (exit 0:
                                      valid; 65: refused, with the reason).
              update                  Run one firmware cycle — confirm, poll, download,
                                      verify, install — and exit with what it came to.

              See 'fire-agent help firmware <subcommand>' for detailed help.
            """
        case "firmware verify":
            """
            OVERVIEW: Verify a manifest's signature against public keys, and optionally an
            image against the manifest (exit 0: valid; 65: refused, with the reason).

            USAGE: fire-agent firmware verify <manifest> [--key <key> ...] [--signature <signature>] [--image <image>] [--device-type <device-type>]

            ARGUMENTS:
              <manifest>              The manifest (JSON, as signed).

            OPTIONS:
              --key <key>             A public key (PEM or DER) or certificate; repeat for
                                      several.
              --signature <signature> The detached signature (default: MANIFEST.sig).
              --image <image>         An image to check against the manifest's size and
                                      SHA-256.
              --device-type <device-type>
                                      Also check that the manifest is for this device type.
              --version               Show the version.
              -h, --help              Show help information.
            """
        case "firmware update":
            """
            OVERVIEW: Run one firmware cycle — confirm, poll, download, verify, install —
            and exit with what it came to.

            Exit status: 0 nothing to do; 10 installed, the new version runs after the
            reboot; 11 committed; 12 the offer was refused; 13 the update failed; 14 rolled
            back; 16 another fire-agent runs the firmware flow; 75 not finished now (server
            unreachable, a retry, space, the clock, a sync): run again later; 78 config
            problems.

            USAGE: fire-agent firmware update [--config <config>] [--once]

            OPTIONS:
              --config <config>       The config file (default
                                      /etc/fire-agent/fire-agent.json5).
              --once                  Run one cycle and exit (the daemon, `fire-agent run`,
                                      runs them on its schedule).
              --version               Show the version.
              -h, --help              Show help information.
            """
        default: nil
        }
    }
}
