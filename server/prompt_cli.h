/* server/prompt_cli.h — `aahd --prompt …`: runs one prompt through the engine from the command line and
 * prints the generated ids and text, with prefill and decode speed; no HTTP. */
#ifndef AAH_PROMPT_CLI_H
#define AAH_PROMPT_CLI_H

#include <stdint.h>

#include "engine/engine.h"
#include "engine/sampler.h"

typedef struct prompt_cli_args {
	const char *model_dir;
	const char *prompt_text;    /* or NULL */
	const char *prompt_ids;     /* comma-separated ids, or NULL */
	int32_t n_predict;
	sampler_params sampling;
	engine_params engine;
	const char *regime;         /* NULL: the model's default */
	int quiet;                  /* print only the ids */
} prompt_cli_args;

/* Returns the process exit status: 0, 1 on a runtime error, 2 on bad arguments. */
int prompt_cli_run(const prompt_cli_args *a);

#endif
