-- 007: an attempt can end because an operator cancelled its job.
ALTER TABLE skipq.job_executions DROP CONSTRAINT job_executions_status_check;
ALTER TABLE skipq.job_executions ADD CONSTRAINT job_executions_status_check
    CHECK (status IN ('running', 'done', 'retry', 'dead', 'lost', 'interrupted', 'cancelled'));
