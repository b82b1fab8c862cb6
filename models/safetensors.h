/* models/safetensors.h — memory-mapped safetensors files (single or sharded), validated before use.
 * Tensors point into the mapping; nothing is copied. */
#ifndef AAH_SAFETENSORS_H
#define AAH_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Same values as aah_dtype. The block types (kernels/quant.h) come only from GGUF files: a row of shape[last] values
 * is aah_dtype_row_bytes of them. */
typedef enum st_dtype {
	ST_F32 = 0, ST_F16 = 1, ST_BF16 = 2,
	ST_Q8_0 = 3, ST_Q4_0 = 4, ST_Q4_K = 5, ST_Q5_K = 6, ST_Q6_K = 7, ST_Q8_K = 8,
} st_dtype;

#define ST_MAX_DIMS 4
#define ST_MAX_HEADER (100u << 20)   /* header length bound: 100 MiB */

typedef struct st_tensor {
	char *name;                  /* owned by the st_set */
	st_dtype dtype;
	int32_t n_dims;
	int64_t shape[ST_MAX_DIMS];
	const void *data;            /* inside the mapping; aligned only as the file aligns it (writers pad the
	                              * header to 8 bytes, but nothing forces them to) */
	size_t nbytes;
	int32_t file;                /* index into st_set.files */
	void *owned;                 /* a copy the set owns when the file left the tensor misaligned; else NULL */
} st_tensor;

typedef struct st_file {
	char *path;
	void *map;
	size_t size;
} st_file;

typedef struct st_set {
	st_file *files;
	int32_t n_files;
	st_tensor *tensors;          /* sorted by name */
	int32_t n_tensors;
} st_set;

/* Parses one file's header. json: the header bytes (not NUL-terminated), data_len: bytes after the header.
 * On success fills *out (malloc'd array; names malloc'd; data = offsets cast to pointers relative to 0,
 * i.e. (const void *)begin) and returns 0. On any problem writes a message into err and returns -1.
 * Checks: valid JSON object, known dtype, shape × element size == byte span, spans inside data_len and
 * non-overlapping, no duplicate names. Free with st_tensors_free. */
int st_parse_header(const char *json, size_t json_len, size_t data_len, st_tensor **out, int32_t *n_out,
                    char *err, size_t err_len);
void st_tensors_free(st_tensor *t, int32_t n);

/* Opens the shards named by `model.safetensors.index.json` in dir when it exists, else `model.safetensors`.
 * *s need not be initialised; on failure it is left zeroed. Returns 0, or -1 with a message naming the file
 * (and tensor) in err. Close with st_close (safe on a zeroed set). */
int st_open_dir(st_set *s, const char *dir, char *err, size_t err_len);
/* Opens one file. */
int st_open_file(st_set *s, const char *path, char *err, size_t err_len);
void st_close(st_set *s);

/* NULL when absent. */
const st_tensor *st_find(const st_set *s, const char *name);

/* Tells the OS that t's bytes need not stay resident: the whole pages of the mapping inside them leave this process's
 * memory, and are read from the file again if anything touches them later (the mapping is private and never written,
 * so the data stays valid). For a weight a backend has copied (packed or moved to a device), whose mapped bytes would
 * otherwise sit in memory beside the copy. A tensor the set holds as its own copy (misaligned in its file) stays. */
void st_tensor_drop_pages(const st_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
