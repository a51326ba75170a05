-- The audit log: one row per action on a conversation, a share, a link, a schedule or an
-- import, appended and never changed (rows older than store.audit_retention_days go). `owner`
-- and `agent_id` name the conversation (the owner's id; text, so an entry outlives its
-- conversation); `principal` acted; `detail` is a JSON object; `outcome` is `ok` or the error
-- code the action was refused with.
create table audit_log (
    id         bigserial primary key,
    at         text    not null,
    principal  text    not null,
    action     text    not null,
    owner      text,
    agent_id   text,
    detail     text    not null,
    outcome    text    not null
);
create index audit_by_owner on audit_log (owner, id);
create index audit_by_at on audit_log (at);

-- Links that give whoever opens them a share of a conversation: only the SHA-256 of the
-- secret part is kept. A link ends at `expires_at`, after `max_uses` uses, or when revoked
-- (its row deleted); it goes with its conversation.
create table share_links (
    id         text    primary key,
    session_pk bigint not null references session_info (id) on delete cascade,
    hash       text    not null,
    role       text    not null check (role in ('viewer', 'editor')),
    created_at text    not null,
    expires_at text    not null,
    max_uses   bigint,
    uses       bigint  not null default 0
);
create index share_links_by_session on share_links (session_pk);
