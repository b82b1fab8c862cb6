/* tools/convert/safetensors_write.h — writes one safetensors file, streaming tensor data so multi-GB models never sit in
 * memory; plus the f32 → bf16 / f16 conversions (round to nearest even) that writers and converters share. */
#ifndef AAH_SAFETENSORS_WRITE_H
#define AAH_SAFETENSORS_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "models/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_writer st_writer;

/* Fills out with elements [first, first + n) of a tensor (row-major, flattened), already in the tensor's dtype
 * (n × element size bytes). Called with increasing, contiguous ranges; the writer picks n (up to a few MiB).
 * Returns 0, or -1 with a message in err, which aborts the file. */
typedef int (*st_fill_fn)(void *ctx, void *out, int64_t first, int64_t n, char *err, size_t err_len);

/* Starts a file at path. Nothing touches the disk until st_writer_close, which writes path.tmp and renames
 * it onto path, so a crash never leaves a half-written path. err (err_len bytes) receives the message of
 * this and of every later failing call, so it must outlive the writer. Returns NULL on failure
 * (out of memory, empty path). Finish with st_writer_close or st_writer_discard. */
st_writer *st_writer_open(const char *path, char *err, size_t err_len);

/* Adds a string entry to "__metadata__" (e.g. "format" → "pt", which Hugging Face loaders expect).
 * Copies key and value. Returns 0 or -1. */
int st_writer_set_metadata(st_writer *w, const char *key, const char *value);

/* Adds a tensor whose bytes are in data (n_dims ≤ ST_MAX_DIMS; 0 dims = a scalar). data is not copied:
 * it must stay valid until st_writer_close returns. The name is copied; a duplicate name (found at close,
 * after sorting) makes st_writer_close fail. Returns 0, or -1 (bad dtype, shape, name; out of memory). */
int st_writer_add(st_writer *w, const char *name, st_dtype dtype, int32_t n_dims, const int64_t *shape,
                  const void *data);
/* Adds a tensor whose bytes come from fill(ctx, …) at close time; ctx must stay valid until then. */
int st_writer_add_fill(st_writer *w, const char *name, st_dtype dtype, int32_t n_dims, const int64_t *shape,
                       st_fill_fn fill, void *ctx);

/* Bytes the tensors added so far will take (data only, no header). */
uint64_t st_writer_data_bytes(const st_writer *w);

/* Writes the file and frees w (always, even on failure). Layout: 8-byte little-endian header length N,
 * then N bytes of JSON — "__metadata__" first, then the tensors with keys sorted by name — padded with
 * spaces to a multiple of 8, then the data. Data is laid out in the order tensors were added, except
 * that wider dtypes come first (F32 before F16/BF16, as Hugging Face does) so every tensor stays aligned
 * to its element size. Returns 0, or -1 with err set and no file left behind (neither path nor path.tmp). */
int st_writer_close(st_writer *w);
/* Frees w without writing anything. NULL is fine. */
void st_writer_discard(st_writer *w);

/* IEEE float → bfloat16 bits, round to nearest, ties to even. NaN stays NaN (quiet, sign kept); values that
 * round past the largest bf16 become ±inf; subnormals round like any other value. */
uint16_t st_f32_to_bf16(float x);
/* IEEE float → binary16 bits, round to nearest, ties to even, f16 subnormals included; |x| ≥ 65520 → ±inf;
 * NaN stays NaN. */
uint16_t st_f32_to_f16(float x);
/* Converts n floats into dst in dtype (F32 copies). dst holds n × (4 or 2) bytes. */
void st_convert_f32(void *dst, st_dtype dtype, const float *src, size_t n);

#ifdef __cplusplus
}
#endif
#endif
