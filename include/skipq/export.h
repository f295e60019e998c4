/*
 * skipq/export.h -- SKIPQ_API, the mark of a function libskipq exports.
 *
 * libskipq is built with every symbol hidden (-fvisibility=hidden), so
 * only what a public header marks SKIPQ_API reaches its dynamic symbol
 * table: the skipq_* calls of skipq.h and version.h, nothing internal. A
 * program that links libskipq sees the same declarations; for it the mark
 * changes nothing. (Plugins export their one symbol through SKIPQ_PLUGIN()
 * in plugin.h, and link nothing from skipq.)
 */
#ifndef SKIPQ_EXPORT_H
#define SKIPQ_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define SKIPQ_API __attribute__((visibility("default")))
#else
#define SKIPQ_API
#endif

#endif /* SKIPQ_EXPORT_H */
