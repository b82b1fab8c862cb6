/* tools/convert/gguf_write.h — writes GGUF v3 files (models/gguf.h describes the layout): metadata added key by key,
 * tensors declared with their shape and type and produced one at a time while the file is written, so a model is
 * never held whole in memory. The file appears complete or not at all (written beside it, fsync'd, renamed). */
#ifndef AAH_GGUF_WRITE_H
#define AAH_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gguf_writer gguf_writer;

/* Fills dst (nbytes, the tensor's size) with tensor `index`'s data; 0, or -1 with err (the write is abandoned). */
typedef int (*gguf_fill_fn)(void *ctx, int32_t index, void *dst, size_t nbytes, char *err, size_t err_len);

/* NULL when out of memory. Free with gguf_writer_free. */
gguf_writer *gguf_writer_init(void);
void gguf_writer_free(gguf_writer *w);

/* Metadata, in the order added (a key twice is refused by gguf_writer_write). 0, or -1 when out of memory. */
int gguf_writer_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_str(gguf_writer *w, const char *key, const char *s, size_t len);
/* An array of n strings (s[i], len[i] bytes each). */
int gguf_writer_str_array(gguf_writer *w, const char *key, const char *const *s, const size_t *len, uint64_t n);
int gguf_writer_i32_array(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
int gguf_writer_f32_array(gguf_writer *w, const char *key, const float *v, uint64_t n);
int gguf_writer_u8_array(gguf_writer *w, const char *key, const void *v, uint64_t n);

/* Declares a tensor: ne in ggml order (ne[0] the contiguous dimension), ggml type (GGML_TYPE_*), data from
 * fill(ctx, index) at write time, where index is the number of tensors declared before it. 0, or -1 (out of memory,
 * or a row that is not whole blocks of the type). */
int gguf_writer_tensor(gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t ggml_type);

/* Writes path: PATH.partial-XXXXXX first, fsync'd, then renamed onto path (replacing it). Tensor data aligned to 32
 * bytes (GGUF's default, which llama.cpp expects without a general.alignment key). Returns 0, or -1 with err. */
int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *ctx, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
