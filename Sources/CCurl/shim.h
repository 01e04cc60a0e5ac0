#ifndef CCURL_SHIM_H
#define CCURL_SHIM_H
#include <curl/curl.h>

/* curl_easy_setopt / curl_easy_getinfo are variadic and so unavailable in Swift:
   these non-variadic wrappers fix the argument type per call. */
static inline CURLcode ccurl_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_ptr(CURL *h, CURLoption o, const void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_str(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
typedef size_t (*ccurl_data_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);
static inline CURLcode ccurl_setopt_datacb(CURL *h, CURLoption o, ccurl_data_cb cb) { return curl_easy_setopt(h, o, cb); }
static inline CURLcode ccurl_getinfo_long(CURL *h, CURLINFO i, long *out) { return curl_easy_getinfo(h, i, out); }
static inline CURLcode ccurl_getinfo_double(CURL *h, CURLINFO i, double *out) { return curl_easy_getinfo(h, i, out); }
/* Progress (CURLOPT_XFERINFOFUNCTION): return non-zero to abort the transfer (CURLE_ABORTED_BY_CALLBACK). */
typedef int (*ccurl_xferinfo_cb)(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
static inline CURLcode ccurl_setopt_xferinfocb(CURL *h, CURLoption o, ccurl_xferinfo_cb cb) { return curl_easy_setopt(h, o, cb); }
static inline CURLcode ccurl_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_getinfo_str(CURL *h, CURLINFO i, char **out) { return curl_easy_getinfo(h, i, out); }

/* Share handles (DNS cache, TLS sessions shared between easy handles). */
typedef void (*ccurl_lock_cb)(CURL *h, curl_lock_data data, curl_lock_access access, void *userptr);
typedef void (*ccurl_unlock_cb)(CURL *h, curl_lock_data data, void *userptr);
static inline CURLSHcode ccurl_share_setopt_long(CURLSH *s, CURLSHoption o, long v) { return curl_share_setopt(s, o, v); }
static inline CURLSHcode ccurl_share_setopt_ptr(CURLSH *s, CURLSHoption o, void *v) { return curl_share_setopt(s, o, v); }
static inline CURLSHcode ccurl_share_setopt_lockcb(CURLSH *s, ccurl_lock_cb cb) { return curl_share_setopt(s, CURLSHOPT_LOCKFUNC, cb); }
static inline CURLSHcode ccurl_share_setopt_unlockcb(CURLSH *s, ccurl_unlock_cb cb) { return curl_share_setopt(s, CURLSHOPT_UNLOCKFUNC, cb); }

/* Whether libcurl's global init and API are thread-safe (CURL_VERSION_THREADSAFE, libcurl >= 7.84); reads
   the version information only, initialises nothing. CURLVERSION_NOW is a macro Swift cannot import. */
static inline int ccurl_is_threadsafe(void) {
  const curl_version_info_data *info = curl_version_info(CURLVERSION_NOW);
#ifdef CURL_VERSION_THREADSAFE
  return info != NULL && (info->features & CURL_VERSION_THREADSAFE) != 0;
#else
  return 0;
#endif
}
#endif
