import Foundation
import Queue

/// Building server-rendered pages. Invariant: every value that did not come from this file's own literals
/// (a job's args, an error message, a class or queue name, a jid, a hostname) goes through `escape` — the
/// one escaping function of the dashboard — or through `attribute`, which uses it.
enum HTML {
    /// Escapes `&`, `<`, `>`, `"` and `'` so that text is inert both between tags and inside quoted attributes.
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(character)
            }
        }
        return out
    }

    /// A percent-encoded URL path segment or query value (then escaped for the attribute it sits in).
    static func urlComponent(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }

    /// A whole page: title, navigation, body. `refresh`: seconds after which the browser reloads it.
    static func page(title: String, body: String, refresh: Int? = nil) -> String {
        let nav = [("/", "Dashboard"), ("/queues", "Queues"), ("/jobs/enqueued", "Enqueued"), ("/jobs/busy", "Busy"),
                   ("/jobs/scheduled", "Scheduled"), ("/jobs/retry", "Retries"), ("/jobs/dead", "Dead"),
                   ("/processes", "Processes"), ("/cron", "Cron"), ("/batches", "Batches"), ("/limits", "Limits"),
                   ("/unique", "Unique locks"), ("/outbox", "Outbox")]
            .map { "<a href=\"\($0.0)\">\($0.1)</a>" }.joined(separator: " · ")
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            \(refresh.map { "<meta http-equiv=\"refresh\" content=\"\($0)\">" } ?? "")
            <title>\(escape(title)) · workerctl web</title>
            <style>
            body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}nav{margin-bottom:1em}
            table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
            th{background:#f3f3f3}pre{background:#f7f7f7;padding:.5em;overflow:auto;max-width:100%}
            form.inline{display:inline;margin:0 .2em}.num{text-align:right}.muted{color:#777}
            </style></head><body>
            <nav>\(nav) <form class="inline" method="get" action="/search"><input name="q" placeholder="jid, class or text"><button>Search</button></form></nav>
            <h1>\(escape(title))</h1>
            \(body)
            </body></html>
            """
    }

    /// A table with `headers` and rows of already-rendered cells.
    static func table(_ headers: [String], _ rows: [[String]], id: String? = nil) -> String {
        let head = headers.map { "<th>\(escape($0))</th>" }.joined()
        let body = rows.map { "<tr>" + $0.map { "<td>\($0)</td>" }.joined() + "</tr>" }.joined(separator: "\n")
        return "<table\(id.map { " id=\"\(escape($0))\"" } ?? "")><tr>\(head)</tr>\n\(body)</table>"
    }

    /// The one script of the pages: a form with `data-confirm` asks first. The question is read from the attribute
    /// (HTML-escaped like any value), never written into the script, so no text can become code (review L4).
    static let confirmHandler = "return confirm(this.dataset.confirm)"

    /// A POST form of one button carrying the CSRF token and `fields` (name → value) as hidden inputs.
    static func button(_ label: String, action: String, csrf: String, fields: [(String, String)] = [],
                       confirm: String? = nil) -> String {
        let hidden = ([("csrf", csrf)] + fields).map {
            "<input type=\"hidden\" name=\"\(escape($0.0))\" value=\"\(escape($0.1))\">"
        }.joined()
        let onsubmit = confirm.map { " data-confirm=\"\(escape($0))\" onsubmit=\"\(confirmHandler)\"" } ?? ""
        return "<form class=\"inline\" method=\"post\" action=\"\(escape(action))\"\(onsubmit)>\(hidden)"
            + "<button type=\"submit\" data-action=\"\(escape(label.lowercased()))\">\(escape(label))</button></form>"
    }

    /// Seconds as `1.2 s`, `3 min`, `2 h`, `4 d`; "unknown" for nil or a value that is not finite. Total: any
    /// Double (a latency from a producer's timestamp) gives text, never a trap (`Bounded.int`).
    static func duration(_ seconds: Double?) -> String {
        guard let seconds, seconds.isFinite else { return "unknown" }
        if seconds < 60 { return String(format: "%.1f s", seconds) }
        if seconds < 3600 { return "\(Bounded.int(seconds / 60, in: 0...Int.max)) min" }
        if seconds < 86400 { return "\(Bounded.int(seconds / 3600, in: 0...Int.max)) h" }
        return "\(Bounded.int(seconds / 86400, in: 0...Int.max)) d"
    }

    /// An epoch time as UTC `YYYY-MM-DD HH:MM:SS`; "" for nil, "unknown" for a value that is not a time
    /// (`Bounded.epochSeconds`: a ZSET score of `inf`, a payload's `1e300`).
    static func time(_ epoch: Double?) -> String {
        guard let raw = epoch else { return "" }
        guard let epoch = Bounded.epochSeconds(raw) else { return "unknown" }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.string(from: Date(timeIntervalSince1970: epoch))
    }

    /// Parses an `application/x-www-form-urlencoded` body or query string.
    static func form(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ part: Substring) -> String {
                String(part).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
            }
            guard let name = parts.first else { continue }
            fields[decode(name)] = parts.count > 1 ? decode(parts[1]) : ""
        }
        return fields
    }
}
