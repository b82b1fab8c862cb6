/* models/tokenizer_spm.h — the SentencePiece back end (tokenizer.model): an extern "C" shim over
 * sentencepiece::SentencePieceProcessor, used by tokenizer.c (and tokenizer_gguf.c, for the model a GGUF embeds). */
#ifndef AAH_TOKENIZER_SPM_H
#define AAH_TOKENIZER_SPM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tok_spm tok_spm;

tok_spm *tok_spm_open(const char *path, char *err, size_t err_len);
/* The same from a serialized ModelProto (a tokenizer.model file's bytes, as a GGUF embeds them). */
tok_spm *tok_spm_open_bytes(const void *buf, size_t len, char *err, size_t err_len);
void tok_spm_close(tok_spm *p);
int32_t tok_spm_size(const tok_spm *p);
/* The piece's spelling, valid while p lives. */
const char *tok_spm_piece(const tok_spm *p, int32_t id, size_t *len);
/* bit 0 control, bit 1 unknown, bit 2 byte, bit 3 unused */
int tok_spm_kind(const tok_spm *p, int32_t id);
int32_t tok_spm_bos(const tok_spm *p);
int32_t tok_spm_eos(const tok_spm *p);
/* True when the model prefixes text with "▁" (its normalizer's add_dummy_prefix). */
bool tok_spm_dummy_prefix(const tok_spm *p);
/* Encodes s into ids (at most cap written); returns the id count, or -1 with err. */
int64_t tok_spm_encode(const tok_spm *p, const char *s, size_t n, int32_t *ids, int64_t cap, char *err,
                       size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
