/* server/http_credentials.c — Authorization header against the API key (see http_credentials.h). */
#include "server/http_credentials.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

static bool key_equal(const char *a, size_t an, const char *b, size_t bn)
{
	unsigned char d = an != bn;
	for (size_t i = 0; i < an; i++)
		d |= (unsigned char)(a[i] ^ b[i % (bn ? bn : 1)]);
	return d == 0;
}

long http_base64_decode(const char *in, size_t n, char *out, size_t cap)
{
	size_t len = 0;
	uint32_t acc = 0;
	int bits = 0, pad = 0;
	if (cap == 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		char c = in[i];
		int v;
		if (c >= 'A' && c <= 'Z') v = c - 'A';
		else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
		else if (c >= '0' && c <= '9') v = c - '0' + 52;
		else if (c == '+') v = 62;
		else if (c == '/') v = 63;
		else if (c == '=' && pad < 2) { pad++; continue; }
		else return -1;
		if (pad)
			return -1;   /* data after padding */
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (len + 1 >= cap)
				return -1;
			out[len++] = (char)((acc >> bits) & 0xff);
		}
	}
	out[len] = 0;
	return (long)len;
}

bool http_credentials_match(const char *h, const char *key)
{
	if (!h || !key)
		return false;
	size_t kn = strlen(key);
	if (strncasecmp(h, "Basic ", 6) == 0) {
		h += 6;
		while (*h == ' ')
			h++;
		size_t n = strlen(h);
		while (n > 0 && h[n - 1] == ' ')
			n--;
		char cred[1024];
		long len = http_base64_decode(h, n, cred, sizeof cred);
		const char *colon = len > 0 ? memchr(cred, ':', (size_t)len) : NULL;
		if (!colon)
			return false;
		return key_equal(colon + 1, (size_t)(cred + len - (colon + 1)), key, kn);
	}
	if (strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	while (*h == ' ')
		h++;
	return key_equal(h, strlen(h), key, kn);
}
