// Mail module: see Package.swift for its place in the layering (on the floor above HTTP, whose curl runtime it uses).
//
// What lives here (libcurl's SMTP client through `CCurl`):
// - `EmailMessage` / `EmailAddress`   one RFC 5322 plain-text message (UTF-8, MIME), header injection refused.
// - `SMTPSender` / `SMTPConfiguration` / `SMTPError`   hands one message to a server through `smtp://` or `smtps://`.
//
// Process rule: as for HTTP, `CurlRuntime.prepareAtStartup()` in `main` before threads start; `SMTPSender.send`
// initialises libcurl through `CurlRuntime.initialize()` like every other path that makes a curl handle.
