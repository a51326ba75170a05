-- The PostgreSQL store: the same tables as the SQLite store has after its migration 0010, in
-- PostgreSQL's types. Payloads stay text: they are stored and streamed back byte for byte.

-- One row per conversation, keyed by (principal, agent_id).
create table session_info (
    id              bigint generated always as identity primary key,
    principal       text    not null,
    agent_id        text    not null,
    -- our id: storage, display, workspace name, and (unified) the agent's own id
    session_id      text    not null unique,
    -- the id the agent reported in its init message; the only id ever passed to --resume
    sdk_session_id  text,
    unified         boolean not null default false,
    backend         text    not null,
    title           text,
    cwd             text    not null,
    model           text,
    permission_mode text,
    created_at      text    not null,
    last_active_at  text    not null,
    message_count   bigint  not null default 0,
    -- highest seq ever assigned; seqs are never reused, even after a rewind
    last_seq        bigint  not null default 0,
    -- user turns sent and result messages stored
    prompt_count    bigint  not null default 0,
    result_count    bigint  not null default 0,
    total_cost_usd  double precision not null default 0,
    input_tokens    bigint  not null default 0,
    output_tokens   bigint  not null default 0,
    duration_ms     bigint  not null default 0,
    -- how the agent's next launch starts (JSON of `store::NextLaunch`); NULL: resume
    next_launch     text,
    -- stored messages up to this seq are not in the agent's own memory
    memory_from_seq bigint  not null default 0,
    -- the user seq of the turn running now; NULL: none
    running_seq     bigint,
    -- true while an import is still storing the conversation's messages
    pending         boolean not null default false,
    -- JSON of `protocol::LaunchOptions`; NULL: none
    launch_options  text,
    unique (principal, agent_id)
);

create index session_info_by_activity on session_info (principal, last_active_at desc);

-- Every stored frame of a conversation, in seq order.
create table messages (
    session_pk    bigint  not null references session_info (id) on delete cascade,
    seq           bigint  not null,
    message_type  text    not null,
    sdk_uuid      text,
    -- the user's own chat messages (the start of a turn)
    prompt        boolean not null default false,
    -- on result rows: uuid of the turn's last assistant message (the rewind anchor)
    turn_anchor   text,
    payload       text    not null,
    created_at    text    not null,
    turn_cost_usd double precision,
    primary key (session_pk, seq)
);

-- Scheduled prompts (see the SQLite migration 0010 for what each column holds).
create table schedules (
    id          text primary key,
    principal   text    not null,
    name        text    not null,
    agent_id    text    not null,
    content     text    not null,
    cron        text,
    every_secs  bigint,
    mode        text    not null,
    options     text    not null,
    enabled     boolean not null,
    next_run_ms bigint  not null,
    last_run    text,
    created_at  text    not null,
    updated_at  text    not null
);
create index schedules_by_principal on schedules (principal, created_at);
create index schedules_due on schedules (enabled, next_run_ms);

-- A payload as JSON, or NULL when it is not valid JSON (or holds what jsonb refuses, such as
-- \u0000): searches and status checks skip such rows instead of failing.
create function agentmux_try_jsonb(payload text) returns jsonb
language plpgsql immutable as $$
begin
    return payload::jsonb;
exception when others then
    return null;
end $$;

-- The text a search looks in under a message's `content`: the content itself when it is a
-- string, and every string value under a `text` or `content` key below it (a prompt, text
-- blocks, tool results); never keys, ids or other fields.
create function agentmux_content_texts(node jsonb, key text) returns setof text
language plpgsql immutable as $$
declare
    child record;
begin
    case jsonb_typeof(node)
    when 'string' then
        if key is null or key in ('text', 'content') then
            return next node #>> '{}';
        end if;
    when 'object' then
        for child in select * from jsonb_each(node) loop
            return query select * from agentmux_content_texts(child.value, child.key);
        end loop;
    when 'array' then
        for child in select value from jsonb_array_elements(node) loop
            return query select * from agentmux_content_texts(child.value, '#');
        end loop;
    else
    end case;
end $$;
