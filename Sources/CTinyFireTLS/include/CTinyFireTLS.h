/* The module's umbrella header: every header of the shim, listed (a header added to the
 * directory alone would not be seen by an existing build's module cache). */
#include "tinyfire_crypto.h"
#include "tinyfire_tls.h"
