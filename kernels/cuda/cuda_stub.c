/* kernels/cuda/cuda_stub.c — the CUDA backend's entry points in a build without nvcc (the Makefile compiles this
 * file instead of the .cu files of kernels/cuda/): no device is ever available, and init says why. */
#include <stdio.h>

#include "kernels/backend.h"

int aah_backend_cuda_available(void)
{
	return 0;
}

aah_backend *aah_backend_cuda_init(const aah_backend_params *p, char *err, size_t err_len)
{
	(void)p;
	snprintf(err, err_len, "built without CUDA (no nvcc when this binary was built)");
	return NULL;
}

const char *aah_backend_cuda_device(const aah_backend *b)
{
	(void)b;
	return "none";
}

uint64_t aah_backend_cuda_work_measured(aah_backend *b)
{
	(void)b;
	return 0;
}

void aah_backend_cuda_graph_stats(const aah_backend *b, aah_cuda_graph_stats *out)
{
	(void)b;
	*out = (aah_cuda_graph_stats){ 0 };
}

double aah_cuda_copy_bandwidth(int32_t device, size_t bytes)
{
	(void)device;
	(void)bytes;
	return 0;
}
