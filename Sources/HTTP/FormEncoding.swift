import Foundation

/// `application/x-www-form-urlencoded` serialisation (WHATWG URL §5.2): bytes `*-._`, ASCII digits and letters
/// are kept, space becomes `+`, everything else is `%XX` (UTF-8, upper-case hex). Order of pairs is kept.
public enum FormEncoding {
    /// `a=1&b=two+words`.
    public static func encode(_ pairs: [(String, String)]) -> String {
        pairs.map { "\(escape($0.0))=\(escape($0.1))" }.joined(separator: "&")
    }

    /// The same as `encode`, as request body bytes.
    public static func body(_ pairs: [(String, String)]) -> Data { Data(encode(pairs).utf8) }

    /// Escapes one name or value.
    public static func escape(_ s: String) -> String {
        var out = [UInt8]()
        out.reserveCapacity(s.utf8.count)
        let hex = Array("0123456789ABCDEF".utf8)
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "*"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"):
                out.append(b)
            case UInt8(ascii: " "):
                out.append(UInt8(ascii: "+"))
            default:
                out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 0xF)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses `a=1&b=two+words` (the inverse of `encode`; malformed escapes are kept literally).
    public static func decode(_ s: String) -> [(String, String)] {
        s.split(separator: "&", omittingEmptySubsequences: true).map { part in
            let kv = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (unescape(kv[0]), kv.count > 1 ? unescape(kv[1]) : "")
        }
    }

    private static func unescape(_ s: Substring) -> String {
        let plus = s.replacingOccurrences(of: "+", with: " ")
        return plus.removingPercentEncoding ?? plus
    }

    /// `url` with `query` appended (`?` or `&` as needed). Returns `url` unchanged when `query` is empty.
    public static func appendingQuery(_ query: [(String, String)], to url: String) -> String {
        guard !query.isEmpty else { return url }
        return url + (url.contains("?") ? "&" : "?") + encode(query)
    }
}
