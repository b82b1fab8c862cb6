/* tools/eval/util.h — small helpers of aah-eval: allocation that exits on exhaustion (a command-line tool, never a
 * request path), a growable string, 64-bit hashes for cache keys, whole-file reads and a monotonic clock. */
#ifndef AAH_EVAL_UTIL_H
#define AAH_EVAL_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Allocation that prints "aah-eval: out of memory" and exits 1 when the system has none left. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));   /* caller frees */

/* A growable string, always NUL-terminated (s is NULL until the first append). */
typedef struct strbuf {
	char *s;
	size_t len, cap;
} strbuf;

void sb_add(strbuf *b, const char *s, size_t n);
void sb_adds(strbuf *b, const char *s);
void sb_addf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_vaddf(strbuf *b, const char *fmt, va_list ap);
char *sb_take(strbuf *b);   /* the string (never NULL; "" when empty), the caller frees it; b is reset */
void sb_free(strbuf *b);

/* FNV-1a over bytes, continued from h (start from EVAL_HASH_INIT); two independent 64-bit hashes of one input give
 * the 128-bit cache keys (eval_hash_hex). */
#define EVAL_HASH_INIT 0xcbf29ce484222325ull
uint64_t eval_hash(uint64_t h, const void *data, size_t n);
uint64_t eval_hash_str(uint64_t h, const char *s);   /* the string and its terminating NUL */
/* 32 hex digits of two hashes of data (FNV-1a and a mixed variant), into out[33]. */
void eval_hash_hex(const void *data, size_t n, char out[33]);

/* Reads a whole file; NULL with err set when it cannot. The caller frees the buffer (NUL-terminated). */
char *eval_read_file(const char *path, size_t *len, char *err, size_t errlen);


#ifdef __cplusplus
}
#endif
#endif
