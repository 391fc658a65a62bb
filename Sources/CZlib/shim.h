#ifndef TINYFIRE_CZLIB_SHIM_H
#define TINYFIRE_CZLIB_SHIM_H
#include <zlib.h>

/* inflateInit2 is a macro in zlib.h; Swift cannot call macros, so wrap it. */
static inline int tinyfire_inflate_init2(z_stream *stream, int window_bits) {
    return inflateInit2(stream, window_bits);
}

/* deflateInit2 likewise (used by request compression and by tests). */
static inline int tinyfire_deflate_init2(z_stream *stream, int level, int window_bits) {
    return deflateInit2(stream, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
}
#endif
