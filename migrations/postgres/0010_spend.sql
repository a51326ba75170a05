-- Each principal's own agent credentials: one row per variable, its value sealed (AES-256-GCM)
-- with a key that is never in the database (`key_id` names which one, by a hash of it); the
-- sealed text is bound to its principal, agent and name, so it can't be moved to another row.
create table credentials (
    principal text not null,
    agent     text not null,
    name      text not null,
    key_id    text not null,
    nonce     bytea not null,
    sealed    bytea not null,
    set_at    text not null,
    primary key (principal, agent, name)
);
-- Spending caps an admin set for a principal (US dollars; NULL: the configured default).
create table budgets (
    principal   text primary key,
    daily_usd   double precision,
    monthly_usd double precision,
    updated_at  text not null
);
-- A conversation's own spending cap (the chat option `budget_usd`).
create table session_budgets (
    session_pk bigint primary key references session_info (id) on delete cascade,
    budget_usd double precision not null
);
-- What each turn cost, as its agent reported it: a ledger that deleting or rewinding a
-- conversation does not change, which budgets and usage reports are summed from.
create table turn_usage (
    id                    bigint generated always as identity primary key,
    principal             text    not null,
    session_id            text    not null,
    agent_id              text    not null,
    agent                 text    not null,
    model                 text    not null,
    at                    text    not null,
    cost_usd              double precision not null,
    input_tokens          bigint  not null,
    output_tokens         bigint  not null,
    cache_read_tokens     bigint  not null,
    cache_creation_tokens bigint  not null
);
create index turn_usage_by_principal on turn_usage (principal, at);
create index turn_usage_by_session on turn_usage (session_id);
