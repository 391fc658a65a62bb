/* The few Swift runtime entry points Embedded Swift's stdlib still calls on Linux and does not
 * carry itself. Linked into the Embedded binaries only (the full build has the real runtime). */
#include <stdlib.h>

/* Double(String): parse with the C locale and return where parsing stopped; the stdlib accepts
 * the text only when that is its end. fire-agent never calls setlocale, so strtod's locale is
 * "C". */
const char *_swift_stdlib_strtod_clocale(const char *text, double *result) {
    char *end = NULL;
    *result = strtod(text, &end);
    return end;
}

const char *_swift_stdlib_strtof_clocale(const char *text, float *result) {
    char *end = NULL;
    *result = strtof(text, &end);
    return end;
}
