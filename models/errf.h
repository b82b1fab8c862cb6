/* models/errf.h — the one way a loader reports a failure: a printf-style message into the caller's buffer (err may
 * be NULL or err_len 0: then nothing is written). Every function that takes (char *err, size_t err_len) uses it; and
 * the words such a message uses for what kind of JSON value it found. */
#ifndef AAH_MODELS_ERRF_H
#define AAH_MODELS_ERRF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void aah_errf(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* What a JSON value is, for a message: "an object", "an array", "a string", "an integer", "a number", "a boolean",
 * "null". */
struct json_t;
const char *aah_json_kind(const struct json_t *v);

#ifdef __cplusplus
}
#endif
#endif
