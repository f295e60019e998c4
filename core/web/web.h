/* web.h -- `skipq web`: the dashboard, a process of its own that reads the
 * database and serves pages and a JSON API over HTTP (web.c). */
#ifndef SQ_WEB_H
#define SQ_WEB_H

/* The command: argv[0] is "web". Returns the exit status. */
int sq_web_main(int argc, char **argv);

#endif
