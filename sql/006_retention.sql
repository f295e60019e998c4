-- 006: history leaves the tables.
--
-- Retention (the [retention] section of a host's INI) deletes finished jobs
-- older than an age, their executions going with them (ON DELETE CASCADE),
-- in small batches. A BRIN index finds them by finished_at: rows finish
-- roughly in table order, so the index stays tiny and costs almost nothing
-- per completed job, unlike a B-tree that would take one more insertion per
-- job on the hot path.
CREATE INDEX jobs_finished_brin ON skipq.jobs USING brin (finished_at);

ALTER TABLE skipq.job_executions SET (autovacuum_vacuum_scale_factor = 0.02,
                                      autovacuum_analyze_scale_factor = 0.02);
