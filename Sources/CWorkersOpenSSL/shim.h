#ifndef CWORKERSOPENSSL_SHIM_H
#define CWORKERSOPENSSL_SHIM_H
/* OpenSSL 3 (libssl-dev) for the TLS links to Redis (Sources/Queue/Redis/RedisTLSLink.swift). The functions below
 * wrap OpenSSL's function-like macros, which Swift cannot call. Named CWorkersOpenSSL, not COpenSSL, so that it
 * cannot clash with another package's OpenSSL module in an adopter's graph. */
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

static inline long workers_ssl_set_sni(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }
static inline long workers_ssl_ctx_set_min_tls12(SSL_CTX *ctx) { return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); }
/* Partial writes and a moving buffer: a non-blocking SSL_write that answered WANT_WRITE is retried with the rest of
 * the same bytes, which may have moved (a Swift array). */
static inline long workers_ssl_ctx_set_nonblocking_modes(SSL_CTX *ctx) {
    return SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

#endif
