/* models/tokenizer_bpe.h — the byte-level BPE back end of the tokenizer (tokenizer.json: Qwen3, Llama 3, GPT-2):
 * loading its model, encoding a segment of text; used by tokenizer.c only. */
#ifndef AAH_TOKENIZER_BPE_H
#define AAH_TOKENIZER_BPE_H

#include "models/tokenizer_table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses a parsed tokenizer.json (a jansson json_t *) into t; 0 or -1 with err. */
int tok_bpe_load(tokenizer *t, void *json_root, char *err, size_t err_len);
void tok_bpe_free(tok_bpe *b);
/* Encodes one segment of raw text that holds no added token of the raw pass. */
int tok_bpe_encode_text(const tokenizer *t, tok_scratch *sc, const char *s, size_t n, tok_sink *sink);
void tok_bpe_scratch_free(tok_scratch *sc);

#ifdef __cplusplus
}
#endif
#endif
