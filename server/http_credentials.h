/* server/http_credentials.h — the API key check of an Authorization header: `Bearer KEY`, or `Basic` credentials
 * whose password is the key (any user name; a browser opening /dashboard can send only these). */
#ifndef AAH_SERVER_HTTP_CREDENTIALS_H
#define AAH_SERVER_HTTP_CREDENTIALS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when header (an Authorization value; NULL when absent) carries key. The comparison takes the same time
 * whatever bytes differ, so the key cannot be guessed byte by byte from response times. */
bool http_credentials_match(const char *header, const char *key);

/* Decodes standard base64 (padding optional, nothing after it) of in[0 … n) into out, NUL-terminated; returns the
 * decoded length, or -1 when it is not base64 or does not fit in cap - 1 bytes. */
long http_base64_decode(const char *in, size_t n, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
