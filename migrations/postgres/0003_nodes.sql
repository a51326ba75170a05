-- The nodes sharing this database: each one records itself at start and then every third of its
-- lease, so that `agentmux cluster status` can list them. `last_seen` is null once it stopped.
create table nodes (
    node_id    text primary key,
    address    text not null,
    lease_secs bigint not null,
    started_at timestamptz not null,
    last_seen  timestamptz
);
