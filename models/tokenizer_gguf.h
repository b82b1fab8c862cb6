/* models/tokenizer_gguf.h — the tokenizer of a GGUF file (tokenizer.ggml.*) for tokenizer.c: byte-level BPE through
 * tokenizer_bpe.c, SentencePiece through the model the file embeds. */
#ifndef AAH_TOKENIZER_GGUF_H
#define AAH_TOKENIZER_GGUF_H

#include <stddef.h>

#include "models/tokenizer_spm.h"
#include "models/tokenizer_table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tokenizer_gguf.c: the tokenizer.ggml.* keys of a GGUF file (path, or its bytes) into t (cleared: bos = eos = -1),
 * as tok_bpe_load does for tokenizer.json (BOS, EOS and add_bos_token included); 0 or -1 with err. */
int tok_gguf_load(tokenizer *t, const char *path, char *err, size_t err_len);
int tok_gguf_load_buffer(tokenizer *t, const void *buf, size_t len, char *err, size_t err_len);
/* tokenizer.c: a SentencePiece model already opened (p, owned by t from here on) into t, as for tokenizer.model. */
int tok_spm_load_opened(tokenizer *t, tok_spm *p, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
