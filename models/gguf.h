/* models/gguf.h — GGUF v2/v3 files (llama.cpp's format) parsed from memory: the key/value metadata and the tensor
 * directory, every count, length, offset, size and alignment checked before it is trusted. Nothing is copied: keys,
 * strings and tensor data point into the caller's buffer (a read-only mapping of the file).
 *
 * The layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv × {string key, u32 type, value};
 * n_tensors × {string name, u32 n_dims, n_dims × u64 ne, u32 ggml type, u64 offset}; padding to general.alignment
 * (default 32); the data section, each tensor at data + offset (a multiple of the alignment). A string is u64 length
 * + bytes (no NUL); an array is u32 element type + u64 count + elements. ne[0] is the fastest-moving dimension. */
#ifndef AAH_GGUF_H
#define AAH_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gguf_type {
	GGUF_TYPE_UINT8 = 0,
	GGUF_TYPE_INT8 = 1,
	GGUF_TYPE_UINT16 = 2,
	GGUF_TYPE_INT16 = 3,
	GGUF_TYPE_UINT32 = 4,
	GGUF_TYPE_INT32 = 5,
	GGUF_TYPE_FLOAT32 = 6,
	GGUF_TYPE_BOOL = 7,
	GGUF_TYPE_STRING = 8,
	GGUF_TYPE_ARRAY = 9,
	GGUF_TYPE_UINT64 = 10,
	GGUF_TYPE_INT64 = 11,
	GGUF_TYPE_FLOAT64 = 12,
} gguf_type;

/* ggml's tensor type numbers for the types aahd reads (ggml.h enum ggml_type). */
enum {
	GGML_TYPE_F32 = 0,
	GGML_TYPE_F16 = 1,
	GGML_TYPE_Q4_0 = 2,
	GGML_TYPE_Q8_0 = 8,
	GGML_TYPE_Q4_K = 12,
	GGML_TYPE_Q5_K = 13,
	GGML_TYPE_Q6_K = 14,
	GGML_TYPE_BF16 = 30,
};

#define GGUF_DEFAULT_ALIGNMENT 32
/* aahd's own key (llama.cpp ignores it): a SentencePiece tokenizer's tokenizer.model bytes, a u8 array. */
#define GGUF_SPM_MODEL_KEY "aah.tokenizer.sentencepiece_model"
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_STRING (64u << 20)      /* one string: 64 MiB (a chat template is kilobytes) */

/* A string inside the buffer: not NUL-terminated. */
typedef struct gguf_str {
	const char *s;
	uint64_t len;
} gguf_str;

typedef struct gguf_kv {
	gguf_str key;
	gguf_type type;
	gguf_type arr_type;          /* for GGUF_TYPE_ARRAY: the element type (never ARRAY: nested arrays refused) */
	uint64_t n;                  /* array: element count; else 1 */
	const uint8_t *data;         /* scalar or array of numbers: its bytes (little-endian, unaligned) */
	gguf_str str;                /* GGUF_TYPE_STRING */
	gguf_str *strs;              /* array of strings: n of them, owned by the gguf_file */
} gguf_kv;

typedef struct gguf_tensor_info {
	gguf_str name;
	uint32_t n_dims;
	int64_t ne[GGUF_MAX_DIMS];   /* ne[0] fastest; unused dimensions 1 */
	uint32_t type;               /* GGML_TYPE_* */
	uint64_t offset;             /* from the start of the data section */
	uint64_t nbytes;
	const void *data;            /* inside the buffer */
} gguf_tensor_info;

typedef struct gguf_file {
	uint32_t version;
	uint32_t alignment;
	gguf_kv *kv;                 /* (n_kv) owned */
	int64_t n_kv;
	gguf_tensor_info *tensors;   /* (n_tensors) owned, in file order */
	int64_t n_tensors;
	size_t data_offset;          /* where the data section starts in the buffer */
} gguf_file;

/* Parses buf[0 … len) into *g (zeroed first). Checks: magic, version 2 or 3, every length and count against the
 * bytes left, known value types, keys non-empty and unique, general.alignment a u32 power of two,
 * tensor names unique, 1–4 dimensions each ≥ 1 with a product that fits, a supported type whose block length
 * divides ne[0], each offset a multiple of the alignment, each tensor inside the buffer and none overlapping.
 * Returns 0, or -1 with a message naming the key or tensor in err. g points into buf: keep buf alive while g is
 * used. Free with gguf_free (safe on a zeroed or failed g). */
int gguf_parse(gguf_file *g, const void *buf, size_t len, char *err, size_t err_len);
void gguf_free(gguf_file *g);

/* The key, or NULL. */
const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key);
/* The tensor, or NULL. */
const gguf_tensor_info *gguf_find_tensor(const gguf_file *g, const char *name);

/* Typed getters: 1 found and converted, 0 absent, -1 present with a type that does not fit (message in err naming
 * the key). An integer accepts any integer type whose value fits; a float accepts FLOAT32/FLOAT64. */
int gguf_get_int(const gguf_file *g, const char *key, int64_t *out, char *err, size_t err_len);
int gguf_get_float(const gguf_file *g, const char *key, double *out, char *err, size_t err_len);
int gguf_get_bool(const gguf_file *g, const char *key, bool *out, char *err, size_t err_len);
int gguf_get_str(const gguf_file *g, const char *key, gguf_str *out, char *err, size_t err_len);
/* Element i of an array of numbers as int64 / double (the caller checked i < n and the element type). */
int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i);
double gguf_arr_float(const gguf_kv *kv, uint64_t i);

/* "F32", "Q4_K", … for a ggml type aahd reads, else NULL. */
const char *gguf_ggml_type_name(uint32_t type);
/* The aah_dtype (kernels/backend.h) of a ggml type aahd reads; -1 for any other. */
int gguf_ggml_to_aah(uint32_t type);
/* The ggml type of an aah_dtype that a file can hold; -1 for Q8_K (activations only) or anything else. */
int gguf_aah_to_ggml(int aah_dtype);

#ifdef __cplusplus
}
#endif
#endif
