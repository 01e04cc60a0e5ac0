import Foundation
import WorkersQueue

/// Building server-rendered pages. Invariant: every value that did not come from this file's own literals
/// (a job's args, an error message, a class or queue name, a jid, a hostname) goes through `escape` — the
/// one escaping function of the dashboard — or through `attribute`, which uses it.
enum HTML {
    /// Escapes `&`, `<`, `>`, `"` and `'` so that text is inert both between tags and inside quoted attributes, and
    /// shows control and format characters (bidi overrides, zero-width characters) as `\uXXXX`
    /// (`DisplayText.neutralised`): a value cannot make the page show other text than it holds.
    static func escape(_ text: String) -> String {
        let text = DisplayText.neutralised(text)
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

    /// A whole page: title, navigation, body. The look is `/assets/app.css` (light and dark, following the
    /// system); the one script is `/assets/app.js` (`Assets`). No inline script or style, no `<meta refresh>`: only
    /// the dashboard's live view updates itself (by polling `/api/stats.json`).
    static func page(title: String, body: String) -> String {
        let nav = [("/", "Dashboard"), ("/queues", "Queues"), ("/jobs/enqueued", "Enqueued"), ("/jobs/busy", "Busy"),
                   ("/jobs/scheduled", "Scheduled"), ("/jobs/retry", "Retries"), ("/jobs/dead", "Dead"),
                   ("/processes", "Processes"), ("/cron", "Cron"), ("/batches", "Batches"), ("/metrics", "Metrics"), ("/limits", "Limits"),
                   ("/unique", "Unique locks"), ("/outbox", "Outbox")]
            .map { "<a href=\"\($0.0)\">\($0.1)</a>" }.joined(separator: "\n")
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="color-scheme" content="light dark">
            <title>\(escape(title)) · workerctl web</title>
            <link rel="stylesheet" href="/assets/app.css">
            <script src="/assets/app.js" defer></script>
            </head><body>
            <header><nav><span class="brand">workerctl web</span>
            \(nav)
            <form method="get" action="/search"><input name="q" placeholder="jid or class" aria-label="Search by jid or class"><button>Search</button></form></nav></header>
            <main>
            <h1>\(escape(title))</h1>
            \(body)
            </main>
            </body></html>
            """
    }

    /// A table with `headers` and rows of already-rendered cells, in a box that scrolls sideways on its own when the
    /// table is wider than the screen (the page itself never does). `rawHeaders`: headers already rendered (a
    /// select-all checkbox), else escaped.
    static func table(_ headers: [String], _ rows: [[String]], id: String? = nil, rawHeaders: Bool = false) -> String {
        let head = headers.map { "<th>\(rawHeaders ? $0 : escape($0))</th>" }.joined()
        let body = rows.map { "<tr>" + $0.map { "<td>\($0)</td>" }.joined() + "</tr>" }.joined(separator: "\n")
        return "<div class=\"scroll\"><table\(id.map { " id=\"\(escape($0))\"" } ?? "")><tr>\(head)</tr>\n\(body)</table></div>"
    }

    /// A POST form of one button carrying the CSRF token and `fields` (name → value) as hidden inputs. `confirm`:
    /// a question asked first — an HTML-escaped `data-confirm` attribute that `/assets/app.js` reads (review L4:
    /// no text is ever written into a script, and no script is inline).
    static func button(_ label: String, action: String, csrf: String, fields: [(String, String)] = [],
                       confirm: String? = nil) -> String {
        let hidden = ([("csrf", csrf)] + fields).map {
            "<input type=\"hidden\" name=\"\(escape($0.0))\" value=\"\(escape($0.1))\">"
        }.joined()
        let asks = confirm.map { " data-confirm=\"\(escape($0))\"" } ?? ""
        return "<form class=\"inline\" method=\"post\" action=\"\(escape(action))\"\(asks)>\(hidden)"
            + "<button type=\"submit\" data-action=\"\(escape(label.lowercased()))\">\(escape(label))</button></form>"
    }

    /// `value` as indented JSON (two spaces, keys in their order), for the job page's payload. Not escaped: the
    /// caller escapes the whole text (`escape`) before it goes into the page.
    static func prettyJSON(_ value: JSONValue, indent: String = "") -> String {
        let inner = indent + "  "
        switch value {
        case .array(let elements):
            if elements.isEmpty { return "[]" }
            return "[\n" + elements.map { inner + prettyJSON($0, indent: inner) }.joined(separator: ",\n") + "\n\(indent)]"
        case .object(let object):
            if object.count == 0 { return "{}" }
            return "{\n" + object.entries.map { entry in
                inner + JSONValue.string(entry.key).serialized() + ": " + prettyJSON(entry.value, indent: inner)
            }.joined(separator: ",\n") + "\n\(indent)}"
        default:
            return value.serialized()
        }
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

    /// Every value of field `name` in an `application/x-www-form-urlencoded` body, in order (a bulk form's `jid`
    /// checkboxes); `form` keeps only the last of each name.
    static func values(_ name: String, in text: String) -> [String] {
        text.split(separator: "&").compactMap { pair -> String? in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ part: Substring) -> String {
                String(part).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
            }
            guard let first = parts.first, decode(first) == name else { return nil }
            return parts.count > 1 ? decode(parts[1]) : ""
        }
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
