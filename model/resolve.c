/* --model values to model directories (see qac_model_resolve). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qac_model.h"
#include "qac_util.h"

static int has_config(const char *dir) {
    char p[4096];
    struct stat sb;
    return qac_path_join(p, sizeof p, dir, "config.json") == QAC_OK && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int put(char *buf, size_t cap, const char *fmt, const char *a, const char *b) {
    int n = snprintf(buf, cap, fmt, a, b);
    return n >= 0 && (size_t)n < cap;
}

/* The checkpoint a run directory's `latest` file names, as a directory
 * holding a model (or the .old copy a crash between two renames left). */
static int run_checkpoint(const char *run, char *buf, size_t cap) {
    char p[4096], *text = NULL;
    size_t len = 0;
    if (qac_path_join(p, sizeof p, run, "latest") || qac_read_file(p, &text, &len)) {
        qac_clear_error();
        return 0;
    }
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = '\0';
    int ok = len && !strchr(text, '/') && put(buf, cap, "%s/%s", run, text) && has_config(buf);
    if (!ok && len && !strchr(text, '/') && put(buf, cap, "%s/%s.old", run, text)) ok = has_config(buf);
    free(text);
    return ok;
}

/* The hub cache directory huggingface_hub uses: HF_HUB_CACHE, else
 * HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/... */
static void hub_dir(char *buf, size_t cap) {
    const char *e;
    if ((e = getenv("HF_HUB_CACHE")) && *e) snprintf(buf, cap, "%s", e);
    else if ((e = getenv("HF_HOME")) && *e) snprintf(buf, cap, "%s/hub", e);
    else if ((e = getenv("XDG_CACHE_HOME")) && *e) snprintf(buf, cap, "%s/huggingface/hub", e);
    else snprintf(buf, cap, "%s/.cache/huggingface/hub", (e = getenv("HOME")) ? e : ".");
}

/* ORG/NAME in the hub cache: the snapshot refs/main names, else the newest
 * snapshot that holds a config.json (a cache filled at another revision). */
static int hub_snapshot(const char *hub, const char *repo, char *buf, size_t cap) {
    char rdir[4096], p[4096], *text = NULL;
    size_t len = 0, n = 0;
    const char *slash = strchr(repo, '/');
    if (!slash || strchr(slash + 1, '/') || slash == repo || !slash[1]) return 0;
    n = (size_t)snprintf(rdir, sizeof rdir, "%s/models--%.*s--%s", hub, (int)(slash - repo), repo, slash + 1);
    if (n >= sizeof rdir) return 0;
    if (put(p, sizeof p, "%s/%s", rdir, "refs/main") && qac_read_file(p, &text, &len) == QAC_OK) {
        while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = '\0';
        int ok = len && !strchr(text, '/') && snprintf(buf, cap, "%s/snapshots/%s", rdir, text) < (int)cap &&
                 has_config(buf);
        free(text);
        if (ok) return 1;
    }
    qac_clear_error();
    if (!put(p, sizeof p, "%s/%s", rdir, "snapshots")) return 0;
    DIR *d = opendir(p);
    if (!d) return 0;
    double newest = -1;
    for (struct dirent *e; (e = readdir(d));) {
        char s[4096], c[4096];
        struct stat sb;
        if (e->d_name[0] == '.' || !put(s, sizeof s, "%s/%s", p, e->d_name) || !has_config(s) ||
            !put(c, sizeof c, "%s/%s", s, "config.json") || stat(c, &sb) != 0)
            continue;
        if ((double)sb.st_mtime > newest) {
            newest = (double)sb.st_mtime;
            snprintf(buf, cap, "%s", s);
        }
    }
    closedir(d);
    return newest >= 0;
}

qac_status qac_model_resolve(const char *spec, char *buf, size_t cap, char *note, size_t note_cap) {
    if (note && note_cap) note[0] = '\0';
    if (!spec || !*spec) return qac_set_error(QAC_ERR_INVALID, "--model: empty value");
    struct stat sb;
    if (stat(spec, &sb) == 0) {
        const char *base = strrchr(spec, '/');
        base = base ? base + 1 : spec;
        if (S_ISDIR(sb.st_mode) && !has_config(spec) && run_checkpoint(spec, buf, cap)) {
            /* a training run without its final model yet: it is still running, or stopped early */
            if (note)
                snprintf(note, note_cap,
                         "--model %s: a training run with no final model yet (still training?); using its newest "
                         "checkpoint %s",
                         spec, buf);
            return QAC_OK;
        }
        if (S_ISREG(sb.st_mode) && !strcmp(base, "latest")) { /* RUN/latest: the checkpoint it names */
            char run[4096];
            snprintf(run, sizeof run, "%.*s", (int)(base - spec), spec);
            if (!run[0]) snprintf(run, sizeof run, ".");
            if (run_checkpoint(run, buf, cap)) return QAC_OK;
        }
        /* anything else is taken as given: loading it says what is missing */
        if (snprintf(buf, cap, "%s", spec) >= (int)cap) return qac_set_error(QAC_ERR_INVALID, "path too long: %s", spec);
        return QAC_OK;
    }
    /* not a path: an installed model by name, or a Hugging Face cache entry */
    char installed[4096] = "", hub[4096];
    const char *home = getenv("QAC_HOME"), *h = getenv("HOME");
    if (!strchr(spec, '/')) {
        int n = home && *home ? snprintf(installed, sizeof installed, "%s/models/%s", home, spec)
                              : snprintf(installed, sizeof installed, "%s/.local/share/qac/models/%s", h ? h : ".", spec);
        if (n > 0 && (size_t)n < sizeof installed && has_config(installed)) {
            if (snprintf(buf, cap, "%s", installed) >= (int)cap) return qac_set_error(QAC_ERR_INVALID, "path too long");
            return QAC_OK;
        }
    }
    hub_dir(hub, sizeof hub);
    if (hub_snapshot(hub, spec, buf, cap)) return QAC_OK;
    if (strchr(spec, '/'))
        return qac_set_error(QAC_ERR_NOT_FOUND,
                             "--model %s: no such directory, and no Hugging Face cache entry for it under %s "
                             "(download it with huggingface-cli, or give the model's directory)",
                             spec, hub);
    return qac_set_error(QAC_ERR_NOT_FOUND,
                         "--model %s: no such directory, and no installed model of that name (%s); give a model "
                         "directory, an installed name or a Hugging Face repository name (ORG/NAME)",
                         spec, installed);
}
