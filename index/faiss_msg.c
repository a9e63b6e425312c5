/* FAISS's error text, translated at the boundary (see index_internal.h). */
#include <string.h>

#include <faiss/c_api/error_c.h>

#include "index_internal.h"

const char *qac_faiss_message(void) {
    const char *e = faiss_get_last_error();
    if (!e || !*e) return "unknown FAISS error";
    /* "Error in <signature> at <file>:<line>: <message>": the signature may
     * hold ": " itself (namespaces, arguments), so look past " at " */
    if (!strncmp(e, "Error in ", 9)) {
        const char *at = strstr(e, " at ");
        const char *colon = at ? strstr(at + 4, ": ") : NULL;
        if (colon) e = colon + 2;
    }
    /* "Error: '<condition>' failed: <message>": keep the message */
    if (!strncmp(e, "Error: '", 8)) {
        const char *failed = strstr(e, "' failed: ");
        if (failed) e = failed + 10;
    }
    return e;
}
