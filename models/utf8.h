/* models/utf8.h — strict UTF-8 (Unicode 15 table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF), one
 * copy for the tokenizer and the unpickler: validation and decoding through utf8proc, plus the byte classes that a
 * streaming repairer (tokenizer_decode's U+FFFD substitution) needs to judge a character before it is complete. */
#ifndef AAH_UTF8_H
#define AAH_UTF8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when s[0, n) is valid UTF-8, else the 1-based offset of the first byte of the first invalid or truncated
 * sequence. */
size_t aah_utf8_check(const void *s, size_t n);
/* Decodes the character at s (n > 0 bytes left) into *cp and returns its length (1-4); a byte that does not start
 * a valid character comes back as itself, length 1. */
int aah_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* The length of the sequence that byte b leads (1-4), or 0 when b cannot lead one (a continuation byte, C0, C1,
 * F5-FF). */
int aah_utf8_seq_len(unsigned char b);
/* The bounds [*lo, *hi] of the second byte of a sequence led by b: 80-BF, narrowed after E0, ED, F0 and F4, which
 * is what rules out overlongs, surrogates and code points past U+10FFFF. */
void aah_utf8_second_range(unsigned char b, unsigned char *lo, unsigned char *hi);

#ifdef __cplusplus
}
#endif
#endif
