/* tools/eval/pytext.h — the Python string operations that lm-evaluation-harness's templates, filters and metrics use
 * (str.strip, str.capitalize, len, re.sub, re.findall with the RegexFilter's choice of match, string.punctuation),
 * over UTF-8, so that a prompt or a score built here is the one the harness builds. Every returned string is new;
 * the caller frees it. */
#ifndef AAH_EVAL_PYTEXT_H
#define AAH_EVAL_PYTEXT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

bool py_isspace(uint32_t cp);                       /* str.isspace() of one code point */
size_t py_len(const char *s, size_t n);             /* len(str): code points */
size_t py_rstrip_len(const char *s, size_t n);      /* bytes left after str.rstrip() */
char *py_strip(const char *s);                      /* str.strip() */
char *py_lstrip(const char *s);                     /* str.lstrip() */
char *py_capitalize(const char *s);                 /* str.capitalize(): first in title case, the rest lower */
char *py_lower(const char *s);                      /* str.lower() (one code point to one) */
char *py_replace(const char *s, const char *old, const char *with);   /* str.replace(old, with), old non-empty */
char *py_remove_punctuation(const char *s);         /* s.translate(str.maketrans("", "", string.punctuation)) */

/* Text from JSON may hold U+0000 (a model can generate it); C strings here carry it as the two bytes C0 80
 * (modified UTF-8), which no pattern matches and py_text_json turns back into U+0000. */
char *py_text_from_json(const char *s, size_t n);   /* new string: each NUL of s[0..n) as C0 80 */
bool py_text_has_nul(const char *s);
/* A JSON string of s with C0 80 as U+0000 and any other invalid byte as '?'. */
json_t *py_text_json(const char *s);

/* A compiled regular expression (PCRE2, UTF and Unicode classes, as Python 3's re on str; matches never cross a
 * byte that is not UTF-8). */
typedef struct py_regex py_regex;
py_regex *py_regex_compile(const char *pattern, char *err, size_t errlen);
void py_regex_free(py_regex *re);
/* re.sub(pattern, with, s): every match replaced by the literal text `with`. */
char *py_regex_sub(const py_regex *re, const char *s, const char *with);
/* lm-evaluation-harness RegexFilter: m = re.findall(s); if m: pick m[group_select] (negative from the end); a tuple
 * (two or more groups) gives its first non-empty group or the fallback; the pick is .strip()ped; no match: the
 * fallback. */
char *py_regex_filter(const py_regex *re, const char *s, int group_select, const char *fallback);
/* Splits s at every match (re.split), returning the number of pieces (the harness counts words this way). */
int64_t py_regex_split_count(const py_regex *re, const char *s);

#ifdef __cplusplus
}
#endif
#endif
