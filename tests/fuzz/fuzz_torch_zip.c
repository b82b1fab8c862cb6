/* tests/fuzz/fuzz_torch_zip.c — libFuzzer target for the zip reader and torch_checkpoint: the input is a whole
 * torch.save file, opened from memory; every entry's CRC is checked, every tensor of a top-level dict (and of its
 * "model" dict) is bound to its storage and read out, as the importer does. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tools/convert/torch_checkpoint.h"
#include "tools/convert/zip_reader.h"

const char *fuzz_corpus_dir = "tests/fuzz/corpus/torch_zip";

static void read_tensors(tc_file *f, const pkl_value *d)
{
	static float out[256];
	for (size_t i = 0; d && d->type == PKL_DICT && i < d->u.seq.n / 2; i++) {
		tc_tensor t;
		char err[512];
		if (tc_tensor_bind(f, d->u.seq.v[2 * i + 1], &t, err, sizeof err) || !tc_dtype_is_float(t.dtype))
			continue;
		int64_t n = t.numel < 256 ? t.numel : 256;
		tc_tensor_read(&t, ST_F32, out, 0, n);
		tc_tensor_read(&t, ST_BF16, out, t.numel - n, n);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[1024];
	zip_archive z;
	if (zip_open_mem(&z, data, size, "fuzz.zip", err, sizeof err) == 0)
		for (int32_t i = 0; i < z.n_entries; i++)
			(void)zip_entry_check(&z, &z.entries[i], err, sizeof err);
	zip_close(&z);
	tc_file f;
	if (tc_open_mem(&f, data, size, "fuzz.pt", err, sizeof err) == 0) {
		read_tensors(&f, f.doc.root);
		read_tensors(&f, pkl_dict_get(f.doc.root, "model"));
	}
	tc_close(&f);
	return 0;
}
