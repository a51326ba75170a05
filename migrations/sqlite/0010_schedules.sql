-- Scheduled prompts: each is owned by a principal and sends `content` to a conversation at
-- every tick of `cron` (5 fields, in the configured time zone) or every `every_secs` seconds.
-- `options` is the JSON of the chat options as checked at creation; `next_run_ms` is the next
-- tick in milliseconds since the Unix epoch; `last_run` is the JSON of the latest run.
create table schedules (
    id text primary key,
    principal text not null,
    name text not null,
    agent_id text not null,
    content text not null,
    cron text,
    every_secs integer,
    mode text not null,
    options text not null,
    enabled integer not null,
    next_run_ms integer not null,
    last_run text,
    created_at text not null,
    updated_at text not null
);
create index schedules_by_principal on schedules(principal, created_at);
create index schedules_due on schedules(enabled, next_run_ms);
