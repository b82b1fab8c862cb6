/* models/convert/sha256.h — SHA-256 (FIPS 180-4), for the provenance of imported checkpoints: the digest of the source file
 * that aah.json records, comparable with `sha256sum`. */
#ifndef AAH_SHA256_H
#define AAH_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sha256_ctx {
	uint32_t h[8];
	uint64_t n_bytes;
	uint8_t buf[64];
	size_t n_buf;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
/* Writes the 32-byte digest; c must be initialised again before reuse. */
void sha256_final(sha256_ctx *c, uint8_t digest[32]);
/* The digest of data[0, n) as 64 lowercase hex digits and a NUL. */
void sha256_hex(const void *data, size_t n, char hex[65]);
/* The digest of a file's contents (read in pieces). Returns 0, or -1 with err. */
int sha256_file_hex(const char *path, char hex[65], char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
