/* engine/grammar/regex.h — regular expressions and choices written as GBNF (engine/grammar/grammar.h), the one form
 * the constrained-decoding engine compiles. The regex language is the RE2-like subset below, anchored at both ends
 * (the whole output must match, as vLLM's guided_regex and OpenAI's `pattern` mean it); anything outside it is
 * refused with an error that names the construct, never compiled as something else. */
#ifndef AAH_ENGINE_GRAMMAR_REGEX_H
#define AAH_ENGINE_GRAMMAR_REGEX_H

#include <stddef.h>

#include "base/bytebuf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends to out the GBNF rules of the regex re (len bytes, UTF-8): a rule `name ::= …` that matches exactly the
 * strings re matches in full, and helper rules whose names start with `name-`. name is a GBNF rule name
 * ([a-zA-Z0-9-]+). A leading ^ and trailing $ are accepted and change nothing (the match is anchored anyway).
 * Returns 0, or -1 with a message in err naming the construct and its byte offset (out may then hold a partial
 * rule; the caller discards it). Bounded: a repetition count over 1000, or a pattern that would expand to more
 * than about 1 MB of GBNF, is refused. */
int regex_gbnf(aah_bytebuf *out, const char *name, const char *re, size_t len, char *err, size_t err_len);
/* A whole grammar (root rule `root`) for the regex: malloc'd, NUL-terminated; NULL with err on refusal or when out
 * of memory. */
char *regex_to_gbnf(const char *re, size_t len, char *err, size_t err_len);
/* A whole grammar whose language is exactly the n strings s[i] (len[i] bytes each, UTF-8, any bytes escaped):
 * malloc'd; NULL with err when n is 0, a string is not valid UTF-8, or out of memory. */
char *choice_to_gbnf(const char *const *s, const size_t *len, size_t n, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
