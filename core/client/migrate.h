/* migrate.h -- the embedded migrations (generated from sql/ at build time). */
#ifndef SQ_MIGRATE_H
#define SQ_MIGRATE_H

struct sq_migration {
    int version;
    const char *name;
    const char *sql;
};

extern const struct sq_migration sq_migrations[];
extern const int sq_migration_count;

#endif
