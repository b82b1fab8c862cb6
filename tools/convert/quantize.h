/* tools/convert/quantize.h — `aah-convert quantize`: a Hugging Face model directory or a run directory → one GGUF
 * file that llama.cpp loads (its tensor names, metadata and tokenizer keys), weights in one type or a _M mix. */
#ifndef AAH_QUANTIZE_H
#define AAH_QUANTIZE_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The subcommand: argv[0] is its name ("quantize"). Returns the exit status: 0, 1 on failure, 2 on a usage error. */
int quantize_main(int argc, char **argv);
void quantize_help(FILE *f);

#ifdef __cplusplus
}
#endif
#endif
