/* assets.h -- the dashboard's page, script and style, compiled into the
 * binary from core/web/assets/ by cmake/embed_assets.cmake, so an
 * installed skipq needs no files of its own to serve them. */
#ifndef SQ_WEB_ASSETS_H
#define SQ_WEB_ASSETS_H

#include <stddef.h>

struct sq_web_asset {
    const char *path; /* "/index.html", "/assets/app.js" */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
};

extern const struct sq_web_asset sq_web_assets[];
extern const int sq_web_asset_count;

#endif
