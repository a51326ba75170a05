-- Web Push: the browsers each principal subscribed (the browser's endpoint URL and its keys;
-- `events` the kinds of news it wants, comma-separated), and the single-use tokens behind a
-- notification's action buttons, kept by their SHA-256 only (`request_id` for a permission
-- prompt's Allow and Deny; none for Reply) until used or expired.
create table push_subscriptions (
    id text primary key,
    principal text not null,
    endpoint text not null,
    p256dh text not null,
    auth text not null,
    events text not null,
    created_at text not null,
    unique (principal, endpoint)
);
create table push_actions (
    token_hash text primary key,
    principal text not null,
    agent_id text not null,
    request_id text,
    expires_ms bigint not null
);
create index push_actions_by_expiry on push_actions (expires_ms);
