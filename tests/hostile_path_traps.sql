-- hostile_path_traps.sql -- what a role with CREATE on schema public plants
-- there to run code as whoever runs skipq (tests/test_hostile_path.c).
--
-- Run as that role (SET ROLE). Every trap records its call in public.pwned
-- and in the sequence public.pwned_calls (a sequence advances even when the
-- statement that called the trap rolls back, and nextval fails in a
-- read-only transaction, so no call goes unseen), then does what the
-- built-in would have done, so a run that trips one still completes and the
-- test can say which trap ran and as whom.
--
-- Exact-match overloads: PostgreSQL prefers pg_catalog only among equally
-- good matches, so under the default search_path ("$user", public) each of
-- these beats a built-in that needs an implicit cast or is polymorphic.
-- One for every such construct skipq's SQL held before it named built-ins
-- by schema:
--   *(interval, bigint)          the claim's lease
--   *(bigint, interval)          heartbeat, fail, retention, cron, aging, top,
--                                the client library's enqueue
--   *(numeric, integer)          stats percentiles, `jobs show`, aging
--   *(bigint, numeric)           top's rates
--   /(numeric, bigint)           top's rates, aging
--   *(integer, double precision) the benchmark's latency cross-check
--   format(text, integer, integer, text)  the lease sweep's message
--   format(text, text, text)     migrate's ownership check
--   array_to_string(text[], text), array_to_json(text[])  stats' hosts
--   unnest(bigint[]), unnest(text[]), unnest(smallint[])  heartbeat, cycle,
--                                release, cron, metrics
--   count(bigint)                the metrics sample
--   percentile_cont(numeric[]) and percentile_cont(numeric), ordered-set
--                                aggregates: stats, the benchmark

CREATE TABLE public.pwned (what text NOT NULL, who text NOT NULL, at timestamptz NOT NULL DEFAULT pg_catalog.now());
CREATE SEQUENCE public.pwned_calls;
GRANT SELECT, INSERT ON public.pwned TO PUBLIC;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE public.pwned_calls TO PUBLIC;

CREATE FUNCTION public.pwn(p_what text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_catalog.nextval('public.pwned_calls');
    INSERT INTO public.pwned (what, who) VALUES (p_what, current_user);
    RETURN true;
EXCEPTION WHEN read_only_sql_transaction THEN
    RAISE EXCEPTION 'hostile object % ran as % (in a read-only transaction)', p_what, current_user;
END
$$;

CREATE FUNCTION public.trap_mul_interval_int8(interval, bigint) RETURNS interval
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('operator *(interval, bigint)'); RETURN $1 * $2::float8; END $$;
CREATE OPERATOR public.* (LEFTARG = interval, RIGHTARG = bigint, FUNCTION = public.trap_mul_interval_int8);

CREATE FUNCTION public.trap_mul_int8_interval(bigint, interval) RETURNS interval
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('operator *(bigint, interval)'); RETURN $1::float8 * $2; END $$;
CREATE OPERATOR public.* (LEFTARG = bigint, RIGHTARG = interval, FUNCTION = public.trap_mul_int8_interval);

CREATE FUNCTION public.trap_mul_numeric_int4(numeric, integer) RETURNS numeric
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('operator *(numeric, integer)'); RETURN $1 * $2::numeric; END $$;
CREATE OPERATOR public.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = public.trap_mul_numeric_int4);

CREATE FUNCTION public.trap_mul_int8_numeric(bigint, numeric) RETURNS numeric
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('operator *(bigint, numeric)'); RETURN $1::numeric * $2; END $$;
CREATE OPERATOR public.* (LEFTARG = bigint, RIGHTARG = numeric, FUNCTION = public.trap_mul_int8_numeric);

CREATE FUNCTION public.trap_div_numeric_int8(numeric, bigint) RETURNS numeric
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('operator /(numeric, bigint)'); RETURN $1 / $2::numeric; END $$;
CREATE OPERATOR public./ (LEFTARG = numeric, RIGHTARG = bigint, FUNCTION = public.trap_div_numeric_int8);

CREATE FUNCTION public.trap_mul_int4_float8(integer, double precision) RETURNS double precision
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('operator *(integer, double precision)'); RETURN $1::float8 * $2; END $$;
CREATE OPERATOR public.* (LEFTARG = integer, RIGHTARG = double precision, FUNCTION = public.trap_mul_int4_float8);

CREATE FUNCTION public.format(text, integer, integer, text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('function format(text, integer, integer, text)'); RETURN pg_catalog.format($1, $2, $3, $4); END $$;

CREATE FUNCTION public.format(text, text, text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('function format(text, text, text)'); RETURN pg_catalog.format($1, $2, $3); END $$;

CREATE FUNCTION public.array_to_string(text[], text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('function array_to_string(text[], text)'); RETURN pg_catalog.array_to_string($1, $2); END $$;

CREATE FUNCTION public.array_to_json(text[]) RETURNS json
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('function array_to_json(text[])'); RETURN pg_catalog.array_to_json($1); END $$;

CREATE FUNCTION public.unnest(bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('function unnest(bigint[])'); RETURN QUERY SELECT pg_catalog.unnest($1); END $$;

CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('function unnest(text[])'); RETURN QUERY SELECT pg_catalog.unnest($1); END $$;

CREATE FUNCTION public.unnest(smallint[]) RETURNS SETOF smallint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('function unnest(smallint[])'); RETURN QUERY SELECT pg_catalog.unnest($1); END $$;

CREATE FUNCTION public.trap_count_final(bigint) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM public.pwn('aggregate count(bigint)'); RETURN $1; END $$;
CREATE AGGREGATE public.count(bigint) (
    SFUNC = pg_catalog.int8inc_any, STYPE = bigint, INITCOND = '0', FINALFUNC = public.trap_count_final);

CREATE FUNCTION public.trap_percentiles(numeric[], numeric[]) RETURNS double precision[]
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM public.pwn('aggregate percentile_cont(numeric[]) WITHIN GROUP (ORDER BY numeric)');
    RETURN (SELECT pg_catalog.percentile_cont($2::float8[]) WITHIN GROUP (ORDER BY v::float8)
              FROM pg_catalog.unnest($1) v);
END $$;
CREATE AGGREGATE public.percentile_cont(numeric[] ORDER BY numeric) (
    SFUNC = pg_catalog.array_append, STYPE = numeric[], FINALFUNC = public.trap_percentiles);

CREATE FUNCTION public.trap_percentile(numeric[], numeric) RETURNS double precision
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM public.pwn('aggregate percentile_cont(numeric) WITHIN GROUP (ORDER BY numeric)');
    RETURN (SELECT pg_catalog.percentile_cont($2::float8) WITHIN GROUP (ORDER BY v::float8)
              FROM pg_catalog.unnest($1) v);
END $$;
CREATE AGGREGATE public.percentile_cont(numeric ORDER BY numeric) (
    SFUNC = pg_catalog.array_append, STYPE = numeric[], FINALFUNC = public.trap_percentile);
