/* tools/convert/torch_checkpoint.h — one torch.save file (PyTorch's zip format): its archive, its data.pkl read by the
 * restricted unpickler, and the bytes of any tensor in it, checked against its storage record before use. */
#ifndef AAH_TORCH_CHECKPOINT_H
#define AAH_TORCH_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/convert/pickle.h"
#include "models/safetensors.h"
#include "tools/convert/zip_reader.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_file {
	char *path;                  /* owned: for messages */
	zip_archive zip;
	char *prefix;                /* owned: "NAME/", the folder every record of the archive is in */
	pkl_doc doc;                 /* doc.root: the object torch.save was given */
	uint8_t *storage_state;      /* owned, per zip entry: 0 unchecked, else 1 + the dtype it was checked as */
} tc_file;

/* Opens path: a zip archive (zip_open_file's checks) whose records all sit in one folder NAME/ holding NAME/data.pkl
 * (checked against its CRC and read by pkl_load), and, when present, NAME/byteorder saying "little". Refused with
 * a message that says what the file is instead: the legacy formats of torch < 1.6 (a bare pickle, a tar archive),
 * a TorchScript archive, a big-endian checkpoint. Returns 0, or -1 with err. *f is zeroed first; tc_close frees it
 * in either case. */
int tc_open(tc_file *f, const char *path, char *err, size_t err_len);
/* The same for an archive in memory (data stays the caller's and must outlive f). */
int tc_open_mem(tc_file *f, const void *data, size_t size, const char *label, char *err, size_t err_len);
void tc_close(tc_file *f);

typedef struct tc_tensor {
	pkl_dtype dtype;
	int32_t n_dims;
	int64_t shape[PKL_MAX_DIMS];
	int64_t stride[PKL_MAX_DIMS];  /* elements */
	int64_t offset;                /* elements from the storage's start */
	int64_t numel;
	const uint8_t *storage;        /* the storage's first byte, inside the archive */
	int64_t storage_numel;
	int32_t storage_id;            /* the storage's zip entry: equal for tensors that share a storage */
	bool contiguous;               /* row-major without gaps: its bytes are one run */
} tc_tensor;

/* Binds a PKL_TENSOR of f's document to its bytes. The storage record NAME/data/KEY must exist, hold exactly the
 * storage's element count × element size bytes, pass its CRC-32 (checked once per storage, on first use: a storage
 * never bound is never read) and be bound with one dtype only. Returns 0, or -1 with err naming the record. */
int tc_tensor_bind(tc_file *f, const pkl_value *v, tc_tensor *out, char *err, size_t err_len);

/* Whether a tensor of this dtype can be read as a model weight (F32, F16, BF16, F64). */
bool tc_dtype_is_float(pkl_dtype d);

/* Writes elements [first, first + n) of t, in row-major order of its shape (a contiguous copy of a view), into dst
 * as `as`: F32, F16 and BF16 sources are copied when `as` is their own type, widened exactly to F32, or rounded to
 * nearest even into F16/BF16 (F64 is rounded to F32 first). t must be bound and of a float dtype;
 * first + n ≤ numel. */
void tc_tensor_read(const tc_tensor *t, st_dtype as, void *dst, int64_t first, int64_t n);

/* The st_dtype of a float pkl_dtype (F64 → F32, the type it is read as by default). */
st_dtype tc_dtype_to_st(pkl_dtype d);

#ifdef __cplusplus
}
#endif
#endif
