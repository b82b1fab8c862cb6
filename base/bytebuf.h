/* base/bytebuf.h — a growing byte buffer: appends that double its capacity, and an out-of-memory flag that sticks,
 * so a writer appends freely and asks once at the end. The GGUF writer's metadata, the safetensors writer's header
 * and the SentencePiece model rebuilt from a GGUF are built in one. */
#ifndef AAH_BASE_BYTEBUF_H
#define AAH_BASE_BYTEBUF_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aah_bytebuf {
	unsigned char *p;   /* malloc'd; NULL while empty */
	size_t n, cap;      /* bytes held, bytes allocated */
	bool oom;           /* an append failed: every later one fails too, and p holds what came before */
} aah_bytebuf;

/* Appends the n bytes at s (n may be 0). Returns 0, or -1 with oom set (out of memory, or oom already set). */
int aah_bytebuf_put(aah_bytebuf *b, const void *s, size_t n);
/* Frees p and empties b. */
void aah_bytebuf_free(aah_bytebuf *b);

#ifdef __cplusplus
}
#endif
#endif
