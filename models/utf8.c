/* models/utf8.c — strict UTF-8 (see utf8.h): utf8proc decides what is valid; ASCII runs, the common case, are
 * skipped here without a call. */
#include "models/utf8.h"

#include <utf8proc.h>

size_t aah_utf8_check(const void *p, size_t n)
{
	const unsigned char *s = p;
	size_t i = 0;
	while (i < n) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		utf8proc_int32_t cp;
		utf8proc_ssize_t len = utf8proc_iterate(s + i, n - i > 4 ? 4 : (utf8proc_ssize_t)(n - i), &cp);
		if (len <= 0)
			return i + 1;
		i += (size_t)len;
	}
	return 0;
}

int aah_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	utf8proc_int32_t c;
	utf8proc_ssize_t len = utf8proc_iterate(s, n > 4 ? 4 : (utf8proc_ssize_t)n, &c);
	if (len <= 0) {
		*cp = s[0];
		return 1;
	}
	*cp = (uint32_t)c;
	return (int)len;
}

int aah_utf8_seq_len(unsigned char b)
{
	if (b < 0x80) return 1;
	if (b >= 0xC2 && b <= 0xDF) return 2;
	if (b >= 0xE0 && b <= 0xEF) return 3;
	if (b >= 0xF0 && b <= 0xF4) return 4;
	return 0;
}

void aah_utf8_second_range(unsigned char b, unsigned char *lo, unsigned char *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (b == 0xE0) *lo = 0xA0;
	else if (b == 0xED) *hi = 0x9F;
	else if (b == 0xF0) *lo = 0x90;
	else if (b == 0xF4) *hi = 0x8F;
}
