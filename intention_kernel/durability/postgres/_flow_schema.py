"""Migration 8 of the PostgreSQL store: budget counters and provider slots (``_flow``).

Budget counters per line and window, open reservations and operators' limits; provider slots
(leases on the database clock), the queue of waiters (``ticket`` order) and each provider's
cool-down and starts this minute. ``budget_reserve`` and ``slot_acquire`` are ``_flow_rules``
in SQL: a row lock on the counter (on the provider's state row) serializes the decisions of
one line (one provider), so concurrent reservations and grants never interleave.
"""

from __future__ import annotations

__all__ = ["FLOW_MIGRATION"]

FLOW_MIGRATION = """
CREATE TABLE {s}.budget_counters (
    budget          text NOT NULL,
    scope_key       text NOT NULL,
    window_start    timestamptz NOT NULL,
    per             text NOT NULL,
    tokens_used     bigint NOT NULL DEFAULT 0,
    tokens_reserved bigint NOT NULL DEFAULT 0,
    cost_used       float8 NOT NULL DEFAULT 0,
    cost_reserved   float8 NOT NULL DEFAULT 0,
    calls           bigint NOT NULL DEFAULT 0,
    tokens_limit    bigint,
    cost_limit      float8,
    PRIMARY KEY (budget, scope_key, window_start)
);
CREATE INDEX budget_counters_by_window ON {s}.budget_counters (window_start);
CREATE TABLE {s}.budget_reservations (
    id           text PRIMARY KEY,
    budget       text NOT NULL,
    scope_key    text NOT NULL,
    window_start timestamptz NOT NULL,
    tokens       bigint NOT NULL,
    cost         float8 NOT NULL,
    reserved_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE {s}.budget_limits (
    budget    text NOT NULL,
    scope_key text NOT NULL,
    tokens    bigint CHECK (tokens > 0),
    cost      float8 CHECK (cost > 0),
    actor     text NOT NULL,
    note      text NOT NULL,
    set_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (budget, scope_key)
);
CREATE TABLE {s}.provider_state (
    provider      text PRIMARY KEY,
    cooling_until timestamptz,
    minute        timestamptz,
    started       integer NOT NULL DEFAULT 0,
    tickets       bigint NOT NULL DEFAULT 0
);
CREATE TABLE {s}.provider_slots (
    provider   text NOT NULL,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (provider, holder)
);
CREATE TABLE {s}.provider_waiters (
    provider   text NOT NULL,
    holder     text NOT NULL,
    ticket     bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (provider, holder)
);
CREATE FUNCTION {s}.budget_window(per text, at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE per
        WHEN 'all' THEN 'epoch'::timestamptz
        WHEN 'hour' THEN date_trunc('hour', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        WHEN 'day' THEN date_trunc('day', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        WHEN 'month' THEN date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        ELSE to_timestamp((floor(extract(epoch FROM at) / rtrim(per, 's')::bigint)
                           * rtrim(per, 's')::bigint)::float8)
    END
$$;
CREATE FUNCTION {s}.budget_reserve(
    b text, k text, p text, tok_limit bigint, cst_limit float8, tok bigint, cst float8,
    rid text)
RETURNS TABLE (granted boolean, window_start timestamptz, tokens_used bigint,
               tokens_reserved bigint, cost_used float8, cost_reserved float8,
               calls bigint, tokens_limit bigint, cost_limit float8, overridden boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    w   timestamptz := {s}.budget_window(p, now());
    c   {s}.budget_counters;
    lt  bigint := tok_limit;
    lc  float8 := cst_limit;
    ov  boolean := false;
    ok  boolean;
    o   record;
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
    INSERT INTO {s}.budget_counters AS n (budget, scope_key, window_start, per)
    VALUES (b, k, w, p) ON CONFLICT DO NOTHING;
    SELECT * INTO c FROM {s}.budget_counters AS n
    WHERE n.budget = b AND n.scope_key = k AND n.window_start = w FOR UPDATE;
    FOR o IN SELECT l.scope_key, l.tokens, l.cost FROM {s}.budget_limits AS l
             WHERE l.budget = b AND l.scope_key IN ('*', k)
             ORDER BY l.scope_key = k LOOP
        IF o.tokens IS NOT NULL THEN lt := o.tokens; ov := true; END IF;
        IF o.cost IS NOT NULL THEN lc := o.cost; ov := true; END IF;
    END LOOP;
    ok := (lt IS NULL OR c.tokens_used + c.tokens_reserved < lt)
          AND (lc IS NULL OR c.cost_used + c.cost_reserved < lc);
    IF ok THEN
        UPDATE {s}.budget_counters AS n
        SET tokens_reserved = n.tokens_reserved + tok, cost_reserved = n.cost_reserved + cst,
            calls = n.calls + 1, tokens_limit = tok_limit, cost_limit = cst_limit, per = p
        WHERE n.budget = b AND n.scope_key = k AND n.window_start = w
        RETURNING * INTO c;
        INSERT INTO {s}.budget_reservations (id, budget, scope_key, window_start, tokens, cost)
        VALUES (rid, b, k, w, tok, cst);
    END IF;
    RETURN QUERY SELECT ok, w, c.tokens_used, c.tokens_reserved, c.cost_used,
        c.cost_reserved, c.calls, lt, lc, ov;
END $$;
CREATE FUNCTION {s}.slot_acquire(
    p text, h text, concurrent integer, per_minute integer, ttl float8, busy_wait float8,
    grace float8)
RETURNS TABLE (granted boolean, reason text, wait float8, "position" integer,
               cooling_until timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    at      timestamptz := clock_timestamp();
    st      {s}.provider_state;
    holds   boolean;
    mine    bigint;
    in_use  integer;
    ahead   integer;
    started integer;
    why     text := 'granted';
    pause   float8 := 0;
BEGIN
    INSERT INTO {s}.provider_state AS n (provider) VALUES (p) ON CONFLICT DO NOTHING;
    SELECT * INTO st FROM {s}.provider_state AS n WHERE n.provider = p FOR UPDATE;
    DELETE FROM {s}.provider_slots AS n WHERE n.provider = p AND n.expires_at <= at;
    DELETE FROM {s}.provider_waiters AS n WHERE n.provider = p AND n.expires_at <= at;
    holds := EXISTS (SELECT 1 FROM {s}.provider_slots AS n
                     WHERE n.provider = p AND n.holder = h);
    SELECT n.ticket INTO mine FROM {s}.provider_waiters AS n
    WHERE n.provider = p AND n.holder = h;
    SELECT count(*) INTO in_use FROM {s}.provider_slots AS n
    WHERE n.provider = p AND n.holder <> h;
    SELECT count(*) INTO ahead FROM {s}.provider_waiters AS n
    WHERE n.provider = p AND (mine IS NULL OR n.ticket < mine);
    started := CASE WHEN st.minute = date_trunc('minute', at) THEN st.started ELSE 0 END;
    IF holds THEN
        why := 'granted';
    ELSIF st.cooling_until > at THEN
        why := 'cooling';
        pause := extract(epoch FROM st.cooling_until - at);
    ELSIF concurrent IS NOT NULL AND in_use + ahead >= concurrent THEN
        why := 'busy';
        pause := busy_wait;
    ELSIF per_minute IS NOT NULL AND started + ahead >= per_minute THEN
        why := 'rate';
        pause := extract(epoch FROM date_trunc('minute', at) + interval '1 minute' - at);
    END IF;
    IF why = 'granted' THEN
        INSERT INTO {s}.provider_slots AS n (provider, holder, expires_at)
        VALUES (p, h, at + make_interval(secs => ttl))
        ON CONFLICT (provider, holder) DO UPDATE SET expires_at = excluded.expires_at;
        DELETE FROM {s}.provider_waiters AS n WHERE n.provider = p AND n.holder = h;
        IF NOT holds THEN
            UPDATE {s}.provider_state AS n
            SET started = CASE WHEN n.minute = date_trunc('minute', at)
                          THEN n.started + 1 ELSE 1 END,
                minute = date_trunc('minute', at)
            WHERE n.provider = p;
        END IF;
    ELSIF mine IS NULL THEN
        UPDATE {s}.provider_state AS n SET tickets = n.tickets + 1
        WHERE n.provider = p RETURNING n.tickets INTO mine;
        INSERT INTO {s}.provider_waiters (provider, holder, ticket, expires_at)
        VALUES (p, h, mine, at + make_interval(secs => pause + grace));
    ELSE
        UPDATE {s}.provider_waiters AS n
        SET expires_at = at + make_interval(secs => pause + grace)
        WHERE n.provider = p AND n.holder = h;
    END IF;
    RETURN QUERY SELECT why = 'granted', why, pause, ahead,
        CASE WHEN why = 'cooling' THEN st.cooling_until END;
END $$;
"""
