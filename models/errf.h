/* models/errf.h — the one way a loader reports a failure: a printf-style message into the caller's buffer (err may
 * be NULL or err_len 0: then nothing is written). Every function that takes (char *err, size_t err_len) uses it. */
#ifndef AAH_MODELS_ERRF_H
#define AAH_MODELS_ERRF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void aah_errf(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
