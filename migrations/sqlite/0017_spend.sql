-- Each principal's own agent credentials: one row per variable, its value sealed (AES-256-GCM)
-- with a key that is never in the database (`key_id` names which one, by a hash of it); the
-- sealed text is bound to its principal, agent and name, so it can't be moved to another row.
create table credentials (
    principal text not null,
    agent     text not null,
    name      text not null,
    key_id    text not null,
    nonce     blob not null,
    sealed    blob not null,
    set_at    text not null,
    primary key (principal, agent, name)
);
-- Spending caps an admin set for a principal (US dollars; NULL: the configured default).
create table budgets (
    principal   text primary key,
    daily_usd   real,
    monthly_usd real,
    updated_at  text not null
);
-- A conversation's own spending cap (the chat option `budget_usd`).
create table session_budgets (
    session_pk integer primary key references session_info (id) on delete cascade,
    budget_usd real not null
);
-- What each turn cost, as its agent reported it: a ledger that deleting or rewinding a
-- conversation does not change, which budgets and usage reports are summed from.
create table turn_usage (
    id                    integer primary key,
    principal             text    not null,
    session_id            text    not null,
    agent_id              text    not null,
    agent                 text    not null,
    model                 text    not null,
    at                    text    not null,
    cost_usd              real    not null,
    input_tokens          integer not null,
    output_tokens         integer not null,
    cache_read_tokens     integer not null,
    cache_creation_tokens integer not null
);
create index turn_usage_by_principal on turn_usage (principal, at);
create index turn_usage_by_session on turn_usage (session_id);
