/* kernels/dtype.c — element types shared by every backend. */
#include "kernels/backend.h"

#include <string.h>

size_t aah_dtype_size(aah_dtype t)
{
	switch (t) {
	case AAH_DTYPE_F32: return 4;
	case AAH_DTYPE_F16: return 2;
	case AAH_DTYPE_BF16: return 2;
	}
	return 0;
}

const char *aah_dtype_name(aah_dtype t)
{
	switch (t) {
	case AAH_DTYPE_F32: return "f32";
	case AAH_DTYPE_F16: return "f16";
	case AAH_DTYPE_BF16: return "bf16";
	}
	return "?";
}

int aah_dtype_from_name(const char *name, aah_dtype *out)
{
	for (aah_dtype t = AAH_DTYPE_F32; t <= AAH_DTYPE_BF16; t++)
		if (!strcmp(name, aah_dtype_name(t))) {
			*out = t;
			return 0;
		}
	return -1;
}
