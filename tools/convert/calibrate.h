/* tools/convert/calibrate.h — `aah-convert calibrate`: AAH-converts a pretrained model by measuring where its heads
 * attend on calibration text and writing aah.json with the principal regimes of the paper's table 3. */
#ifndef AAH_CALIBRATE_H
#define AAH_CALIBRATE_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The subcommand: argv[0] is its name ("calibrate"). Returns the exit status: 0, 1 on failure, 2 on a usage error. */
int calibrate_main(int argc, char **argv);
/* Its full usage, every flag. */
void calibrate_help(FILE *f);

#ifdef __cplusplus
}
#endif
#endif
