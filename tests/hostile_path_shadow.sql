-- hostile_path_shadow.sql -- the stronger attack (tests/test_hostile_path.c),
-- planted after hostile_path_traps.sql by the same role, which also owns the
-- database and sets its search_path to "public, pg_catalog": every session
-- that does not set its own then looks in public first, and an exact
-- duplicate of a built-in there wins.
--
-- Planted, each recording its call through public.pwn() and then doing what
-- the built-in does:
--  1. a duplicate in public of every pg_catalog operator on the types skipq's
--     SQL uses (below: `types`, their arrays, and the polymorphic types);
--  2. a duplicate of every overload of every pg_catalog function named in the
--     setting hostile.functions (the test keeps that list and checks it
--     against the built-ins core/ calls): plain functions, set-returning
--     ones, and the aggregates (normal and ordered-set) among them;
--  3. domains in public named like the types skipq casts to, whose CHECK
--     records every value cast to them.
-- What cannot be duplicated in PL/pgSQL (an argument of type "any", such as
-- format(text, VARIADIC "any"); OUT parameters; internal states) is skipped
-- and counted: the exact overloads of hostile_path_traps.sql beat those
-- anyway. NOTICE "shadow: ..." gives the counts; the table public.shadowed
-- lists what was planted.

CREATE TABLE public.shadowed (what text NOT NULL, planted boolean NOT NULL, why text);

DO $plant$
DECLARE
    types regtype[] := ARRAY['int2', 'int4', 'int8', 'text', 'jsonb', 'json', 'timestamptz', 'timestamp',
                             'interval', 'bool', 'numeric', 'float8', 'name', 'oid', '"char"', 'unknown']::regtype[];
    poly regtype[] := ARRAY['anyelement', 'anyarray', 'anynonarray', 'anycompatible', 'anycompatiblearray',
                            'anycompatiblenonarray']::regtype[];
    usable regtype[];
    names text[] := pg_catalog.string_to_array(pg_catalog.current_setting('hostile.functions'), ',');
    r record;
    fname text;
    body text;
    argt text;
BEGIN
    SELECT types || pg_catalog.array_agg(t.typarray::regtype) || poly INTO usable
      FROM pg_catalog.pg_type t WHERE t.oid = ANY (types) AND t.typarray <> 0;

    -- 1. operators
    FOR r IN SELECT o.oid, o.oprname, o.oprleft, o.oprright, o.oprresult, p.proname
               FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_proc p ON p.oid = o.oprcode
              WHERE o.oprnamespace = 'pg_catalog'::regnamespace
                AND (o.oprleft = 0 OR o.oprleft = ANY (usable)) AND o.oprright = ANY (usable)
              ORDER BY o.oid
    LOOP
        fname := 'trap_op_' || r.oid;
        BEGIN
            IF r.oprleft = 0 THEN
                EXECUTE pg_catalog.format(
                    'CREATE FUNCTION public.%I(%s) RETURNS %s LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp'
                    ' AS $f$ BEGIN PERFORM public.pwn(%L); RETURN pg_catalog.%I($1); END $f$',
                    fname, r.oprright::regtype, r.oprresult::regtype, 'operator ' || r.oid::regoperator, r.proname);
                EXECUTE pg_catalog.format('CREATE OPERATOR public.%s (RIGHTARG = %s, FUNCTION = public.%I)',
                                          r.oprname, r.oprright::regtype, fname);
            ELSE
                EXECUTE pg_catalog.format(
                    'CREATE FUNCTION public.%I(%s, %s) RETURNS %s LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp'
                    ' AS $f$ BEGIN PERFORM public.pwn(%L); RETURN pg_catalog.%I($1, $2); END $f$',
                    fname, r.oprleft::regtype, r.oprright::regtype, r.oprresult::regtype,
                    'operator ' || r.oid::regoperator, r.proname);
                EXECUTE pg_catalog.format(
                    'CREATE OPERATOR public.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = public.%I)',
                    r.oprname, r.oprleft::regtype, r.oprright::regtype, fname);
            END IF;
            INSERT INTO public.shadowed VALUES ('operator ' || r.oid::regoperator, true, NULL);
        EXCEPTION WHEN OTHERS THEN
            INSERT INTO public.shadowed VALUES ('operator ' || r.oid::regoperator, false, SQLERRM);
        END;
    END LOOP;

    -- 2. functions and aggregates
    FOR r IN SELECT p.oid, p.proname, p.prokind, p.proretset, p.pronargs, p.provariadic, p.proargtypes,
                    pg_catalog.pg_get_function_arguments(p.oid) AS args,
                    pg_catalog.pg_get_function_result(p.oid) AS result, a.aggkind
               FROM pg_catalog.pg_proc p LEFT JOIN pg_catalog.pg_aggregate a ON a.aggfnoid = p.oid
              WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY (names)
              ORDER BY p.oid
    LOOP
        BEGIN
            IF r.prokind = 'f' THEN
                SELECT pg_catalog.string_agg(CASE WHEN r.provariadic <> 0 AND i = r.pronargs THEN 'VARIADIC $' ELSE '$' END
                                             || i, ', ' ORDER BY i)
                  INTO argt FROM pg_catalog.generate_series(1, r.pronargs) i;
                body := pg_catalog.format('pg_catalog.%I(%s)', r.proname, coalesce(argt, ''));
                body := CASE WHEN r.proretset THEN 'RETURN QUERY SELECT * FROM ' || body
                             WHEN r.result = 'void' THEN 'PERFORM ' || body
                             ELSE 'RETURN ' || body END;
                EXECUTE pg_catalog.format(
                    'CREATE FUNCTION public.%I(%s) RETURNS %s LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp'
                    ' AS $f$ BEGIN PERFORM public.pwn(%L); %s; END $f$',
                    r.proname, r.args, r.result, 'function ' || r.oid::regprocedure, body);
            ELSIF r.prokind = 'a' AND r.proname = 'count' THEN
                fname := 'trap_agg_' || r.oid;
                EXECUTE pg_catalog.format(
                    'CREATE FUNCTION public.%I(bigint) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp'
                    ' AS $f$ BEGIN PERFORM public.pwn(%L); RETURN $1; END $f$', fname, 'aggregate ' || r.oid::regprocedure);
                EXECUTE pg_catalog.format(
                    'CREATE AGGREGATE public.count(%s) (SFUNC = pg_catalog.%s, STYPE = bigint, INITCOND = ''0'','
                    ' FINALFUNC = public.%I)',
                    CASE WHEN r.pronargs = 0 THEN '*' ELSE r.args END,
                    CASE WHEN r.pronargs = 0 THEN 'int8inc' ELSE 'int8inc_any' END, fname);
            ELSIF r.prokind = 'a' AND r.aggkind = 'n' AND r.pronargs = 1 THEN
                -- Collect the values, then let the built-in aggregate them.
                fname := 'trap_agg_' || r.oid;
                argt := r.proargtypes[0]::regtype::text;
                EXECUTE pg_catalog.format(
                    'CREATE FUNCTION public.%I(%s[]) RETURNS %s LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp'
                    ' AS $f$ BEGIN PERFORM public.pwn(%L); RETURN (SELECT pg_catalog.%I(x) FROM pg_catalog.unnest($1) x);'
                    ' END $f$', fname, argt, r.result, 'aggregate ' || r.oid::regprocedure, r.proname);
                EXECUTE pg_catalog.format(
                    'CREATE AGGREGATE public.%I(%s) (SFUNC = pg_catalog.array_append, STYPE = %s[], FINALFUNC = public.%I)',
                    r.proname, argt, argt, fname);
            ELSIF r.prokind = 'a' AND r.aggkind = 'o' AND r.pronargs = 2 THEN
                -- Ordered-set (percentile_cont): one direct argument, one sort key.
                fname := 'trap_agg_' || r.oid;
                argt := r.proargtypes[1]::regtype::text;
                EXECUTE pg_catalog.format(
                    'CREATE FUNCTION public.%I(%s[], %s) RETURNS %s LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp'
                    ' AS $f$ BEGIN PERFORM public.pwn(%L);'
                    ' RETURN (SELECT pg_catalog.%I($2) WITHIN GROUP (ORDER BY x) FROM pg_catalog.unnest($1) x); END $f$',
                    fname, argt, r.proargtypes[0]::regtype, r.result, 'aggregate ' || r.oid::regprocedure, r.proname);
                EXECUTE pg_catalog.format(
                    'CREATE AGGREGATE public.%I(%s ORDER BY %s) (SFUNC = pg_catalog.array_append, STYPE = %s[],'
                    ' FINALFUNC = public.%I)',
                    r.proname, r.proargtypes[0]::regtype, argt, argt, fname);
            ELSE
                RAISE EXCEPTION 'no duplicate for this kind of function';
            END IF;
            INSERT INTO public.shadowed VALUES ('function ' || r.oid::regprocedure, true, NULL);
        EXCEPTION WHEN OTHERS THEN
            INSERT INTO public.shadowed VALUES ('function ' || r.oid::regprocedure, false, SQLERRM);
        END;
    END LOOP;

    -- 3. domains named like the types skipq casts to
    FOR r IN SELECT t.typname FROM pg_catalog.pg_type t
              WHERE t.oid = ANY (ARRAY['int2', 'int4', 'int8', 'text', 'jsonb', 'json', 'timestamptz', 'timestamp',
                                       'interval', 'bool', 'numeric', 'float8', 'name', 'oid', 'regclass',
                                       'regnamespace']::regtype[])
    LOOP
        BEGIN
            EXECUTE pg_catalog.format(
                'CREATE DOMAIN public.%I AS pg_catalog.%I CHECK (public.pwn(%L) OR VALUE IS NULL)',
                r.typname, r.typname, 'domain public.' || r.typname);
            INSERT INTO public.shadowed VALUES ('domain public.' || r.typname, true, NULL);
        EXCEPTION WHEN OTHERS THEN
            INSERT INTO public.shadowed VALUES ('domain public.' || r.typname, false, SQLERRM);
        END;
    END LOOP;

    RAISE NOTICE 'shadow: % planted, % skipped',
        (SELECT pg_catalog.count(*) FROM public.shadowed WHERE planted),
        (SELECT pg_catalog.count(*) FROM public.shadowed WHERE NOT planted);
END
$plant$;
