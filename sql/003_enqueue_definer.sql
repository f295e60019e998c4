-- 003: skipq.enqueue() runs with its owner's rights, so a role that may only
-- enqueue needs EXECUTE on it and USAGE on the schema -- no INSERT on the
-- table, and no way to read or change other jobs. Its search_path is pinned
-- (002), which is what makes SECURITY DEFINER safe here.
ALTER FUNCTION skipq.enqueue(text, jsonb, text, int, timestamptz, int) SECURITY DEFINER;
