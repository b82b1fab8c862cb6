/* tools/convert/sha256.c — SHA-256 through nettle (see sha256.h): our part is the hex form and reading a file in
 * pieces; agreement with sha256sum is tested in tests/tools/check_torch_checkpoint.c. */
#include "tools/convert/sha256.h"

#include <errno.h>
#include <nettle/sha2.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void digest_hex(struct sha256_ctx *c, char hex[65])
{
	static const char digits[] = "0123456789abcdef";
	uint8_t d[SHA256_DIGEST_SIZE];
	sha256_digest(c, sizeof d, d);
	for (int i = 0; i < SHA256_DIGEST_SIZE; i++) {
		hex[2 * i] = digits[d[i] >> 4];
		hex[2 * i + 1] = digits[d[i] & 15];
	}
	hex[64] = 0;
}

void sha256_hex(const void *data, size_t n, char hex[65])
{
	struct sha256_ctx c;
	sha256_init(&c);
	/* nettle takes a size_t length, so one call covers a mapping of any size */
	sha256_update(&c, n, data);
	digest_hex(&c, hex);
}

int sha256_file_hex(const char *path, char hex[65], char *err, size_t err_len)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, err_len, "%s: %s", path, strerror(errno));
		return -1;
	}
	struct sha256_ctx c;
	sha256_init(&c);
	static __thread uint8_t buf[1 << 16];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		sha256_update(&c, n, buf);
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		snprintf(err, err_len, "%s: read error", path);
		return -1;
	}
	digest_hex(&c, hex);
	return 0;
}
