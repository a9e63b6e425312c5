/* The backend's prompts (qac_model.h "Prompts") by name, for the routes
 * that apply them: /search, /encode and /v1/embeddings (srv_handlers.c)
 * and TEI's /embed and /tokenize (srv_tei.c). Reads the backend only. */
#include <stdio.h>
#include <string.h>

#include "srv_internal.h"

const char *qac_srv_prompt(const qac_server *s, const char *name) {
    for (int i = 0; name && i < s->be.n_prompts; i++)
        if (!strcmp(s->be.prompt_names[i], name)) return s->be.prompt_texts[i];
    return NULL;
}

const char *qac_srv_default_prompt(const qac_server *s) {
    const char *p = s->be.default_prompt_name ? qac_srv_prompt(s, s->be.default_prompt_name) : NULL;
    return p ? p : "";
}

void qac_srv_prompt_names(const qac_server *s, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->be.n_prompts && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s\"%s\"", i ? ", " : "", s->be.prompt_names[i]);
}
