-- 055: an attempt can end because the worker process running it died.
--
-- With [queue] isolation = process, handlers run in worker processes that a
-- supervisor forks and watches. When one dies mid-job (a signal, an exit, a
-- limit it broke), the supervisor records the attempt it was running as
-- 'crashed', with the cause in error ("killed by SIGSEGV", "exit status 3",
-- "exceeded max_memory ...", "timed out after ..."), and puts the job back
-- to pending after its backoff, or to dead on its last attempt -- at once,
-- not when the lease expires ('lost').
ALTER TABLE skipq.job_executions DROP CONSTRAINT job_executions_status_check;
ALTER TABLE skipq.job_executions ADD CONSTRAINT job_executions_status_check
    CHECK (status IN ('running', 'done', 'retry', 'dead', 'lost', 'interrupted', 'cancelled', 'crashed'));
