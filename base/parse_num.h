/* base/parse_num.h — numbers from the command line: a whole argument or nothing (no trailing text, no overflow, in
 * range), so that every tool refuses "12x", "" and "1e999" alike. Signs and leading blanks are strtol's. */
#ifndef AAH_BASE_PARSE_NUM_H
#define AAH_BASE_PARSE_NUM_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A decimal integer in [lo, hi]. Returns true and sets *out, else false and leaves *out. */
bool aah_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* An unsigned integer in base (0: 0x… hex, 0… octal, else decimal, as strtoull); a leading '-' is refused. */
bool aah_parse_u64(const char *s, int base, uint64_t *out);
/* A finite number (strtod's forms). */
bool aah_parse_f64(const char *s, double *out);
/* A byte count: decimal, optionally followed by K, M or G (binary: 2^10, 2^20, 2^30; either case). */
bool aah_parse_size(const char *s, uint64_t *out);

/* Integers in [lo, hi] in a list. strict: separated by single commas ("512,1024", a trailing comma allowed);
 * otherwise any run of commas, blanks, newlines and brackets separates them ("[1, 2, 3]"). Writes at most cap
 * values to out and returns how many the list holds (which may exceed cap: call again with room), or -1 when an
 * item is not such an integer. out may be NULL when cap is 0. */
int64_t aah_parse_int_list(const char *s, bool strict, int64_t lo, int64_t hi, int32_t *out, int64_t cap);

#ifdef __cplusplus
}
#endif
#endif
