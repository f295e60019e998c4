/* exec.h -- `skipq exec PLUGIN.so KIND PAYLOAD`: run one handler once, in this process. */
#ifndef SQ_CLI_EXEC_H
#define SQ_CLI_EXEC_H

/* The command, argv[0] being "exec". Exit status: 0 done, 1 retry or fail
 * (or the database could not be reached), 2 usage or load error. */
int sq_cli_exec(int argc, char **argv);

#endif
