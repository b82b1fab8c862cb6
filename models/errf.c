/* models/errf.c — see errf.h. */
#include "models/errf.h"

#include <stdarg.h>
#include <stdio.h>

void aah_errf(char *err, size_t err_len, const char *fmt, ...)
{
	if (!err || !err_len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}
