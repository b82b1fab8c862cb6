/* base/parse_num.c — see parse_num.h. */
#include "base/parse_num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bool aah_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (end == s || *end || errno || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

bool aah_parse_u64(const char *s, int base, uint64_t *out)
{
	char *end;
	errno = 0;
	if (strchr(s, '-'))
		return false;
	unsigned long long v = strtoull(s, &end, base);
	if (end == s || *end || errno)
		return false;
	*out = v;
	return true;
}

bool aah_parse_f64(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v))
		return false;
	*out = v;
	return true;
}

bool aah_parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (strchr(s, '-'))
		return false;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s || errno)
		return false;
	unsigned shift = 0;
	if (*end == 'K' || *end == 'k')
		shift = 10;
	else if (*end == 'M' || *end == 'm')
		shift = 20;
	else if (*end == 'G' || *end == 'g')
		shift = 30;
	if (shift)
		end++;
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return false;
	*out = (uint64_t)v << shift;
	return true;
}

static bool is_list_sep(char c)
{
	return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '[' || c == ']';
}

int64_t aah_parse_int_list(const char *s, bool strict, int64_t lo, int64_t hi, int32_t *out, int64_t cap)
{
	int64_t n = 0;
	const char *p = s;
	for (;;) {
		if (!strict)
			while (is_list_sep(*p))
				p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		long long v = strtoll(p, &end, 10);
		if (end == p || errno || v < lo || v > hi)
			return -1;
		if (n < cap)
			out[n] = (int32_t)v;
		n++;
		p = end;
		if (strict) {
			if (*p == ',')
				p++;
			else if (*p)
				return -1;
		} else if (*p && !is_list_sep(*p)) {
			return -1;
		}
	}
	return n;
}
