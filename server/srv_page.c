/* GET /: a small search page, embedded so the binary is self-contained.
 * ?q=...&k=...&mode=... runs the search at load (handy for links and
 * headless tests); the API key is typed into the page, kept in
 * sessionStorage and sent as a bearer header, never read from the URL. Long
 * passages show a snippet
 * with the query terms highlighted and expand in place; passage text only
 * ever becomes text nodes, never markup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_internal.h"

/* The API key is typed into a password field, kept in the tab's
 * sessionStorage and sent as the Authorization header: never read from the
 * URL, where it would end up in history and logs. */

const char qac_server_page_html[] =
    "<!doctype html>\n"
    "<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>qac search</title>\n"
    "<style>\n"
    "*,*::before,*::after{box-sizing:border-box}\n"
    "body{font:15px/1.45 system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#222}\n"
    "h1{font-size:1.4rem;margin:0 0 1rem}\n"
    /* narrow screens: the query takes a line of its own, the controls wrap below it */
    "form{display:flex;flex-wrap:wrap;gap:.5rem;margin-bottom:1rem}\n"
    "#q{flex:1 1 14rem;min-width:0;font-size:1rem;padding:.45rem .6rem;border:1px solid #999;border-radius:4px}\n"
    "button,select,input{font-size:1rem;padding:.4rem .6rem;max-width:100%}\n"
    "#key{flex:1 1 6rem;min-width:0;width:7rem}\n"
    ".text{overflow-wrap:anywhere}\n"
    "#status{color:#666;margin:.5rem 0}\n"
    "#results{padding-left:0;list-style:none}\n"
    ".hit{border-bottom:1px solid #eee;padding:.6rem 0}\n"
    ".meta{font-size:.85rem;color:#555}\n"
    ".docid{font-weight:600;color:#0645ad}\n"
    ".text{margin-top:.25rem}\n"
    "mark{background:#fff0a0;padding:0 .1em;border-radius:2px}\n"
    ".hit:has(details[open]) .snippet{display:none}\n"
    "summary{cursor:pointer;color:#0645ad;font-size:.85rem;margin-top:.2rem}\n"
    ".error{color:#b00020}\n"
    "</style></head><body>\n"
    "<h1>qac search</h1>\n"
    "<form id=\"f\">\n"
    "<input id=\"q\" name=\"q\" placeholder=\"Type a query\" autofocus>\n"
    "<select id=\"mode\" name=\"mode\">{{MODES}}</select>\n"
    "<input id=\"k\" name=\"k\" type=\"number\" min=\"1\" max=\"{{MAX_K}}\" value=\"10\" style=\"width:5.5rem\">\n"
    "{{KEY}}"
    "{{RERANK}}"
    "<button type=\"submit\">Search</button>\n"
    "</form>\n"
    "<div id=\"status\"></div>\n"
    "<ol id=\"results\"></ol>\n"
    "<script>\n"
    "const params = new URLSearchParams(location.search);\n"
    "if (params.has('key')) { params.delete('key');  /* an old link's key: drop it from the address bar */\n"
    "  history.replaceState(null, '', location.pathname + (params.toString() ? '?' + params : '')); }\n"
    "const $ = id => document.getElementById(id);\n"
    "function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls;\n"
    "  if (text !== undefined) e.textContent = text; return e; }\n"
    "const STOP = new Set(('a an and are as at be by can do does for from has have how in is it its of on or that '\n"
    "  + 'the their there these this to was were what when where which who why with').split(' '));\n"
    "const SNIPPET_WORDS = 30;\n"
    "function terms(q) {\n"
    "  return [...new Set((q.toLowerCase().match(/[\\p{L}\\p{N}]+/gu) || []).filter(t => !STOP.has(t)))]; }\n"
    "// a word matches a term it equals, or that it starts with when the term has 4+ characters (wing: wings)\n"
    "function matches(word, ts) { const w = word.toLowerCase();\n"
    "  return ts.some(t => w === t || (t.length >= 4 && w.startsWith(t))); }\n"
    "function highlight(parent, text, ts) {\n"
    "  const re = /[\\p{L}\\p{N}]+/gu; let last = 0, m;\n"
    "  while ((m = re.exec(text))) if (matches(m[0], ts)) {\n"
    "    parent.append(text.slice(last, m.index), el('mark', '', m[0])); last = m.index + m[0].length; }\n"
    "  parent.append(text.slice(last)); return parent; }\n"
    "// a long passage: the SNIPPET_WORDS-word window with the most matching words, and a <details> with it all\n"
    "function passage(text, ts) {\n"
    "  const box = el('div', 'text'), words = [...text.matchAll(/\\S+/g)];\n"
    "  if (words.length <= SNIPPET_WORDS) return highlight(box, text, ts);\n"
    "  const hit = words.map(w => (w[0].match(/[\\p{L}\\p{N}]+/gu) || []).some(t => matches(t, ts)) ? 1 : 0);\n"
    "  let best = 0, bestAt = 0, cur = 0;\n"
    "  for (let i = 0; i < words.length; i++) { cur += hit[i] - (i >= SNIPPET_WORDS ? hit[i - SNIPPET_WORDS] : 0);\n"
    "    if (i >= SNIPPET_WORDS - 1 && cur > best) { best = cur; bestAt = i - SNIPPET_WORDS + 1; } }\n"
    "  const a = words[bestAt], z = words[bestAt + SNIPPET_WORDS - 1], snip = el('div', 'snippet');\n"
    "  if (bestAt > 0) snip.append('\\u2026 ');\n"
    "  highlight(snip, text.slice(a.index, z.index + z[0].length), ts);\n"
    "  if (bestAt + SNIPPET_WORDS < words.length) snip.append(' \\u2026');\n"
    "  const more = el('details', 'more'), label = 'Show the full passage (' + words.length + ' words)';\n"
    "  const sum = el('summary', '', label);\n"
    "  more.addEventListener('toggle', () => { sum.textContent = more.open ? 'Show less' : label; });\n"
    "  more.append(sum, highlight(el('div', 'full'), text, ts));\n"
    "  box.append(snip, more); return box; }\n"
    "async function search(q, k, mode) {\n"
    "  const status = $('status'), list = $('results');\n"
    "  list.textContent = ''; status.className = ''; status.textContent = 'Searching\\u2026';\n"
    "  const headers = {'Content-Type': 'application/json'};\n"
    "  const key = $('key') ? $('key').value : '';  /* no box: the server has no key */\n"
    "  if (key) { sessionStorage.setItem('qac-key', key); headers['Authorization'] = 'Bearer ' + key; }\n"
    "  else sessionStorage.removeItem('qac-key');\n"
    "  try {\n"
    "    const r = await fetch('search', {method: 'POST', headers,\n"
    "      body: JSON.stringify(Object.assign({query: q, k: k, mode: mode, return_text: true},\n"
    "        $('rerank') && $('rerank').checked ? {rerank: true} : {}))});\n"
    "    const body = await r.json();\n"
    "    if (!r.ok) throw new Error(body.error ? body.error.message : ('HTTP ' + r.status));\n"
    "    const hits = body.results[0], ts = terms(q);\n"
    "    status.textContent = hits.length + ' results in ' + body.took_ms.toFixed(1) + ' ms';\n"
    "    for (const h of hits) {\n"
    "      const li = el('li', 'hit'); li.dataset.rank = h.rank; li.dataset.docid = h.docid;\n"
    "      const meta = el('div', 'meta');\n"
    "      meta.append(el('span', 'rank', '#' + h.rank + ' '), el('span', 'docid', h.docid),\n"
    "                  el('span', 'score', '  score ' + h.score.toFixed(4)));\n"
    "      li.append(meta, passage(h.text || '', ts));\n"
    "      list.append(li);\n"
    "    }\n"
    "  } catch (e) { status.className = 'error'; status.textContent = 'Error: ' + e.message; }\n"
    "}\n"
    "$('f').addEventListener('submit', ev => { ev.preventDefault();\n"
    "  const q = $('q').value.trim(); if (!q) return;\n"
    "  const u = new URL(location); u.searchParams.set('q', q); u.searchParams.set('k', $('k').value);\n"
    "  u.searchParams.set('mode', $('mode').value); history.replaceState(null, '', u);\n"
    "  search(q, parseInt($('k').value, 10) || 10, $('mode').value); });\n"
    "if ($('key')) $('key').value = sessionStorage.getItem('qac-key') || '';\n"
    "// a mode or k from the address is taken only when valid here: the page keeps a real selection\n"
    "const wantMode = params.get('mode');\n"
    "if (wantMode && [...$('mode').options].some(o => o.value === wantMode)) $('mode').value = wantMode;\n"
    "const wantK = parseInt(params.get('k'), 10), maxK = parseInt($('k').max, 10);\n"
    "if (wantK >= 1) $('k').value = Math.min(wantK, maxK);\n"
    "if (params.get('q')) { $('q').value = params.get('q');\n"
    "  search(params.get('q'), parseInt($('k').value, 10) || 10, $('mode').value); }\n"
    "</script>\n"
    "</body></html>\n";

/* The API-key box, on a server that has a key. */
static const char key_box[] = "<input id=\"key\" type=\"password\" placeholder=\"API key\" autocomplete=\"off\">\n";

/* The rerank box, on a server with a cross-encoder: /search's rerank stage. */
static const char rerank_box[] =
    "<label title=\"the cross-encoder reranks the first stage's top 100\"><input id=\"rerank\" type=\"checkbox\">"
    " rerank</label>\n";

/* The page with this server's largest k, the modes it can search (an
 * encode-only server lists dense, which then answers why it cannot), the
 * API-key box only when the server asks for a key, and the rerank box only
 * when it has a reranker. */
char *qac_server_page(const qac_server *s) {
    char modes[160] = "", max_k[24];
    if (s->be.search) strcat(modes, "<option>dense</option>");
    if (s->be.bm25_search) strcat(modes, "<option>bm25</option>");
    if (s->be.search && s->be.bm25_search) strcat(modes, "<option>hybrid</option>");
    if (!modes[0]) strcat(modes, "<option>dense</option>");
    snprintf(max_k, sizeof max_k, "%d", s->cfg.max_k);
    const char *keys[4] = {"{{MODES}}", "{{MAX_K}}", "{{KEY}}", "{{RERANK}}"};
    const char *vals[4] = {modes, max_k, s->cfg.api_key ? key_box : "", s->be.rerank_scores ? rerank_box : ""};
    size_t cap = sizeof qac_server_page_html + strlen(modes) + strlen(max_k) + sizeof key_box + sizeof rerank_box;
    char *out = malloc(cap);
    if (!out) return NULL;
    const char *p = qac_server_page_html;
    size_t o = 0;
    while (*p) {
        int hit = -1;
        for (int k = 0; k < 4 && hit < 0; k++)
            if (!strncmp(p, keys[k], strlen(keys[k]))) hit = k;
        if (hit < 0) {
            out[o++] = *p++;
            continue;
        }
        memcpy(out + o, vals[hit], strlen(vals[hit]));
        o += strlen(vals[hit]);
        p += strlen(keys[hit]);
    }
    out[o] = '\0';
    return out;
}
