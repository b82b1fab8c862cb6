/* tools/aah_convert.c — aah-convert: turns models into what aahd serves, one subcommand per job (`calibrate`: a
 * pretrained model's regimes from measured attention, tools/convert/calibrate.c). This file is the dispatch. */
#include <stdio.h>
#include <string.h>

#include "tools/convert/calibrate.h"

#define CONVERT_EXIT_USAGE 2

/* A subcommand: run gets argv with argv[0] = its name; help prints its full usage. Add a row to add one. */
typedef struct convert_cmd {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
	void (*help)(FILE *f);
} convert_cmd;

static const convert_cmd cmds[] = {
	{ "calibrate", "a pretrained model -> aah.json with the regimes of table 3, from attention measured on text",
	  calibrate_main, calibrate_help },
};
#define N_CMDS (sizeof cmds / sizeof cmds[0])

static const convert_cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < N_CMDS; i++)
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

static void main_help(FILE *f)
{
	fputs("usage: aah-convert COMMAND [options] ...\n"
	      "       aah-convert COMMAND --help   (or aah-convert help COMMAND)\n\ncommands:\n", f);
	for (size_t i = 0; i < N_CMDS; i++)
		fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		main_help(stderr);
		return CONVERT_EXIT_USAGE;
	}
	const char *a = argv[1];
	if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
		main_help(stdout);
		return 0;
	}
	if (!strcmp(a, "help")) {
		if (argc == 2) {
			main_help(stdout);
			return 0;
		}
		const convert_cmd *c = find_cmd(argv[2]);
		if (c) {
			c->help(stdout);
			return 0;
		}
		a = argv[2];
	} else {
		const convert_cmd *c = find_cmd(a);
		if (c)
			return c->run(argc - 1, argv + 1);
	}
	fprintf(stderr, "aah-convert: unknown command '%s'; commands:", a);
	for (size_t i = 0; i < N_CMDS; i++)
		fprintf(stderr, " %s", cmds[i].name);
	fprintf(stderr, " (aah-convert --help)\n");
	return CONVERT_EXIT_USAGE;
}
