/* qac info: describe a model directory (config, size, pooling, tokenizer,
 * fingerprint). */
#include <jansson.h>
#include <stdio.h>

#include "cli.h"
#include "qac_model.h"
#include "qac_util.h"

static const qac_opt info_opts[] = {
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_MODEL", "model directory (default: all-MiniLM-L6-v2)", 0},
    {"json", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL, "print one JSON object instead of text", 0},
};
#define N_INFO_OPTS ((int)(sizeof info_opts / sizeof info_opts[0]))

static const char *tokenizer_kind(const qac_model *m) { return m->tok ? qac_tokenizer_kind_name(m->tok) : "none"; }

static const char *tokenizer_source(const qac_model *m) { return m->tok ? qac_tokenizer_describe(m->tok) : ""; }

/* What the family's config chose: positions, norms, feed-forward, windows. */
static const char *family_line(const qac_bert_config *c) {
    static char buf[256];
    if (c->family == QAC_FAMILY_MODERNBERT)
        snprintf(buf, sizeof buf,
                 "rotary positions (theta %g global, %g local), pre-LayerNorm%s, GeGLU, global attention every "
                 "%d layers and local within %d tokens each side",
                 (double)c->rope_theta, (double)c->rope_theta_local, c->no_norm_bias ? " without biases" : "",
                 c->global_every, c->local_window / 2);
    else
        snprintf(buf, sizeof buf, "learned positions%s, post-LayerNorm, GELU, global attention",
                 c->positions == QAC_POS_OFFSET ? " offset past the padding index" : "");
    return buf;
}

int qac_cmd_info(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "info", "[--model DIR] [--json]", info_opts, N_INFO_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.n_positional) {
        fprintf(stderr, "qac info: unexpected argument '%s'\n(see 'qac info --help')\n", o.positional[0]);
        qac_opts_free(&o);
        return 2;
    }
    char buf[4096];
    const char *dir = qac_cli_model_dir(&o, buf, sizeof buf);
    int as_json = qac_opts_bool(&o, "json");
    if (!dir) {
        qac_opts_free(&o);
        return qac_cli_fail("info");
    }
    double t0 = qac_now();
    qac_model *m;
    if (qac_model_load(&m, dir) != QAC_OK) {
        qac_opts_free(&o);
        return qac_cli_fail("info");
    }
    double load_s = qac_now() - t0;
    const qac_bert_config *c = &m->cfg;
    char gpu[1024];
    qac_cuda_describe(gpu, sizeof gpu);
    int tok_vocab = m->tok ? qac_tokenizer_vocab_size(m->tok) : 0;
    if (as_json) {
        json_t *j = json_pack(
            "{s:s, s:s, s:{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f}, s:I, s:s, s:b, s:i, "
            "s:{s:s, s:s, s:i}, s:s, s:f}",
            "name", m->name, "dir", m->dir, "config", "model_type", qac_family_name(c->family), "vocab_size",
            c->vocab_size,
            "hidden_size", c->hidden_size, "num_hidden_layers", c->num_layers, "num_attention_heads", c->num_heads,
            "intermediate_size", c->intermediate_size, "max_position_embeddings", c->max_position,
            "type_vocab_size", c->type_vocab_size, "pad_token_id", c->pad_token_id, "layer_norm_eps",
            (double)c->layer_norm_eps, "parameters", (json_int_t)m->n_params, "pooling", qac_pooling_name(m->pooling),
            "normalize", m->normalize, "max_seq_len", m->max_seq_len, "tokenizer", "kind", tokenizer_kind(m),
            "source", tokenizer_source(m), "vocab_size", tok_vocab, "fingerprint", m->fingerprint, "load_seconds", load_s);
        if (j) json_object_set_new(j, "gpu", json_string(gpu));
        if (j) json_object_set_new(j, "family", json_string(family_line(c)));
        json_t *named = json_object();
        for (int i = 0; named && i < m->n_prompts; i++)
            json_object_set_new(named, m->prompt_names[i], json_string(m->prompt_texts[i]));
        if (j && named)
            json_object_set_new(j, "prompts",
                                json_pack("{s:s, s:s, s:s, s:O, s:b}", "query", qac_model_query_prompt(m), "passage",
                                          qac_model_passage_prompt(m), "default_prompt_name",
                                          m->default_prompt_name ? m->default_prompt_name : "", "named", named,
                                          "include_prompt", m->include_prompt));
        json_decref(named);
        char *txt = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) : NULL;
        if (txt) printf("%s\n", txt);
        free(txt);
        json_decref(j);
    } else {
        printf("name            %s\n", m->name);
        printf("directory       %s\n", m->dir);
        printf("architecture    %s: %d layers, hidden %d, %d heads, intermediate %d\n", qac_family_name(c->family),
               c->num_layers, c->hidden_size, c->num_heads, c->intermediate_size);
        printf("family          %s\n", family_line(c));
        printf("vocab_size      %d\n", c->vocab_size);
        printf("max_position    %d\n", c->max_position);
        printf("type_vocab_size %d\n", c->type_vocab_size);
        printf("layer_norm_eps  %g\n", (double)c->layer_norm_eps);
        printf("pad_token_id    %d\n", c->pad_token_id);
        printf("parameters      %zu (%.1f MB as fp32)\n", m->n_params, (double)m->n_params * 4 / 1e6);
        printf("pooling         %s\n", qac_pooling_name(m->pooling));
        printf("normalize       %s\n", m->normalize ? "yes" : "no");
        printf("max_seq_len     %d\n", m->max_seq_len);
        printf("tokenizer       %s, %d tokens (%s)\n", tokenizer_kind(m), tok_vocab, tokenizer_source(m));
        char qp[256], pp[256];
        printf("prompts         query %s, passage %s%s%s%s\n", qac_cli_quote_prompt(qp, sizeof qp, qac_model_query_prompt(m)),
               qac_cli_quote_prompt(pp, sizeof pp, qac_model_passage_prompt(m)),
               m->default_prompt_name ? ", default " : "", m->default_prompt_name ? m->default_prompt_name : "",
               m->include_prompt ? "" : " (left out of the pooling)");
        printf("fingerprint     %s\n", m->fingerprint);
        printf("load_time       %.3f s\n", load_s);
        printf("gpu             %s\n", gpu);
    }
    qac_model_free(m);
    qac_opts_free(&o);
    return 0;
}
