-- Queries of curation: the workspace's benchmark (cases and runs) and the recall log
-- (migrations 017, 018), loaded by name ("-- name: <name>"). Like the archive's, every
-- query names the workspace explicitly (row-level security is the backstop).

-- name: card_revisions
-- The cards of the workspace among these ids, with what a case or a run reports of them.
SELECT id, revision, title, family
  FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s AND id = ANY(%(ids)s);

-- name: cases_all
SELECT id, name, question, command, filters, expected, expected_revisions, origin,
       created_by, created_at, updated_at
  FROM thoth_memory.benchmark_cases
 WHERE workspace_id = %(workspace)s
 ORDER BY created_at, id
 LIMIT %(limit)s;

-- name: case_get
SELECT id, name, question, command, filters, expected, expected_revisions, origin,
       created_by, created_at, updated_at
  FROM thoth_memory.benchmark_cases
 WHERE workspace_id = %(workspace)s AND id = %(id)s;

-- name: cases_insert
-- New cases in one statement (arrays, one element per case); the expected cards and
-- their revisions travel as JSON arrays (a uuid[][] must be rectangular).
INSERT INTO thoth_memory.benchmark_cases
       (workspace_id, id, name, question, command, filters, expected, expected_revisions,
        origin, created_by)
SELECT %(workspace)s, c.id, c.name, c.question, c.command, c.filters::jsonb,
       ARRAY(SELECT jsonb_array_elements_text(c.expected::jsonb))::uuid[],
       ARRAY(SELECT jsonb_array_elements_text(c.revisions::jsonb))::bigint[],
       c.origin, %(principal)s
  FROM unnest(%(ids)s::uuid[], %(names)s::text[], %(questions)s::text[], %(commands)s::text[],
              %(filters)s::text[], %(expected)s::text[], %(revisions)s::text[], %(origins)s::text[])
       AS c(id, name, question, command, filters, expected, revisions, origin);

-- name: cases_update
-- Cases whose expected cards changed (added to, or replaced), with their revisions now.
UPDATE thoth_memory.benchmark_cases b
   SET expected = ARRAY(SELECT jsonb_array_elements_text(c.expected::jsonb))::uuid[],
       expected_revisions = ARRAY(SELECT jsonb_array_elements_text(c.revisions::jsonb))::bigint[],
       name = coalesce(c.name, b.name),
       updated_at = now()
  FROM unnest(%(ids)s::uuid[], %(names)s::text[], %(expected)s::text[], %(revisions)s::text[])
       AS c(id, name, expected, revisions)
 WHERE b.workspace_id = %(workspace)s AND b.id = c.id;

-- name: case_delete
DELETE FROM thoth_memory.benchmark_cases
 WHERE workspace_id = %(workspace)s AND id = %(id)s
RETURNING id;

-- name: run_insert
INSERT INTO thoth_memory.benchmark_runs
       (workspace_id, id, principal, started_at, seconds, cases, metrics, by_command, ranks,
        misses, expected_changes, index_state, comparison)
VALUES (%(workspace)s, %(id)s, %(principal)s, %(started_at)s, %(seconds)s, %(cases)s,
        %(metrics)s, %(by_command)s, %(ranks)s, %(misses)s, %(expected_changes)s,
        %(index_state)s, %(comparison)s);

-- name: run_last
-- The latest run, with each case's ranks: what a new run compares itself with.
SELECT id, started_at, ranks
  FROM thoth_memory.benchmark_runs
 WHERE workspace_id = %(workspace)s
 ORDER BY started_at DESC, id DESC
 LIMIT 1;

-- name: runs_list
-- The latest runs, newest first, without their per-case parts.
SELECT id, principal, started_at, finished_at, seconds, cases, metrics, by_command,
       jsonb_array_length(misses) AS miss_count,
       jsonb_array_length(expected_changes) AS changed_count,
       index_state, comparison
  FROM thoth_memory.benchmark_runs
 WHERE workspace_id = %(workspace)s
 ORDER BY started_at DESC, id DESC
 LIMIT %(limit)s;

-- name: run_get
SELECT id, principal, started_at, finished_at, seconds, cases, metrics, by_command, ranks,
       misses, expected_changes, index_state, comparison
  FROM thoth_memory.benchmark_runs
 WHERE workspace_id = %(workspace)s AND id = %(id)s;

-- name: runs_prune
-- The runs beyond the newest %(keep)s.
DELETE FROM thoth_memory.benchmark_runs
 WHERE workspace_id = %(workspace)s
   AND id IN (SELECT id FROM thoth_memory.benchmark_runs
               WHERE workspace_id = %(workspace)s
               ORDER BY started_at DESC, id DESC
              OFFSET %(keep)s);

-- name: card_edits_between
-- The audit log's card events of the workspace in each interval (since, until]: how
-- many, and the latest few with the card's title now (NULL: deleted since). Needs the
-- accounts mode (the audit log) and the workspace (the cards).
SELECT b.i AS interval, count(a.id) AS edits,
       (array_agg(jsonb_build_object(
            'at', a.at, 'actor', a.actor, 'action', a.action,
            'card', a.details->>'card', 'revision', (a.details->>'revision')::bigint,
            'title', c.title)
            ORDER BY a.at DESC) FILTER (WHERE a.id IS NOT NULL))[1:%(sample)s] AS latest
  FROM unnest(%(since)s::timestamptz[], %(until)s::timestamptz[]) WITH ORDINALITY AS b(since, until, i)
  LEFT JOIN thoth_memory.audit_log a
         ON a.workspace_id = %(workspace)s AND a.action LIKE 'card.%%'
        AND a.at > b.since AND a.at <= b.until
  LEFT JOIN thoth_memory.cards c
         ON c.workspace_id = %(workspace)s
        AND c.id = CASE WHEN a.details->>'card' ~ '^mem-[0-9a-f-]{36}$'
                        THEN substr(a.details->>'card', 5)::uuid END
 GROUP BY b.i
 ORDER BY b.i;

-- name: commit_without_waiting
-- The log's transactions do not wait for the disk at commit: a crash may lose the last
-- moments of the log, never the archive's data (other transactions keep waiting).
SET LOCAL synchronous_commit = off;

-- name: projection_terms
-- The BM25 terms recorded with these cards' projections (NULL: recorded before 006).
SELECT card_id, terms
  FROM thoth_memory.projections
 WHERE workspace_id = %(workspace)s AND card_id = ANY(%(ids)s);

-- name: term_frequencies
-- Each BM25 term of the workspace's projections with the number of cards holding it,
-- and (term NULL) the number of cards: the IDF the log weighs a question's terms with.
SELECT t.term, count(*) AS cards
  FROM thoth_memory.projections p, unnest(p.terms) AS t(term)
 WHERE p.workspace_id = %(workspace)s AND p.terms IS NOT NULL
 GROUP BY t.term
UNION ALL
SELECT NULL, count(*)
  FROM thoth_memory.projections p
 WHERE p.workspace_id = %(workspace)s AND p.terms IS NOT NULL;

-- name: term_frequencies_of
-- The number of the workspace's projected cards holding each of these BM25 terms (a
-- term no card holds is absent) and (term NULL) the number of cards: a process that
-- logs one recall weighs its question's terms without counting every term.
SELECT t.term, count(*) AS cards
  FROM thoth_memory.projections p
  JOIN unnest(%(terms)s::bigint[]) AS t(term) ON t.term = ANY(p.terms)
 WHERE p.workspace_id = %(workspace)s
 GROUP BY t.term
UNION ALL
SELECT NULL, count(*)
  FROM thoth_memory.projections p
 WHERE p.workspace_id = %(workspace)s AND p.terms IS NOT NULL;

-- name: log_insert
-- Logged recalls in one statement; returned ids and scores travel as JSON arrays.
INSERT INTO thoth_memory.recall_log
       (workspace_id, at, principal, command, question, error, session, returned, scores,
        terms, coverage)
SELECT %(workspace)s, r.at, r.principal, r.command, r.question, r.error, r.session,
       ARRAY(SELECT jsonb_array_elements_text(r.returned::jsonb))::uuid[],
       ARRAY(SELECT jsonb_array_elements_text(r.scores::jsonb))::real[],
       ARRAY(SELECT jsonb_array_elements_text(r.terms::jsonb))::bigint[],
       r.coverage
  FROM unnest(%(ats)s::timestamptz[], %(principals)s::text[], %(commands)s::text[],
              %(questions)s::text[], %(errors)s::text[], %(sessions)s::text[],
              %(returned)s::text[], %(scores)s::text[], %(terms)s::text[], %(coverages)s::real[])
       AS r(at, principal, command, question, error, session, returned, scores, terms, coverage);

-- name: log_mark_proposed
-- The session's recalls up to the proposal ended in a proposal of a new card.
UPDATE thoth_memory.recall_log
   SET proposed_at = %(at)s
 WHERE workspace_id = %(workspace)s AND session = %(session)s
   AND proposed_at IS NULL AND at <= %(at)s;

-- name: log_count
SELECT count(*) AS entries FROM thoth_memory.recall_log WHERE workspace_id = %(workspace)s;

-- name: log_drop_oldest
-- The oldest entries beyond the newest %(keep)s.
WITH doomed AS (
    SELECT id FROM thoth_memory.recall_log
     WHERE workspace_id = %(workspace)s
     ORDER BY id DESC
    OFFSET %(keep)s
), deleted AS (
    DELETE FROM thoth_memory.recall_log l
     USING doomed d
     WHERE l.workspace_id = %(workspace)s AND l.id = d.id
    RETURNING 1
)
SELECT count(*) AS dropped FROM deleted;

-- name: log_expire
WITH deleted AS (
    DELETE FROM thoth_memory.recall_log
     WHERE workspace_id = %(workspace)s AND at < now() - make_interval(days => %(days)s)
    RETURNING 1
)
SELECT count(*) AS expired FROM deleted;

-- name: log_state_add
INSERT INTO thoth_memory.recall_log_state (workspace_id, dropped, expired, lost)
VALUES (%(workspace)s, %(dropped)s, %(expired)s, %(lost)s)
ON CONFLICT (workspace_id) DO UPDATE
   SET dropped = recall_log_state.dropped + EXCLUDED.dropped,
       expired = recall_log_state.expired + EXCLUDED.expired,
       lost = recall_log_state.lost + EXCLUDED.lost,
       updated_at = now();

-- name: log_state
SELECT s.dropped, s.expired, s.lost,
       (SELECT count(*) FROM thoth_memory.recall_log l WHERE l.workspace_id = %(workspace)s) AS entries,
       (SELECT min(at) FROM thoth_memory.recall_log l WHERE l.workspace_id = %(workspace)s) AS oldest
  FROM (SELECT %(workspace)s::text AS workspace_id) w
  LEFT JOIN thoth_memory.recall_log_state s ON s.workspace_id = w.workspace_id;

-- name: log_list
-- The latest entries, newest first (before %(before)s: the next page).
SELECT id, at, principal, command, question, error, session, returned, scores, coverage,
       proposed_at
  FROM thoth_memory.recall_log
 WHERE workspace_id = %(workspace)s
   AND (%(before)s::bigint IS NULL OR id < %(before)s)
   AND (%(principal)s::text IS NULL OR principal = %(principal)s)
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: log_window
-- What the gaps are mined from: the entries since a time, newest first.
SELECT id, at, principal, command, question, error, session, returned[1] AS first,
       cardinality(returned) AS results, terms, coverage, proposed_at
  FROM thoth_memory.recall_log
 WHERE workspace_id = %(workspace)s AND at >= %(since)s
 ORDER BY id DESC
 LIMIT %(limit)s;
