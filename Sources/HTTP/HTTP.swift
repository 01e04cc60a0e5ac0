// HTTP module: see Package.swift for its place in the layering.
//
// What lives here (libcurl through `CCurl`):
// - `HTTPClient`     blocking HTTP/HTTPS client, safe to share between threads (a pool of curl easy handles).
// - `HTTPRequest` / `HTTPResponse` / `HTTPHeaders` / `HTTPError`   values with no libcurl types in them.
// - `HTTPResponseClass`  2xx / 429 / 5xx / other-4xx triage for retry decisions (`RetryAfter` parsing).
// - `HTTPCancellation`   a flag, deadline or closure checked while a transfer runs.
// - `FormEncoding`       `application/x-www-form-urlencoded` bodies and query strings.
//
// Mail (the module above) sends SMTP through the same curl runtime: `CurlTransferState`, `CurlFailure`,
// `Duration.curlMilliseconds` and `String.containsLineBreakOrNUL` are `package` for it.
//
// Process rule: `CurlRuntime.prepareAtStartup()` in `main` before threads start; it initialises libcurl at once
// only where libcurl's initialisation is not thread-safe, otherwise the first transfer does (`CurlRuntime`).
