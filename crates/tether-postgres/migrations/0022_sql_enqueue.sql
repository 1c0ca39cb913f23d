-- Enqueueing from SQL: `tether.enqueue` and `tether.enqueue_many`, for a
-- service in any language that wants its jobs to exist if and only if its
-- own transaction commits (docs/API.md, "Enqueueing from your own
-- PostgreSQL transaction").
--
-- They take the bodies of `POST /v1/jobs` and `POST /v1/jobs/batch` and
-- refuse and accept exactly what the server does, with its messages: first
-- the shape of every entry (what the server's JSON decoding refuses: types,
-- unknown or missing fields, unreadable times), then `run_at` with
-- `delay_ms`, then the batch's size, then each entry's values in the order
-- of `tether_core::validate::new_job`. A refusal raises SQLSTATE 22023
-- (invalid_parameter_value) with the message `invalid <field>: <why>`, and
-- the caller's transaction is aborted: nothing is written. A test keeps
-- the two in agreement over random bodies
-- (crates/tether-postgres/tests/sql_enqueue.rs).
--
-- The writes are those of `tether-postgres/src/enqueue.rs`: queue rows
-- first (counted against the default limit of 1 000 under the tenant's
-- QUEUE_CREATE_LOCK, 0x74657402), then the tenant's QUEUE_ROWS_LOCK
-- (0x74657401) in shared mode until the transaction ends, so that the
-- removal of empty queue rows (which takes it exclusively) never deletes a
-- row this transaction adds jobs to; jobs that find their idempotency key
-- (first) or active unique key taken answer the job holding it; an
-- `enqueued` event per new job; and one NOTIFY per queue for the new jobs
-- ready now, delivered at commit (nothing on rollback).
--
-- They do no authentication: whoever may execute them enqueues for any
-- tenant. They run as their owner (SECURITY DEFINER), so a role needs no
-- privilege on tether's tables, only USAGE on the schema and EXECUTE on
-- them, which nobody has until granted. Every other function here is a
-- part of them, not an interface.

-- A time-ordered UUID (version 7, RFC 9562): 48 bits of Unix milliseconds,
-- then 12 bits of the fraction of the millisecond (so that ids made one
-- after another by this backend sort in order), then random bits.
-- PostgreSQL has uuidv7() only from version 18.
CREATE FUNCTION tether.uuid_v7() RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    us bigint := floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    sub integer := ((us % 1000) * 4096 / 1000)::integer;
    b bytea := uuid_send(gen_random_uuid());
BEGIN
    b := overlay(b PLACING substring(int8send(us / 1000) FROM 3 FOR 6) FROM 1 FOR 6);
    b := set_byte(b, 6, 112 | (sub >> 8));
    b := set_byte(b, 7, sub & 255);
    b := set_byte(b, 8, (get_byte(b, 8) & 63) | 128);
    RETURN encode(b, 'hex')::uuid;
END
$fn$;

-- The UUID after `prev` (its last 62 bits plus one): a batch's ids strictly
-- increase even when the clock did not move between two of them.
CREATE FUNCTION tether.uuid_after(prev uuid) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT encode(
        substring(uuid_send(prev) FROM 1 FOR 8)
        || int8send(('x' || encode(substring(uuid_send(prev) FROM 9 FOR 8), 'hex'))::bit(64)::bigint + 1),
        'hex')::uuid
$fn$;

-- Whether Rust's `{:?}` writes code point `cp` as `\u{..}`: control
-- characters, and the most common of the characters it does not print
-- (spaces other than ' ', format characters, combining marks, private
-- use). Only messages depend on it.
CREATE FUNCTION tether.enqueue_unprintable(cp integer) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT cp < 32 OR cp BETWEEN 127 AND 160 OR cp = 173
        OR cp BETWEEN 768 AND 879 OR cp BETWEEN 1155 AND 1161
        OR cp BETWEEN 1425 AND 1469 OR cp BETWEEN 1536 AND 1541 OR cp = 1564
        OR cp = 1757 OR cp = 1807 OR cp = 2274 OR cp = 5760 OR cp = 6158
        OR cp BETWEEN 6832 AND 6911 OR cp BETWEEN 7616 AND 7679
        OR cp BETWEEN 8192 AND 8207 OR cp BETWEEN 8232 AND 8239
        OR cp BETWEEN 8287 AND 8303 OR cp BETWEEN 8400 AND 8447 OR cp = 12288
        OR cp BETWEEN 57344 AND 63743 OR cp BETWEEN 65024 AND 65039
        OR cp BETWEEN 65056 AND 65071 OR cp = 65279 OR cp BETWEEN 65520 AND 65531
        OR cp BETWEEN 65534 AND 65535 OR cp BETWEEN 119155 AND 119162
        OR cp BETWEEN 917504 AND 921599 OR cp >= 983040
$fn$;

-- `s` as Rust's `{:?}` writes it: a string between '"' (`quote` '"') or a
-- character between '''' (`quote` '''').
CREATE FUNCTION tether.enqueue_debug(s text, quote text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    out text := quote;
    c text;
    cp integer;
BEGIN
    IF s ~ '^[A-Za-z0-9 ._:/+-]*$' THEN
        RETURN quote || s || quote;
    END IF;
    FOREACH c IN ARRAY string_to_array(s, NULL) LOOP
        cp := ascii(c);
        out := out || CASE
            WHEN cp = 0 THEN E'\\0'
            WHEN cp = 9 THEN E'\\t'
            WHEN cp = 10 THEN E'\\n'
            WHEN cp = 13 THEN E'\\r'
            WHEN cp = 92 THEN E'\\\\'
            WHEN c = quote THEN E'\\' || c
            WHEN tether.enqueue_unprintable(cp) THEN E'\\u{' || to_hex(cp) || '}'
            ELSE c
        END;
    END LOOP;
    RETURN out || quote;
END
$fn$;

-- Refuses the input: SQLSTATE 22023 and `invalid <field>: <why>`.
CREATE FUNCTION tether.enqueue_refuse(field text, why text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
        MESSAGE = 'invalid ' || field || ': ' || why;
END
$fn$;

-- A JSON value as the server's JSON decoding names what it did not expect.
CREATE FUNCTION tether.enqueue_unexpected(v jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    t text;
BEGIN
    CASE COALESCE(jsonb_typeof(v), 'null')
        WHEN 'null' THEN RETURN 'null';
        WHEN 'boolean' THEN RETURN 'boolean `' || (v #>> '{}') || '`';
        WHEN 'string' THEN RETURN 'string ' || tether.enqueue_debug(v #>> '{}', '"');
        WHEN 'array' THEN RETURN 'sequence';
        WHEN 'object' THEN RETURN 'map';
        ELSE
            t := v::text;
            IF t ~ '^-?[0-9]+$'
               AND t::numeric BETWEEN -9223372036854775808 AND 18446744073709551615 THEN
                RETURN 'integer `' || t || '`';
            END IF;
            -- Read as a 64-bit float, written with its decimal point.
            IF t ~ '\.' THEN
                t := rtrim(t, '0');
            ELSE
                t := t || '.';
            END IF;
            IF t ~ '\.$' THEN
                t := t || '0';
            END IF;
            RETURN 'floating point `' || t || '`';
    END CASE;
END
$fn$;

-- A JSON string (`null` and other types refused as the decoding does).
CREATE FUNCTION tether.enqueue_text(field text, v jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF jsonb_typeof(v) = 'string' THEN
        RETURN v #>> '{}';
    END IF;
    PERFORM tether.enqueue_refuse(field,
        'invalid type: ' || tether.enqueue_unexpected(v) || ', expected a string');
    RETURN NULL;
END
$fn$;

-- A JSON integer of `bits` bits (16, 32 or 64), as the decoding reads one.
CREATE FUNCTION tether.enqueue_int(field text, v jsonb, bits integer) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    t text;
    n numeric;
    lo numeric := CASE bits WHEN 16 THEN -32768 WHEN 32 THEN -2147483648
                            ELSE -9223372036854775808 END;
    hi numeric := CASE bits WHEN 16 THEN 32767 WHEN 32 THEN 2147483647
                            ELSE 9223372036854775807 END;
BEGIN
    IF jsonb_typeof(v) = 'number' THEN
        t := v::text;
        IF t ~ '^-?[0-9]+$' THEN
            n := t::numeric;
            IF n BETWEEN lo AND hi THEN
                RETURN n::bigint;
            END IF;
            IF n BETWEEN -9223372036854775808 AND 18446744073709551615 THEN
                PERFORM tether.enqueue_refuse(field,
                    'invalid value: integer `' || t || '`, expected i' || bits);
            END IF;
        END IF;
    END IF;
    PERFORM tether.enqueue_refuse(field,
        'invalid type: ' || tether.enqueue_unexpected(v) || ', expected i' || bits);
    RETURN NULL;
END
$fn$;

-- A name: 1–128 bytes of [A-Za-z0-9._:-], not `.` or `..`
-- (tether_core::validate::name).
CREATE FUNCTION tether.enqueue_check_name(field text, value text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    bad text;
BEGIN
    IF octet_length(value) = 0 OR octet_length(value) > 128 THEN
        PERFORM tether.enqueue_refuse(field,
            'must be 1 to 128 characters, got ' || octet_length(value));
    END IF;
    bad := substring(value FROM '[^A-Za-z0-9._:-]');
    IF bad IS NOT NULL THEN
        PERFORM tether.enqueue_refuse(field,
            tether.enqueue_debug(value, '"') || ' contains ' || tether.enqueue_debug(bad, '''')
            || '; allowed are A-Z a-z 0-9 . _ : -');
    END IF;
    IF value IN ('.', '..') THEN
        PERFORM tether.enqueue_refuse(field,
            tether.enqueue_debug(value, '"') || ' cannot be used: it is a dot-segment in a URL path');
    END IF;
END
$fn$;

-- An idempotency or unique key: 1–255 characters, no control character
-- (tether_core::validate::key).
CREATE FUNCTION tether.enqueue_check_key(field text, value text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF char_length(value) = 0 OR char_length(value) > 255 THEN
        PERFORM tether.enqueue_refuse(field, 'must be 1 to 255 characters');
    END IF;
    IF value ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        PERFORM tether.enqueue_refuse(field, 'must not contain control characters');
    END IF;
END
$fn$;

-- A duration in milliseconds within lo..hi (tether_core::validate::millis).
CREATE FUNCTION tether.enqueue_check_millis(field text, value bigint, lo bigint, hi bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF value < 0 THEN
        PERFORM tether.enqueue_refuse(field, 'must not be negative, got ' || value);
    END IF;
    IF value < lo OR value > hi THEN
        PERFORM tether.enqueue_refuse(field,
            'must be between ' || lo || ' and ' || hi || ' ms, got ' || value);
    END IF;
END
$fn$;

-- Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
CREATE FUNCTION tether.enqueue_days(y bigint, m bigint, d bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    yy bigint := y - CASE WHEN m <= 2 THEN 1 ELSE 0 END;
    era bigint := (CASE WHEN yy >= 0 THEN yy ELSE yy - 399 END) / 400;
    yoe bigint := yy - era * 400;
    doy bigint := (153 * (m + CASE WHEN m > 2 THEN -3 ELSE 9 END) + 2) / 5 + d - 1;
BEGIN
    RETURN era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
END
$fn$;

-- An input time (`run_at`, `expires_at`) read by the server's one rule
-- (tether_core::validate::parse_instant over chrono's RFC 3339 parser, whose
-- reasons it gives): `at` the instant, `shown` it as the server writes it in
-- messages, `in_range` whether it lies within 1970..9999
-- (tether_core::validate::instant, checked later).
CREATE FUNCTION tether.enqueue_instant(field text, v jsonb,
    OUT at timestamptz, OUT shown text, OUT in_range boolean)
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    s text := tether.enqueue_text(field, v);
    b bytea;
    n integer;
    pos integer;
    dg integer[];
    why text;
    y bigint; mo bigint; d bigint; h bigint; mi bigint; sec bigint; dim bigint;
    leap boolean := false;
    nanos bigint := 0;
    digits integer := 0;
    c integer;
    neg boolean;
    oh bigint;
    om bigint := 0;
    off bigint := 0;
    total bigint;
    days bigint;
    sod bigint;
    z bigint; era bigint; doe bigint; yoe bigint; doy bigint; mp bigint;
    uy bigint; um bigint; ud bigint;
    frac text := '';
BEGIN
    IF s !~ '^[0-9]' THEN
        PERFORM tether.enqueue_refuse(field,
            'not an RFC 3339 time (it starts with a four-digit year): '
            || tether.enqueue_debug(s, '"'));
    END IF;
    b := convert_to(s, 'UTF8');
    n := length(b);
    <<parse>>
    BEGIN
        IF n < 19 THEN
            why := 'premature end of input';
            EXIT parse;
        END IF;
        -- The digits of the fixed part (-1: not a digit).
        SELECT array_agg(CASE WHEN get_byte(b, i) BETWEEN 48 AND 57
                              THEN get_byte(b, i) - 48 ELSE -1 END ORDER BY i)
        INTO dg FROM generate_series(0, 18) i;
        IF dg[1] < 0 OR dg[2] < 0 OR dg[3] < 0 OR dg[4] < 0 OR get_byte(b, 4) <> 45
           OR dg[6] < 0 OR dg[7] < 0 OR get_byte(b, 7) <> 45 OR dg[9] < 0 OR dg[10] < 0 THEN
            why := 'input contains invalid characters';
            EXIT parse;
        END IF;
        y := dg[1] * 1000 + dg[2] * 100 + dg[3] * 10 + dg[4];
        mo := dg[6] * 10 + dg[7];
        d := dg[9] * 10 + dg[10];
        dim := CASE WHEN mo IN (4, 6, 9, 11) THEN 30
                    WHEN mo <> 2 THEN 31
                    WHEN (y % 4 = 0 AND y % 100 <> 0) OR y % 400 = 0 THEN 29
                    ELSE 28 END;
        IF mo < 1 OR mo > 12 OR d < 1 OR d > dim THEN
            why := 'input is out of range';
            EXIT parse;
        END IF;
        IF get_byte(b, 10) NOT IN (116, 84, 32) OR dg[12] < 0 OR dg[13] < 0
           OR get_byte(b, 13) <> 58 OR dg[15] < 0 OR dg[16] < 0 OR get_byte(b, 16) <> 58
           OR dg[18] < 0 OR dg[19] < 0 THEN
            why := 'input contains invalid characters';
            EXIT parse;
        END IF;
        h := dg[12] * 10 + dg[13];
        mi := dg[15] * 10 + dg[16];
        sec := dg[18] * 10 + dg[19];
        IF sec = 60 THEN
            sec := 59;
            leap := true;
        END IF;
        pos := 19;
        IF n > 19 AND get_byte(b, 19) = 46 THEN
            pos := 20;
            IF pos >= n THEN
                why := 'premature end of input';
                EXIT parse;
            END IF;
            WHILE pos < n AND get_byte(b, pos) BETWEEN 48 AND 57 LOOP
                IF digits < 9 THEN
                    nanos := nanos * 10 + get_byte(b, pos) - 48;
                END IF;
                digits := digits + 1;
                pos := pos + 1;
            END LOOP;
            IF digits = 0 THEN
                why := 'input contains invalid characters';
                EXIT parse;
            END IF;
            nanos := nanos * (10 ^ (9 - least(digits, 9)))::bigint;
        END IF;
        IF h > 23 OR mi > 59 OR sec > 59 THEN
            why := 'input is out of range';
            EXIT parse;
        END IF;
        -- The offset: Z, or a sign (+, - or U+2212) and hh:mm.
        IF pos >= n THEN
            why := 'premature end of input';
            EXIT parse;
        END IF;
        c := get_byte(b, pos);
        IF c IN (90, 122) THEN
            pos := pos + 1;
        ELSE
            IF c = 43 THEN
                neg := false;
                pos := pos + 1;
            ELSIF c = 45 THEN
                neg := true;
                pos := pos + 1;
            ELSIF c = 226 AND pos + 2 < n AND get_byte(b, pos + 1) = 136
                  AND get_byte(b, pos + 2) = 146 THEN
                neg := true;
                pos := pos + 3;
            ELSE
                why := 'input contains invalid characters';
                EXIT parse;
            END IF;
            IF n - pos < 2 THEN
                why := 'premature end of input';
                EXIT parse;
            END IF;
            IF get_byte(b, pos) NOT BETWEEN 48 AND 57 OR get_byte(b, pos + 1) NOT BETWEEN 48 AND 57 THEN
                why := 'input contains invalid characters';
                EXIT parse;
            END IF;
            oh := (get_byte(b, pos) - 48) * 10 + get_byte(b, pos + 1) - 48;
            pos := pos + 2;
            IF pos >= n THEN
                why := 'premature end of input';
                EXIT parse;
            END IF;
            IF get_byte(b, pos) <> 58 THEN
                why := 'input contains invalid characters';
                EXIT parse;
            END IF;
            pos := pos + 1;
            IF n - pos < 2 THEN
                why := 'premature end of input';
                EXIT parse;
            END IF;
            IF get_byte(b, pos + 1) NOT BETWEEN 48 AND 57
               OR get_byte(b, pos) NOT BETWEEN 48 AND 57 THEN
                why := 'input contains invalid characters';
                EXIT parse;
            END IF;
            IF get_byte(b, pos) >= 54 THEN
                why := 'input is out of range';
                EXIT parse;
            END IF;
            om := (get_byte(b, pos) - 48) * 10 + get_byte(b, pos + 1) - 48;
            pos := pos + 2;
            off := (oh * 3600 + om * 60) * CASE WHEN neg THEN -1 ELSE 1 END;
        END IF;
        IF pos < n THEN
            why := 'trailing input';
            EXIT parse;
        END IF;
        IF abs(off) >= 86400 THEN
            why := 'input is out of range';
            EXIT parse;
        END IF;
    END;
    IF why IS NOT NULL THEN
        PERFORM tether.enqueue_refuse(field,
            'not an RFC 3339 time (' || why || '): ' || tether.enqueue_debug(s, '"'));
    END IF;
    IF digits > 6 THEN
        PERFORM tether.enqueue_refuse(field,
            tether.enqueue_debug(s, '"') || ' has ' || digits || ' digits of a second; '
            || 'at most 6 (microseconds) are kept, so round it first');
    END IF;
    -- In UTC; a leap second (:60) is the last second of its minute plus
    -- one, as chrono keeps it: shown as :60, compared as within :59, and
    -- stored as the next second.
    total := tether.enqueue_days(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off;
    days := floor(total / 86400.0)::bigint;
    sod := total - days * 86400;
    in_range := total >= 0 AND total < 253402300800;
    at := ('1970-01-01 00:00:00'::timestamp + days * interval '1 day'
           + (sod + CASE WHEN leap THEN 1 ELSE 0 END) * interval '1 second'
           + (nanos / 1000) * interval '1 microsecond') AT TIME ZONE 'UTC';
    -- The UTC date of `days` (the inverse of tether.enqueue_days).
    z := days + 719468;
    era := (CASE WHEN z >= 0 THEN z ELSE z - 146096 END) / 146097;
    doe := z - era * 146097;
    yoe := (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy := doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp := (5 * doy + 2) / 153;
    ud := doy - (153 * mp + 2) / 5 + 1;
    um := CASE WHEN mp < 10 THEN mp + 3 ELSE mp - 9 END;
    uy := yoe + era * 400 + CASE WHEN um <= 2 THEN 1 ELSE 0 END;
    IF nanos = 0 THEN
        frac := '';
    ELSIF nanos % 1000000 = 0 THEN
        frac := '.' || lpad((nanos / 1000000)::text, 3, '0');
    ELSIF nanos % 1000 = 0 THEN
        frac := '.' || lpad((nanos / 1000)::text, 6, '0');
    ELSE
        frac := '.' || lpad(nanos::text, 9, '0');
    END IF;
    shown := CASE WHEN uy BETWEEN 0 AND 9999 THEN lpad(uy::text, 4, '0')
                  ELSE CASE WHEN uy < 0 THEN '-' ELSE '+' END
                       || lpad(abs(uy)::text, greatest(4, length(abs(uy)::text)), '0') END
        || '-' || lpad(um::text, 2, '0') || '-' || lpad(ud::text, 2, '0')
        || 'T' || lpad((sod / 3600)::text, 2, '0') || ':' || lpad((sod / 60 % 60)::text, 2, '0')
        || ':' || lpad((sod % 60 + CASE WHEN leap THEN 1 ELSE 0 END)::text, 2, '0')
        || frac || 'Z';
END
$fn$;

-- One job to enqueue, as read from its JSON body: the fields decoded and
-- typed, not yet checked against their bounds.
CREATE TYPE tether.enqueue_entry AS (
    queue               text,
    kind                text,
    payload             jsonb,
    priority            bigint,
    run_at              timestamptz,
    run_at_shown        text,
    run_at_in_range     boolean,
    delay_ms            bigint,
    max_attempts        bigint,
    backoff_base_ms     bigint,
    backoff_cap_ms      bigint,
    timeout_ms          bigint,
    idempotency_key     text,
    unique_key          text,
    tags                text[],
    expires_at          timestamptz,
    expires_at_shown    text,
    expires_at_in_range boolean,
    concurrency_key     text,
    headers             jsonb
);

-- Reads one enqueue body as the server's JSON decoding does (field names
-- prefixed by `prefix`, e.g. `jobs[3]`; `''` for a single job).
CREATE FUNCTION tether.enqueue_read(prefix text, body jsonb) RETURNS tether.enqueue_entry
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    e tether.enqueue_entry;
    k text;
    v jsonb;
    f text;
    i integer;
    has_queue boolean := false;
    has_kind boolean := false;
    has_base boolean;
    has_cap boolean;
    bk text;
    inst record;
BEGIN
    IF jsonb_typeof(body) IS DISTINCT FROM 'object' THEN
        PERFORM tether.enqueue_refuse(prefix, 'invalid type: ' || tether.enqueue_unexpected(body)
            || ', expected struct EnqueueRequest');
    END IF;
    e.payload := 'null';
    e.priority := 0;
    e.tags := '{}';
    FOR k, v IN SELECT j.key, j.value FROM jsonb_each(body) j LOOP
        f := CASE WHEN prefix = '' THEN k ELSE prefix || '.' || k END;
        CASE k
            WHEN 'queue' THEN
                e.queue := tether.enqueue_text(f, v);
                has_queue := true;
            WHEN 'kind' THEN
                e.kind := tether.enqueue_text(f, v);
                has_kind := true;
            WHEN 'payload' THEN
                e.payload := v;
            WHEN 'priority' THEN
                IF v <> 'null' THEN
                    e.priority := tether.enqueue_int(f, v, 16);
                END IF;
            WHEN 'run_at' THEN
                IF v <> 'null' THEN
                    inst := tether.enqueue_instant(f, v);
                    e.run_at := inst.at;
                    e.run_at_shown := inst.shown;
                    e.run_at_in_range := inst.in_range;
                END IF;
            WHEN 'delay_ms' THEN
                IF v <> 'null' THEN
                    e.delay_ms := tether.enqueue_int(f, v, 64);
                END IF;
            WHEN 'max_attempts' THEN
                IF v <> 'null' THEN
                    e.max_attempts := tether.enqueue_int(f, v, 32);
                END IF;
            WHEN 'timeout_ms' THEN
                IF v <> 'null' THEN
                    e.timeout_ms := tether.enqueue_int(f, v, 64);
                END IF;
            WHEN 'idempotency_key' THEN
                IF v <> 'null' THEN
                    e.idempotency_key := tether.enqueue_text(f, v);
                END IF;
            WHEN 'unique_key' THEN
                IF v <> 'null' THEN
                    e.unique_key := tether.enqueue_text(f, v);
                END IF;
            WHEN 'tags' THEN
                IF jsonb_typeof(v) = 'array' THEN
                    FOR i IN 0 .. jsonb_array_length(v) - 1 LOOP
                        e.tags := e.tags || tether.enqueue_text(f || '[' || i || ']', v -> i);
                    END LOOP;
                ELSIF v <> 'null' THEN
                    PERFORM tether.enqueue_refuse(f, 'invalid type: '
                        || tether.enqueue_unexpected(v) || ', expected a sequence');
                END IF;
            WHEN 'expires_at' THEN
                IF v <> 'null' THEN
                    inst := tether.enqueue_instant(f, v);
                    e.expires_at := inst.at;
                    e.expires_at_shown := inst.shown;
                    e.expires_at_in_range := inst.in_range;
                END IF;
            WHEN 'backoff' THEN
                IF jsonb_typeof(v) = 'object' THEN
                    has_base := false;
                    has_cap := false;
                    FOR bk IN SELECT jsonb_object_keys(v) LOOP
                        IF bk = 'base_ms' THEN
                            e.backoff_base_ms := tether.enqueue_int(f || '.base_ms', v -> bk, 64);
                            has_base := true;
                        ELSIF bk = 'cap_ms' THEN
                            e.backoff_cap_ms := tether.enqueue_int(f || '.cap_ms', v -> bk, 64);
                            has_cap := true;
                        ELSE
                            PERFORM tether.enqueue_refuse(f || '.' || bk, 'unknown field `' || bk
                                || '`, expected `base_ms` or `cap_ms`');
                        END IF;
                    END LOOP;
                    IF NOT has_base THEN
                        PERFORM tether.enqueue_refuse(f, 'missing field `base_ms`');
                    END IF;
                    IF NOT has_cap THEN
                        PERFORM tether.enqueue_refuse(f, 'missing field `cap_ms`');
                    END IF;
                ELSIF v <> 'null' THEN
                    PERFORM tether.enqueue_refuse(f, 'invalid type: '
                        || tether.enqueue_unexpected(v) || ', expected struct Backoff');
                END IF;
            WHEN 'concurrency_key' THEN
                IF v <> 'null' THEN
                    e.concurrency_key := tether.enqueue_text(f, v);
                END IF;
            WHEN 'headers' THEN
                IF jsonb_typeof(v) = 'object' THEN
                    PERFORM tether.enqueue_text(f || '.' || h.key, h.value) FROM jsonb_each(v) h;
                    IF v <> '{}' THEN
                        e.headers := v;
                    END IF;
                ELSIF v <> 'null' THEN
                    PERFORM tether.enqueue_refuse(f, 'invalid type: '
                        || tether.enqueue_unexpected(v) || ', expected a map');
                END IF;
            WHEN 'depends_on', 'depends_on_entries', 'dependency_failure', 'workflow_id' THEN
                IF v NOT IN ('null', '[]') THEN
                    PERFORM tether.enqueue_refuse(f, 'dependencies and workflows cannot be '
                        || 'enqueued from SQL; use the HTTP API (POST /v1/jobs, POST /v1/jobs/batch)');
                END IF;
            ELSE
                PERFORM tether.enqueue_refuse(f, 'unknown field `' || k || '`, expected one of '
                    || '`queue`, `kind`, `payload`, `priority`, `run_at`, `delay_ms`, '
                    || '`max_attempts`, `timeout_ms`, `idempotency_key`, `unique_key`, `tags`, '
                    || '`expires_at`, `backoff`, `concurrency_key`, `depends_on`, '
                    || '`depends_on_entries`, `dependency_failure`, `workflow_id`, `headers`');
        END CASE;
    END LOOP;
    IF NOT has_queue THEN
        PERFORM tether.enqueue_refuse(prefix, 'missing field `queue`');
    END IF;
    IF NOT has_kind THEN
        PERFORM tether.enqueue_refuse(prefix, 'missing field `kind`');
    END IF;
    RETURN e;
END
$fn$;

-- Checks one read entry's values in the order of
-- tether_core::validate::new_job, with the default payload limit (1 MiB).
CREATE FUNCTION tether.enqueue_check(prefix text, e tether.enqueue_entry) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    p text := CASE WHEN prefix = '' THEN '' ELSE prefix || '.' END;
    size bigint;
    stripped text;
    i integer;
    hk text;
    hv text;
    bad text;
    total bigint := 0;
BEGIN
    PERFORM tether.enqueue_check_name(p || 'queue', e.queue);
    PERFORM tether.enqueue_check_name(p || 'kind', e.kind);
    -- Bytes of compact JSON, as the server measures it: the text PostgreSQL
    -- writes, less the one space after each ',' and ':' outside strings.
    size := octet_length(e.payload::text);
    IF size > 1048576 THEN
        stripped := regexp_replace(e.payload::text, '"([^"\\]|\\.)*"', '', 'g');
        size := size - (octet_length(stripped) - octet_length(replace(stripped, ' ', '')));
        IF size > 1048576 THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = p || 'payload is ' || size || ' bytes, above the limit of 1048576 bytes';
        END IF;
    END IF;
    IF e.priority NOT BETWEEN -100 AND 100 THEN
        PERFORM tether.enqueue_refuse(p || 'priority',
            'must be between -100 and 100, got ' || e.priority);
    END IF;
    IF e.delay_ms IS NOT NULL THEN
        PERFORM tether.enqueue_check_millis(p || 'delay_ms', e.delay_ms, 0, 31622400000);
    END IF;
    IF e.run_at IS NOT NULL AND NOT e.run_at_in_range THEN
        PERFORM tether.enqueue_refuse(p || 'run_at',
            'must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z, got '
            || e.run_at_shown);
    END IF;
    IF e.expires_at IS NOT NULL AND NOT e.expires_at_in_range THEN
        PERFORM tether.enqueue_refuse(p || 'expires_at',
            'must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z, got '
            || e.expires_at_shown);
    END IF;
    IF e.max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM tether.enqueue_refuse(p || 'max_attempts',
            'must be between 1 and 1000, got ' || e.max_attempts);
    END IF;
    IF e.backoff_base_ms IS NOT NULL THEN
        PERFORM tether.enqueue_check_millis(p || 'backoff.base_ms', e.backoff_base_ms, 0, 31622400000);
        PERFORM tether.enqueue_check_millis(p || 'backoff.cap_ms', e.backoff_cap_ms, 0, 31622400000);
        IF e.backoff_base_ms > e.backoff_cap_ms THEN
            PERFORM tether.enqueue_refuse(p || 'backoff', 'base_ms (' || e.backoff_base_ms
                || ') must not exceed cap_ms (' || e.backoff_cap_ms || ')');
        END IF;
    END IF;
    IF e.timeout_ms IS NOT NULL THEN
        PERFORM tether.enqueue_check_millis(p || 'timeout_ms', e.timeout_ms, 1, 31622400000);
    END IF;
    IF e.idempotency_key IS NOT NULL THEN
        PERFORM tether.enqueue_check_key(p || 'idempotency_key', e.idempotency_key);
    END IF;
    IF e.unique_key IS NOT NULL THEN
        PERFORM tether.enqueue_check_key(p || 'unique_key', e.unique_key);
    END IF;
    IF e.concurrency_key IS NOT NULL THEN
        PERFORM tether.enqueue_check_name(p || 'concurrency_key', e.concurrency_key);
    END IF;
    IF cardinality(e.tags) > 32 THEN
        PERFORM tether.enqueue_refuse(p || 'tags', 'at most 32 tags, got ' || cardinality(e.tags));
    END IF;
    FOR i IN 1 .. cardinality(e.tags) LOOP
        PERFORM tether.enqueue_check_name(p || 'tags[' || (i - 1) || ']', e.tags[i]);
    END LOOP;
    -- Headers in the order of their names' bytes (tether_core::validate::headers).
    IF e.headers IS NOT NULL THEN
        i := (SELECT count(*) FROM jsonb_object_keys(e.headers));
        IF i > 32 THEN
            PERFORM tether.enqueue_refuse(p || 'headers', 'at most 32 headers, got ' || i);
        END IF;
        FOR hk, hv IN SELECT h.key, h.value FROM jsonb_each_text(e.headers) h
                      ORDER BY h.key COLLATE "C" LOOP
            IF octet_length(hk) = 0 OR octet_length(hk) > 64 THEN
                PERFORM tether.enqueue_refuse(p || 'headers',
                    'a header name must be 1 to 64 characters, got ' || octet_length(hk)
                    || ' (' || tether.enqueue_debug(hk, '"') || ')');
            END IF;
            bad := substring(hk FROM '[^A-Za-z0-9._-]');
            IF bad IS NOT NULL THEN
                PERFORM tether.enqueue_refuse(p || 'headers',
                    'header name ' || tether.enqueue_debug(hk, '"') || ' contains '
                    || tether.enqueue_debug(bad, '''') || '; allowed are A-Z a-z 0-9 . _ -');
            END IF;
            IF octet_length(hv) > 1024 THEN
                PERFORM tether.enqueue_refuse(p || 'headers.' || hk,
                    'must be at most 1024 bytes, got ' || octet_length(hv));
            END IF;
            bad := substring(hv FROM '[\u0001-\u001f\u007f-\u009f]');
            IF bad IS NOT NULL THEN
                PERFORM tether.enqueue_refuse(p || 'headers.' || hk,
                    'contains the control character ' || tether.enqueue_debug(bad, ''''));
            END IF;
            total := total + octet_length(hk) + octet_length(hv);
        END LOOP;
        IF total > 4096 THEN
            PERFORM tether.enqueue_refuse(p || 'headers',
                'names and values must be at most 4096 bytes in all, got ' || total);
        END IF;
    END IF;
END
$fn$;

-- Reads, checks and writes the jobs of `of_jobs` (a JSON array of enqueue
-- bodies; with `of_single`, the one body of `tether.enqueue`, whose fields
-- are named without the `jobs[i].` prefix) for tenant `of_tenant`.
CREATE FUNCTION tether.enqueue_jobs(of_tenant text, of_jobs jsonb, of_single boolean)
RETURNS TABLE (o_ord integer, o_id uuid, o_created boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    entries tether.enqueue_entry[] := '{}';
    e tether.enqueue_entry;
    n integer;
    i integer;
    prefix text;
    queue_names text[];
    existing bigint;
    missing bigint;
    new_id uuid;
    last_id uuid;
    held uuid;
    made timestamptz;
    due timestamptz;
    rounds integer;
    ready text[] := '{}';
BEGIN
    IF of_tenant IS NULL THEN
        PERFORM tether.enqueue_refuse('tenant', 'invalid type: null, expected a string');
    END IF;
    PERFORM tether.enqueue_check_name('tenant', of_tenant);
    IF EXISTS (SELECT 1 FROM tether.tenants t
               WHERE t.name = of_tenant AND t.suspended_at IS NOT NULL) THEN
        PERFORM tether.enqueue_refuse('tenant', 'tenant ' || tether.enqueue_debug(of_tenant, '"')
            || ' is suspended: nothing is enqueued for it until an admin resumes it');
    END IF;
    IF jsonb_typeof(of_jobs) IS DISTINCT FROM 'array' THEN
        PERFORM tether.enqueue_refuse('jobs', 'invalid type: '
            || tether.enqueue_unexpected(of_jobs) || ', expected a sequence');
    END IF;
    n := jsonb_array_length(of_jobs);
    -- Every entry's shape, then run_at with delay_ms, then the batch's
    -- size, then each entry's values: the server's order.
    FOR i IN 0 .. n - 1 LOOP
        entries := entries || tether.enqueue_read(
            CASE WHEN of_single THEN '' ELSE 'jobs[' || i || ']' END, of_jobs -> i);
    END LOOP;
    FOR i IN 1 .. n LOOP
        IF entries[i].run_at IS NOT NULL AND entries[i].delay_ms IS NOT NULL THEN
            PERFORM tether.enqueue_refuse(
                CASE WHEN of_single THEN '' ELSE 'jobs[' || (i - 1) || '].' END || 'run_at',
                'run_at and delay_ms are mutually exclusive');
        END IF;
    END LOOP;
    IF n < 1 OR n > 1000 THEN
        PERFORM tether.enqueue_refuse('jobs', 'must hold 1 to 1000 items, got ' || n);
    END IF;
    FOR i IN 1 .. n LOOP
        PERFORM tether.enqueue_check(CASE WHEN of_single THEN '' ELSE 'jobs[' || (i - 1) || ']' END,
                                     entries[i]);
    END LOOP;

    -- Queue rows: the missing ones created within the default limit.
    SELECT array_agg(DISTINCT x.queue) INTO queue_names FROM unnest(entries) x;
    IF EXISTS (SELECT 1 FROM unnest(queue_names) m(name)
               WHERE NOT EXISTS (SELECT 1 FROM tether.queues q
                                 WHERE q.tenant = of_tenant AND q.name = m.name)) THEN
        PERFORM pg_advisory_xact_lock(1952805890, hashtext(of_tenant));
        SELECT (SELECT count(*) FROM tether.queues q WHERE q.tenant = of_tenant),
               (SELECT count(*) FROM unnest(queue_names) m(name)
                WHERE NOT EXISTS (SELECT 1 FROM tether.queues q
                                  WHERE q.tenant = of_tenant AND q.name = m.name))
        INTO existing, missing;
        IF missing > 0 AND existing + missing > 1000 THEN
            RAISE EXCEPTION USING ERRCODE = 'program_limit_exceeded',
                MESSAGE = 'the tenant already has 1000 queues, the most allowed; a queue with '
                    || 'no jobs and default settings is removed by maintenance, and the operator '
                    || 'may raise --max-queues-per-tenant';
        END IF;
    END IF;
    -- Held until the transaction ends; a row removed meanwhile is put back.
    PERFORM pg_advisory_xact_lock_shared(1952805889, hashtext(of_tenant));
    INSERT INTO tether.queues (tenant, name)
    SELECT of_tenant, m.name FROM unnest(queue_names) m(name)
    ON CONFLICT DO NOTHING;

    FOR i IN 1 .. n LOOP
        e := entries[i];
        rounds := 0;
        LOOP
            new_id := tether.uuid_v7();
            IF last_id IS NOT NULL AND new_id <= last_id THEN
                new_id := tether.uuid_after(last_id);
            END IF;
            last_id := new_id;
            INSERT INTO tether.jobs AS j (id, tenant, queue, kind, payload, state, priority,
                attempt, max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at,
                updated_at, unique_key, idempotency_key, tags, expires_at, timeout_ms,
                concurrency_key, headers)
            SELECT new_id, of_tenant, e.queue, e.kind, e.payload, 'queued', e.priority, 0,
                COALESCE(e.max_attempts, q.max_attempts, 5),
                COALESCE(e.backoff_base_ms, q.backoff_base_ms, 1000),
                COALESCE(e.backoff_cap_ms, q.backoff_cap_ms, 3600000),
                COALESCE(e.run_at, now() + COALESCE(e.delay_ms, 0) * interval '1 millisecond'),
                now(), now(), e.unique_key, e.idempotency_key, e.tags, e.expires_at,
                e.timeout_ms, e.concurrency_key, e.headers
            FROM (SELECT 1) one
            LEFT JOIN tether.queues q ON q.tenant = of_tenant AND q.name = e.queue
            ON CONFLICT DO NOTHING
            RETURNING j.created_at, j.run_at INTO made, due;
            IF FOUND THEN
                INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
                VALUES (new_id, of_tenant, made, 'enqueued', 0);
                IF due <= now() THEN
                    ready := ready || e.queue;
                END IF;
                o_ord := i - 1;
                o_id := new_id;
                o_created := true;
                RETURN NEXT;
                EXIT;
            END IF;
            -- Its key is taken: the idempotency key first, then the unique
            -- key of a waiting, queued or running job.
            held := NULL;
            IF e.idempotency_key IS NOT NULL THEN
                SELECT j.id INTO held FROM tether.jobs j
                WHERE j.tenant = of_tenant AND j.idempotency_key = e.idempotency_key;
            END IF;
            IF held IS NULL AND e.unique_key IS NOT NULL THEN
                SELECT j.id INTO held FROM tether.jobs j
                WHERE j.tenant = of_tenant AND j.unique_key = e.unique_key
                  AND j.state IN ('waiting', 'queued', 'running');
            END IF;
            IF held IS NOT NULL THEN
                o_ord := i - 1;
                o_id := held;
                o_created := false;
                RETURN NEXT;
                EXIT;
            END IF;
            -- The holder ended or was pruned in between: try again.
            rounds := rounds + 1;
            IF rounds >= 8 THEN
                RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
                    MESSAGE = '1 job(s) kept racing with concurrent enqueues for the same keys';
            END IF;
        END LOOP;
    END LOOP;

    -- The wake-up hint (see notify.rs), delivered at commit.
    PERFORM pg_notify('tether_jobs', of_tenant || ' ' || r.queue || ' ' || r.jobs)
    FROM (SELECT q AS queue, count(*) AS jobs FROM unnest(ready) q GROUP BY q ORDER BY q) r;
END
$fn$;

-- Enqueues one job: `payload` is its payload, `options` the optional fields
-- of a `POST /v1/jobs` body. Answers the job's id and whether it is new
-- (false: an existing job holds its idempotency or active unique key).
CREATE FUNCTION tether.enqueue(tenant text, queue text, kind text,
                               payload jsonb DEFAULT 'null', options jsonb DEFAULT '{}')
RETURNS TABLE (id uuid, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    k text;
BEGIN
    options := COALESCE(options, '{}');
    IF jsonb_typeof(options) <> 'object' THEN
        PERFORM tether.enqueue_refuse('options', 'invalid type: '
            || tether.enqueue_unexpected(options) || ', expected a map');
    END IF;
    FOR k IN SELECT o.key FROM jsonb_object_keys(options) o(key)
             WHERE o.key IN ('queue', 'kind', 'payload') ORDER BY 1 LOOP
        PERFORM tether.enqueue_refuse(k,
            'is an argument of tether.enqueue, not one of its options');
    END LOOP;
    RETURN QUERY
    SELECT r.o_id, r.o_created
    FROM tether.enqueue_jobs(enqueue.tenant, jsonb_build_array(options || jsonb_build_object(
        'queue', enqueue.queue, 'kind', enqueue.kind,
        'payload', COALESCE(enqueue.payload, 'null'))), true) r;
END
$fn$;

-- Enqueues 1–1000 jobs all-or-nothing: `jobs` is the `jobs` array of a
-- `POST /v1/jobs/batch` body. Answers each entry's index (from 0), job id
-- and whether it is new, in the order of `jobs`.
CREATE FUNCTION tether.enqueue_many(tenant text, jobs jsonb)
RETURNS TABLE (ord integer, id uuid, created boolean)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT r.o_ord, r.o_id, r.o_created FROM tether.enqueue_jobs($1, $2, false) r
$fn$;

-- Only roles granted EXECUTE may enqueue (docs/API.md).
REVOKE ALL ON FUNCTION tether.enqueue(text, text, text, jsonb, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION tether.enqueue_many(text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION tether.enqueue_jobs(text, jsonb, boolean) FROM PUBLIC;
