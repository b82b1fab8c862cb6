/* tools/convert/sha256.h — SHA-256 digests as `sha256sum` prints them, for the provenance of imported checkpoints
 * and calibration texts that aah.json records. Computed by nettle (SHA-NI where the CPU has it: an 8 GB checkpoint
 * is hashed once per import, in one pass over its mapping). */
#ifndef AAH_SHA256_H
#define AAH_SHA256_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The digest of data[0, n) as 64 lowercase hex digits and a NUL. */
void sha256_hex(const void *data, size_t n, char hex[65]);
/* The digest of a file's contents (read in pieces). Returns 0, or -1 with err. */
int sha256_file_hex(const char *path, char hex[65], char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
