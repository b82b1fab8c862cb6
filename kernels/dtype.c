/* kernels/dtype.c — element types shared by every backend. */
#include "kernels/backend.h"

#include <string.h>

size_t aah_dtype_size(aah_dtype t)
{
	switch (t) {
	case AAH_DTYPE_F32: return 4;
	case AAH_DTYPE_F16: return 2;
	case AAH_DTYPE_BF16: return 2;
	case AAH_DTYPE_Q8_0: case AAH_DTYPE_Q4_0: case AAH_DTYPE_Q4_K: case AAH_DTYPE_Q5_K: case AAH_DTYPE_Q6_K:
	case AAH_DTYPE_Q8_K: return 0;
	}
	return 0;
}

const char *aah_dtype_name(aah_dtype t)
{
	switch (t) {
	case AAH_DTYPE_F32: return "f32";
	case AAH_DTYPE_F16: return "f16";
	case AAH_DTYPE_BF16: return "bf16";
	case AAH_DTYPE_Q8_0: return "q8_0";
	case AAH_DTYPE_Q4_0: return "q4_0";
	case AAH_DTYPE_Q4_K: return "q4_k";
	case AAH_DTYPE_Q5_K: return "q5_k";
	case AAH_DTYPE_Q6_K: return "q6_k";
	case AAH_DTYPE_Q8_K: return "q8_k";
	}
	return "?";
}

/* Only the float types: a KV cache or an activation type is named here, never a block type. */
int aah_dtype_from_name(const char *name, aah_dtype *out)
{
	for (aah_dtype t = AAH_DTYPE_F32; t <= AAH_DTYPE_BF16; t++)
		if (!strcmp(name, aah_dtype_name(t))) {
			*out = t;
			return 0;
		}
	return -1;
}
