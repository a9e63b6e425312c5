/* Streaming readers for corpora, queries and TREC runs.
 *
 * Formats (auto-detected from the file name and first line when
 * QAC_FMT_AUTO is given):
 *   TSV        "id\ttext" (MS MARCO collection.tsv, queries.tsv)
 *   BEIR       corpus.jsonl {"_id","title","text"}, queries.jsonl {"_id","text"}
 *   TEVATRON   corpus jsonl {"docid","title","text"}
 *   CRANFIELD  SMART files: cran.all.1400 (.I/.T/.A/.B/.W) and cran.qry,
 *              where the i-th query gets id "i" (see the collection README)
 * A reader holds one record at a time: memory does not grow with the file,
 * except for the id set used to reject duplicates. Malformed input is an
 * error naming the file, line and problem.
 *
 * Ownership: a reader is freed with qac_reader_free (NULL accepted). The
 * strings of a qac_record are borrowed and valid until the next call. */
#ifndef QAC_DATA_H
#define QAC_DATA_H

#include <stdio.h>

#include "qac_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qac_text_format {
    QAC_FMT_AUTO = 0,
    QAC_FMT_TSV,
    QAC_FMT_BEIR,
    QAC_FMT_TEVATRON,
    QAC_FMT_CRANFIELD
} qac_text_format;

typedef struct qac_record {
    const char *id;
    const char *title; /* "" when the format has none */
    const char *text;  /* the searchable text: title and body joined by ' ' when both exist */
    size_t text_len;
    uint64_t offset;   /* byte offset of the record's start in the file */
    int64_t line;      /* 1-based line number of the record's start */
} qac_record;

typedef struct qac_reader qac_reader;

typedef enum qac_reader_kind { QAC_READ_CORPUS = 0, QAC_READ_QUERIES = 1 } qac_reader_kind;

qac_status qac_reader_open(qac_reader **out, const char *path, qac_reader_kind kind, qac_text_format fmt);
/* Next record: *got = 1 and rec filled, or *got = 0 at end of file. */
qac_status qac_reader_next(qac_reader *r, qac_record *rec, int *got);
/* Continue from a byte offset previously returned in qac_record.offset
 * (resumable indexing). Ids seen before the offset are not re-checked. */
qac_status qac_reader_seek(qac_reader *r, uint64_t offset, int64_t line);
qac_text_format qac_reader_format(const qac_reader *r);
uint64_t qac_reader_file_size(const qac_reader *r);
void qac_reader_free(qac_reader *r);

/* Write one query's ranked list as TREC run lines "qid Q0 docid rank score
 * run_id", ranks from 1. Entries must already be in final rank order. */
qac_status qac_run_write(FILE *f, const char *qid, const char *const *docids, const float *scores,
                         int k, const char *run_id);

#ifdef __cplusplus
}
#endif
#endif
