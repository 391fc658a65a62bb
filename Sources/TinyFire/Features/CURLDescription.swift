#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Builds the curl command equivalent to a request, for pasting into a shell.
enum CURLDescription {
    /// `$ curl -v \` then one option per line: method, headers (the session's defaults
    /// merged under the request's own), body, URL. Everything is single-quoted for POSIX
    /// shells; a body that is not UTF-8 is written with `printf` escapes.
    static func command(for request: URLRequest, sessionHeaders: HTTPHeaders) -> String {
        var lines = ["$ curl -v"]
        let method = request.method ?? .get
        lines.append("-X \(method.rawValue)")
        if method == .head { lines.append("--head") }
        let headers = request.headers.merging(defaults: sessionHeaders)
        for field in headers.fields {
            lines.append("-H \(shellQuoted("\(field.name.rawName): \(field.value)"))")
        }
        if let body = request.httpBody, !body.isEmpty {
            if let text = String(validating: body, as: UTF8.self), !text.contains("\0") {
                lines.append("--data-binary \(shellQuoted(text))")
            } else {
                let escaped = body.map { byte in "\\x" + String(byte, radix: 16).leftPadded(to: 2) }.joined()
                lines.append("--data-binary @<(printf '\(escaped)')")
            }
        }
        lines.append(shellQuoted(request.url?.absoluteString ?? ""))
        return lines.joined(separator: " \\\n\t")
    }

    /// `'text'`, with each `'` written as `'\''`.
    static func shellQuoted(_ text: String) -> String {
        "'" + text.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''") + "'"
    }
}

extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
